//! `allocsoak trace` end to end on a real program: clang compiling
//! mimalloc's C sources, fetched from the package registry (a build of a
//! real project), recorded through the `LD_PRELOAD` recorder and replayed
//! clean under system, mimalloc and jemalloc; the same replay finds a
//! planted bug only a program holding over 10,000 small blocks reaches,
//! and so does the trace's drift series in a soak, filed as one group.

mod common;

use std::path::Path;

use common::{allocsoak, count, registry_crate, run_allocsoak, soak_until};

#[test]
fn a_real_build_is_recorded_and_replays_clean_under_three_allocators() {
    let mimalloc = registry_crate("libmimalloc-sys", "0.1.49").join("c_src/mimalloc/v2");
    let clang =
        soak::engines::project::clang().expect("clang matching nightly's LLVM (just setup)");
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("traces");
    let (src, include) = (mimalloc.join("src/static.c"), mimalloc.join("include"));
    let object = dir.path().join("static.o");
    let compile = [
        clang.as_str(),
        "-O1",
        "-c",
        src.to_str().unwrap(),
        "-I",
        include.to_str().unwrap(),
        "-o",
        object.to_str().unwrap(),
    ];
    let record = |args: &[&str]| {
        let mut all = vec!["trace", "record", "--out", out.to_str().unwrap(), "--"];
        all.extend(args);
        run_allocsoak(allocsoak(), &all)
    };
    let (status, text) = record(&compile);
    assert!(status.status.success(), "{text}");
    let trace = text
        .lines()
        .find_map(|l| l.strip_prefix("replay the biggest: allocsoak trace replay "))
        .unwrap_or_else(|| panic!("no trace named: {text}"))
        .to_string();
    // A folder that holds traces is never recorded into again.
    let (again, said) = record(&compile);
    assert_eq!(again.status.code(), Some(2), "{said}");
    assert!(said.contains("already holds traces"), "{said}");
    assert!(
        std::path::Path::new(&trace).is_file(),
        "the first recording is kept"
    );

    let (replayed, table) = run_allocsoak(allocsoak(), &["trace", "replay", &trace]);
    assert!(replayed.status.success(), "{table}");
    // allocator, calls, secs, peak, grew "a / b", most apart "+c @n", result
    let rows: Vec<Vec<&str>> = table
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|w| w.len() == 10 && w[2].parse::<f64>().is_ok())
        .collect();
    let allocators: Vec<&str> = rows.iter().map(|r| r[0]).collect();
    assert_eq!(allocators, ["system", "mimalloc", "jemalloc"], "{table}");
    for w in rows {
        assert_eq!(w[9], "clean", "{table}");
        let calls: u64 = w[1].parse().unwrap();
        assert!(calls > 1_000_000, "{} made {calls} calls: {table}", w[0]);
        // Its memory beside the recorded program's: both grew.
        let (replayed, recorded): (f64, f64) = (w[4].parse().unwrap(), w[6].parse().unwrap());
        assert!(replayed > 1.0 && recorded > 1.0, "{table}");
        assert!(w[8].starts_with('@'), "{table}");
    }

    // Peers on the same work: a workload seed and the trace, each on two
    // allocators.
    let seed = std::fs::read_dir(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../corpus/workload/seeds"
    ))
    .unwrap()
    .next()
    .unwrap()
    .unwrap()
    .path();
    let (compared, table) = run_allocsoak(
        allocsoak(),
        &[
            "compare",
            "--allocator",
            "system",
            "--allocator",
            "jemalloc",
            "--workload",
            seed.to_str().unwrap(),
            "--trace",
            &trace,
            "--curves",
            dir.path().join("curves.csv").to_str().unwrap(),
        ],
    );
    assert!(compared.status.success(), "{table}");
    let clean: Vec<&str> = table.lines().filter(|l| l.ends_with("  clean")).collect();
    assert_eq!(clean.len(), 4, "{table}");
    // A trace's row: the most memory it added, and the median while it
    // ran, no more than the most.
    for row in clean.iter().filter(|l| l.starts_with("trace ")) {
        let w: Vec<f64> = row
            .split_whitespace()
            .filter_map(|w| w.parse().ok())
            .collect();
        let (peak, steady) = (w[2], w[3]);
        assert!(steady > 1.0 && steady <= peak, "{row}");
    }
    // Its memory over time: bars on the work's scale, one row reaching
    // the top, and every point in the CSV.
    assert!(
        clean
            .iter()
            .any(|l| l.starts_with("trace ") && l.contains('█')),
        "{table}"
    );
    let curves = std::fs::read_to_string(dir.path().join("curves.csv")).unwrap();
    assert!(
        curves.starts_with("work,allocator,point,at,bytes\n"),
        "{curves}"
    );
    for allocator in ["system", "jemalloc"] {
        let points = curves
            .lines()
            .filter(|l| l.starts_with("\"trace ") && l.contains(&format!(",{allocator},")))
            .count();
        assert!(points > 10, "{points} points of {allocator}'s: {curves}");
    }

    let (found, line) = run_allocsoak(
        allocsoak(),
        &[
            "trace",
            "replay",
            &trace,
            "--allocator",
            "zoo:crowded-reissue",
        ],
    );
    assert_eq!(found.status.code(), Some(1), "{line}");
    assert!(
        line.contains("allocsoak violation: contents: op #0 `trace "),
        "{line}"
    );

    // The trace as drift series in a soak: a series per allocator, its
    // readings stored; under zoo:crowded-reissue the replay's violation
    // is filed through the crash pipeline as one group, which the
    // workload fuzz binary reproduces from the trace itself.
    let config = dir.path().join("soak.toml");
    std::fs::write(
        &config,
        format!(
            "targets = [\"alloc_ops\"]\nallocators = [\"system\"]\n[drift]\ntargets = []\n\
             traces = [\"{trace}\"]\nallocators = [\"system\", \"zoo:crowded-reissue\"]\n\
             cpu_share = 1.0\ninterval_secs = 1\n"
        ),
    )
    .unwrap();
    let state = dir.path().join("state");
    let series = format!(
        "trace:{}",
        Path::new(&trace).file_name().unwrap().to_string_lossy()
    );
    let points = format!(
        "SELECT COUNT(*) FROM drift_point p JOIN drift_segment s ON s.id = p.segment_id \
         JOIN slot ON slot.id = s.slot_id WHERE slot.target = '{series}' AND slot.allocator = 'system'"
    );
    let filed = |s: &Path| {
        let contents = count(
            s,
            "SELECT COUNT(*) FROM crash_group WHERE kind = 'contents'",
        );
        contents == 1 && count(s, &points) >= 3
    };
    let out = soak_until(
        &state,
        &[
            "--config",
            config.to_str().unwrap(),
            "--duration",
            "120",
            "--jobs",
            "1",
        ],
        filed,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let groups = common::groups(&state);
    assert_eq!(groups.len(), 1, "{groups:?}\n{stdout}");
    let (id, kind, _, repro, _) = &groups[0];
    assert_eq!(kind, "contents", "{groups:?}");
    let status: String = common::db(&state)
        .query_row("SELECT status FROM crash_group WHERE id = ?1", [id], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(
        status, "new",
        "the fuzz binary reproduced it from the trace"
    );
    let program = std::fs::read_to_string(state.join("crashes").join(id).join("program.txt"));
    assert!(
        program
            .as_deref()
            .unwrap_or("")
            .contains("A recorded trace"),
        "{program:?}"
    );
    let repro = std::process::Command::new("sh")
        .args(["-c", repro])
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&repro.stderr);
    assert!(said.contains("allocsoak violation: contents"), "{said}");
    let (_, table) = run_allocsoak(allocsoak(), &["drift", "--state", state.to_str().unwrap()]);
    assert!(table.contains(&format!("{series}/system")), "{table}");
}

