//! RSS drift end to end: the real `allocsoak` soaking with drift workers
//! (the plain `drift` replay binary `allocsoak build` makes) on a leaking
//! zoo allocator and on a correct one.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::{allocsoak, count, soak_until, ONE_AT_A_TIME};

/// A config that fuzzes alloc_ops/system and watches `drift` (TOML lines
/// of the `[drift]` table).
fn config(dir: &Path, drift: &str) -> std::path::PathBuf {
    let path = dir.join("soak.toml");
    std::fs::write(
        &path,
        format!("targets = [\"alloc_ops\"]\nallocators = [\"system\"]\n[drift]\n{drift}\n"),
    )
    .unwrap();
    path
}

/// `zoo:leak-on-shrink` keeps the old block of every shrinking realloc
/// of 1 KiB or more: its replay goes over its RSS limit in seconds. The
/// soak files one `rss-drift` group for the series, narrowed to a few
/// programs that `allocsoak repro` confirms still drift, and `allocsoak
/// drift` and `status` show it.
#[test]
fn a_leaking_allocator_is_filed_as_rss_drift_with_its_culprits() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let config = config(
        dir.path(),
        "cpu_share = 1.0\nallocators = [\"zoo:leak-on-shrink\"]\ninterval_secs = 1\n\
         rss_limit_mb = 256\nnarrow_ops = 20000\nnarrow_secs = 600",
    );
    let config = config.to_str().unwrap();
    // Narrowing replays share one core with the series and the fuzz slice:
    // 11 replays took 209 s on a 2-core machine where 60 s had been enough
    // (5 replays, 952 programs to 119). The soak ends once the group is
    // filed, whenever narrowing is done.
    let out = soak_until(
        &state,
        &["--config", config, "--duration", "600", "--jobs", "1"],
        common::drift_filed_with_culprits,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let groups = count(
        &state,
        "SELECT COUNT(*) FROM crash_group WHERE kind = 'rss-drift'",
    );
    assert_eq!(groups, 1, "{stdout}");
    let id: String = common::db(&state)
        .query_row(
            "SELECT id FROM crash_group WHERE kind = 'rss-drift'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert!(stdout.contains(&id), "the summary names it: {stdout}");
    let group = state.join("crashes").join(&id);
    let culprits = std::fs::read_dir(group.join("culprits")).unwrap().count();
    let seeds =
        std::fs::read_dir(Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpus/alloc_ops/seeds"))
            .unwrap()
            .count();
    assert!(
        culprits >= 1 && culprits * 10 < seeds,
        "{culprits} of {seeds}"
    );
    let page = std::fs::read_to_string(group.join("REPORT.md")).unwrap();
    assert!(
        page.contains("rss-drift in alloc_ops/zoo:leak-on-shrink"),
        "{page}"
    );
    assert!(page.contains("![retained memory") && group.join("chart.svg").is_file());
    assert!(
        std::fs::read_to_string(group.join("series.csv"))
            .unwrap()
            .lines()
            .count()
            >= 2
    );

    let repro = allocsoak()
        .args(["--config", config, "repro", &id, "--state"])
        .arg(&state)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&repro.stdout);
    assert_eq!(
        repro.status.code(),
        Some(1),
        "{text}{}",
        String::from_utf8_lossy(&repro.stderr)
    );
    assert!(text.contains("verdict: drifts"), "{text}");

    let table = printed("drift", &state);
    assert!(table.contains("alloc_ops/zoo:leak-on-shrink"), "{table}");
    let status = printed("status", &state);
    assert!(
        status
            .lines()
            .any(|l| l.starts_with("alloc_ops/zoo:leak-on-shrink") && l.contains("filed")),
        "{status}"
    );
}

/// A correct allocator's series: readings land in the store as they come,
/// so a kill -9 of the soak loses none already written; the next soak
/// adds a segment to the same series (a gap, not a new series); and no
/// alarm is raised.
#[test]
fn a_series_survives_kill_and_restart_and_a_correct_allocator_is_not_flagged() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    // A verdict from a short series: little warm-up, and fewer ops than
    // an overnight soak's million (still 20 points past warm-up).
    let config = config(
        dir.path(),
        "cpu_share = 0.5\ninterval_secs = 1\nwarmup_ops = 10000\nmin_ops = 50000",
    );
    let config = config.to_str().unwrap();
    // A soak longer than the test, stopped by it.
    let spawn = || {
        allocsoak()
            .args([
                "--config",
                config,
                "soak",
                "--duration",
                "600",
                "--jobs",
                "1",
                "--state",
            ])
            .arg(&state)
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(dir.path().join("soak.err")).unwrap())
            .spawn()
            .unwrap()
    };
    let mut child = spawn();
    let points = |state: &Path| -> i64 {
        if !state.join("store.sqlite").is_file() {
            return 0;
        }
        common::db(state)
            .query_row("SELECT COUNT(*) FROM drift_point", [], |r| r.get(0))
            .unwrap_or(0)
    };
    let start = Instant::now();
    while points(&state) < 8 {
        assert!(
            start.elapsed() < Duration::from_secs(120),
            "no readings stored"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    let before = points(&state);
    // SAFETY: `kill` has no memory preconditions; our own child's pid, not yet waited
    // for, so not reused.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    child.wait().unwrap();
    assert!(points(&state) >= before, "a kill lost readings");
    let first: Vec<(i64, i64)> = readings(&state);

    // The lock of the killed soak is stale; the next one takes over. It
    // runs until its own segment has 30 readings (past warm-up, over the
    // 20 points a verdict needs), however slowly a loaded machine takes
    // them, then stops on SIGTERM as a user's Ctrl-C stops it.
    let mut child = spawn();
    let start = Instant::now();
    while readings(&state).len() < first.len() + 30 {
        assert!(
            start.elapsed() < Duration::from_secs(300),
            "the second soak stored {} readings in 300 s",
            readings(&state).len() - first.len()
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    // SAFETY: `kill` has no memory preconditions; the second soak's pid, our child, not
    // yet waited for, so not reused.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert!(
        status.success(),
        "the second soak: {}",
        std::fs::read_to_string(dir.path().join("soak.err")).unwrap_or_default()
    );
    let after = readings(&state);
    assert!(after.len() > first.len());
    assert_eq!(
        &after[..first.len()],
        &first[..],
        "the first segment's readings are kept"
    );
    let segments = count(&state, "SELECT COUNT(DISTINCT segment_id) FROM drift_point");
    assert_eq!(segments, 2);
    assert_eq!(
        count(&state, "SELECT COUNT(*) FROM slot WHERE engine = 'drift'"),
        1
    );
    assert_eq!(
        count(
            &state,
            "SELECT COUNT(*) FROM crash_group WHERE kind = 'rss-drift'"
        ),
        0
    );
    // Fitted by the soak's own [drift] rules.
    let table = printed_by("drift", &state, Some(config));
    let line = table
        .lines()
        .find(|l| l.starts_with("alloc_ops/system"))
        .unwrap();
    // Flat, not merely not drifting: "too few samples" is no verdict.
    assert!(line.ends_with("flat"), "{table}");
    assert_eq!(
        line.split_whitespace().nth(1),
        Some("2"),
        "two segments: {table}"
    );
}

/// (segment, ops) of every stored reading, in order.
fn readings(state: &Path) -> Vec<(i64, i64)> {
    let db = common::db(state);
    let mut stmt = db
        .prepare("SELECT segment_id, ops FROM drift_point ORDER BY segment_id, secs, id")
        .unwrap();
    let rows = stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?))).unwrap();
    rows.map(Result::unwrap).collect()
}