/// A trace's drift series that drifts is filed as one `rss-drift` group
/// whose culprit is the trace, which `allocsoak repro` replays: a made
/// trace of blocks one thread allocates and another frees, under
/// `zoo:late-remote-leak` (it keeps memory past a million such frees).
#[test]
fn a_trace_that_drifts_is_filed_with_the_trace_as_its_culprit() {
    let dir = tempfile::tempdir().unwrap();
    let mut made = shadow::op::trace::Writer::new();
    for i in 0..2000u64 {
        made.record(1, 1, 64, 0, 0x10_0000 + i * 80);
    }
    for i in 0..2000u64 {
        made.record(2, 2, 0x10_0000 + i * 80, 0, 0);
    }
    std::fs::write(dir.path().join("made.trace"), &made.out).unwrap();
    // A pass makes 2,000 remote frees in 4,000 calls, so the leak starts
    // 2 M calls into a process: repro's replay (`narrow_ops` × 32 calls)
    // runs 6.4 M (with 2 M it read 69.5 B/kop, interval 8.3 to 116.3: flat).
    let config = dir.path().join("soak.toml");
    std::fs::write(
        &config,
        "targets = [\"alloc_ops\"]\nallocators = [\"system\"]\n[drift]\ntargets = []\n\
         traces = [\"made.trace\"]\nallocators = [\"zoo:late-remote-leak\"]\n\
         cpu_share = 1.0\ninterval_secs = 1\nnarrow_ops = 200000\nnarrow_secs = 120\n",
    )
    .unwrap();
    let (config, state) = (config.to_str().unwrap(), dir.path().join("state"));
    soak_until(
        &state,
        &["--config", config, "--duration", "600", "--jobs", "1"],
        common::drift_filed_with_culprits,
    );
    let groups = common::groups(&state);
    assert_eq!(groups.len(), 1, "{groups:?}");
    let (id, kind, _, _, title) = &groups[0];
    assert_eq!(kind, "rss-drift");
    assert!(
        title.contains("trace:made.trace/zoo:late-remote-leak"),
        "{title}"
    );
    let culprits = state.join("crashes").join(id).join("culprits");
    assert!(culprits.join("made.trace").is_file());
    let repro = allocsoak()
        .args(["--config", config, "repro", id, "--state"])
        .arg(&state)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&repro.stdout);
    assert_eq!(repro.status.code(), Some(1), "{text}");
    assert!(text.contains("verdict: drifts"), "{text}");
}