/// A violation a replay hits is filed through the crash pipeline like a
/// fuzzer's: `zoo:latent-corruption` damages the allocator in one program
/// and panics in a later one, so the drift replay's history (the programs
/// it ran before) is what makes the group reproduce.
#[test]
fn a_violation_in_a_replay_is_filed_with_the_programs_before_it() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let config = config(
        dir.path(),
        "cpu_share = 1.0\nallocators = [\"zoo:latent-corruption\"]\ninterval_secs = 1",
    );
    let config = config.to_str().unwrap();
    let filed = |s: &Path| {
        let panics = count(s, "SELECT COUNT(*) FROM crash_group WHERE kind = 'panic'");
        let ended = "SELECT COUNT(*) FROM drift_segment WHERE outcome = 'violation'";
        panics == 1 && count(s, ended) > 0
    };
    let out = soak_until(
        &state,
        &["--config", config, "--duration", "45", "--jobs", "1"],
        filed,
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let groups = common::groups(&state);
    let panics: Vec<_> = groups.iter().filter(|g| g.1 == "panic").collect();
    assert_eq!(panics.len(), 1, "{groups:?}\n{stdout}");
    let (id, _, _, _, title) = panics[0];
    assert!(title.contains("size-class table is corrupt"), "{title}");
    assert!(
        stdout.contains(&format!("violation filed as {id}")),
        "{stdout}"
    );
    let status: String = common::db(&state)
        .query_row("SELECT status FROM crash_group WHERE id = ?1", [id], |r| {
            r.get(0)
        })
        .unwrap();
    assert_eq!(status, "new", "it reproduced after its history");
    assert!(state.join("crashes").join(id).join("history").is_dir());
    let outcome: String = common::db(&state)
        .query_row(
            "SELECT outcome FROM drift_segment ORDER BY id LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(outcome, "violation");
}

/// What `allocsoak <command> --state <state>` prints.
fn printed(command: &str, state: &Path) -> String {
    printed_by(command, state, None)
}

/// What `allocsoak [--config <config>] <command> --state <state>` prints.
fn printed_by(command: &str, state: &Path, config: Option<&str>) -> String {
    let mut cmd = allocsoak();
    if let Some(config) = config {
        cmd.args(["--config", config]);
    }
    let out = cmd.args([command, "--state"]).arg(state).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}
