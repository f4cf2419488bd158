//! `allocsoak coverage` end to end: a declared C allocator whose one
//! function only a call from a second thread reaches is reported never run
//! after a soak of `alloc_ops` (every call on one thread), and run after
//! one of `mt_ops` into the same state dir; the totals are `llvm-cov
//! report`'s on the same profile.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::with_config;

/// The test's own copy of `testdata/coverage`, outside the checkout.
fn author_repo() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join("allocsoak-test-coverage");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for file in ["allocsoak.toml", "threads.c"] {
        std::fs::copy(
            manifest.join("tests/testdata/coverage").join(file),
            dir.join(file),
        )
        .unwrap();
    }
    dir
}

fn soak(config: &Path, state: &Path, target: &str) {
    let (out, text) = with_config(
        config,
        &[
            "soak",
            "--duration",
            "15",
            "--jobs",
            "1",
            "--target",
            target,
            "--state",
            state.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "soak failed:\n{text}");
}

/// `allocsoak --config <config> coverage --state <state> <args>`.
fn coverage(config: &Path, state: &Path, args: &[&str]) -> (std::process::Output, String) {
    let mut all = vec!["coverage", "--state", state.to_str().unwrap()];
    all.extend(args);
    with_config(config, &all)
}

/// The report's summary of `threads`.
fn covered(config: &Path, state: &Path) -> serde_json::Value {
    let (out, text) = coverage(config, state, &[]);
    assert!(out.status.success(), "coverage failed:\n{text}");
    assert!(text.contains("coverage: threads: "), "{text}");
    let summary = std::fs::read(state.join("coverage/summary.json")).unwrap();
    let summary: serde_json::Value = serde_json::from_slice(&summary).unwrap();
    let threads = summary["allocators"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["allocator"] == "threads")
        .expect("threads is covered")
        .clone();
    assert!(threads["inputs"].as_u64().unwrap() > 0, "{threads}");
    assert_eq!(threads["failed"], 0, "{threads}");
    threads
}

fn never_run(threads: &serde_json::Value) -> Vec<String> {
    let by_file = threads["coverage"]["never_run"].as_object().unwrap();
    by_file
        .values()
        .flat_map(|names| names.as_array().unwrap().iter())
        .map(|n| n.as_str().unwrap().to_string())
        .collect()
}

/// `llvm-cov report`'s TOTAL row on the report's own profile and objects:
/// regions, missed, functions, missed, lines, missed.
fn llvm_cov_totals(threads: &serde_json::Value) -> [u64; 6] {
    let major = soak::engines::project::llvm_major().unwrap();
    let mut cmd = Command::new(format!("llvm-cov-{major}"));
    cmd.arg("report")
        .arg("-instr-profile")
        .arg(threads["profdata"].as_str().unwrap());
    for (i, o) in threads["objects"].as_array().unwrap().iter().enumerate() {
        if i > 0 {
            cmd.arg("-object");
        }
        cmd.arg(o.as_str().unwrap());
    }
    for r in threads["roots"].as_array().unwrap() {
        cmd.arg(r.as_str().unwrap());
    }
    let out = cmd
        .output()
        .expect("llvm-cov runs (`just setup` installs it)");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let total = text
        .lines()
        .find(|l| l.starts_with("TOTAL"))
        .unwrap_or_else(|| panic!("no TOTAL row:\n{text}"));
    let numbers: Vec<u64> = total
        .split_whitespace()
        .filter_map(|w| w.parse().ok())
        .collect();
    // TOTAL regions missed cover% functions missed executed% lines missed cover% ...
    [
        numbers[0], numbers[1], numbers[2], numbers[3], numbers[4], numbers[5],
    ]
}

/// The report's totals as `llvm-cov report`'s TOTAL row has them.
fn totals(covered: &serde_json::Value) -> [u64; 6] {
    let t = &covered["coverage"]["totals"];
    let count = |m: &str, f: &str| t[m][f].as_u64().unwrap();
    [
        count("regions", "count"),
        count("regions", "count") - count("regions", "covered"),
        count("functions", "count"),
        count("functions", "count") - count("functions", "covered"),
        count("lines", "count"),
        count("lines", "count") - count("lines", "covered"),
    ]
}

#[test]
fn a_function_only_another_thread_reaches_is_never_run_until_mt_ops_runs_it() {
    let _one = common::ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let repo = author_repo();
    let config = repo.join("allocsoak.toml");
    let state = repo.join("state");
    let (out, text) = with_config(&config, &["build"]);
    assert!(out.status.success(), "build failed:\n{text}");

    soak(&config, &state, "alloc_ops");
    let threads = covered(&config, &state);
    let never = never_run(&threads);
    assert!(
        never.contains(&"from_another_thread".to_string()),
        "{never:?}"
    );
    assert!(
        !never.iter().any(|n| n == "cv_malloc" || n == "note_caller"),
        "{never:?}"
    );
    let md = std::fs::read_to_string(state.join("coverage/COVERAGE.md")).unwrap();
    assert!(md.contains("`from_another_thread`"), "{md}");
    assert!(
        Path::new(threads["html"].as_str().unwrap()).is_file(),
        "{threads}"
    );

    // The dashboard shows the table and serves the HTML it links.
    let site = repo.join("site");
    let (out, text) = with_config(
        &config,
        &[
            "dash",
            "--state",
            state.to_str().unwrap(),
            "--export",
            site.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "dash --export failed:\n{text}");
    let overview = std::fs::read_to_string(site.join("index.html")).unwrap();
    assert!(overview.contains("<td>threads</td>"), "{overview}");
    assert!(site
        .join("files/coverage/html/threads/index.html")
        .is_file());
    let data = std::fs::read_to_string(site.join("static/data.js")).unwrap();
    assert!(data.contains(r#""allocators":["threads"]"#), "{data}");

    // The numbers are llvm-cov's own, and the list of functions never run
    // is as long as its count of them.
    let t = &threads["coverage"]["totals"];
    let count = |m: &str, f: &str| t[m][f].as_u64().unwrap();
    assert_eq!(
        never.len() as u64,
        count("functions", "count") - count("functions", "covered")
    );
    assert_eq!(llvm_cov_totals(&threads), totals(&threads));

    soak(&config, &state, "mt_ops");
    let threads = covered(&config, &state);
    let never = never_run(&threads);
    assert!(
        !never.contains(&"from_another_thread".to_string()),
        "{never:?}"
    );

    // An allocator with no sources to map: one line, exit 2, and the last
    // report stays.
    refused(&config, &state, "system", "system: the C library's malloc");

    a_dylib_is_covered_through_its_coverage_build(&config, &state, &repo);
}

/// clang of nightly's LLVM on tiny_alloc.c into `out`, with `flags`.
fn build_tiny(out: &Path, flags: &[&str]) {
    let source =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shadow/tests/testdata/tiny_alloc.c");
    let status = Command::new(soak::engines::project::clang().unwrap())
        .args(["-O1", "-fPIC", "-shared"])
        .args(flags)
        .arg("-o")
        .arg(out)
        .arg(source)
        .status()
        .unwrap();
    assert!(status.success(), "building {} failed", out.display());
}

/// `coverage --allocator <allocator>`: exit 2 with one line naming `why`,
/// and the last report unchanged.
fn refused(config: &Path, state: &Path, allocator: &str, why: &str) {
    let summary = std::fs::read(state.join("coverage/summary.json")).unwrap();
    let (out, text) = coverage(config, state, &["--allocator", allocator]);
    assert_eq!(out.status.code(), Some(2), "{text}");
    let error: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("allocsoak:"))
        .collect();
    assert_eq!(error.len(), 1, "{text}");
    assert!(error[0].contains(why), "{text}");
    let after = std::fs::read(state.join("coverage/summary.json")).unwrap();
    assert_eq!(after, summary, "the last report changed");
}

/// A `dylib:` allocator is reported on through the coverage build beside
/// it (`libtiny.coverage.so`), which runs in the soak's library's place.
fn a_dylib_is_covered_through_its_coverage_build(config: &Path, state: &Path, dir: &Path) {
    let library = dir.join("libtiny.so");
    build_tiny(
        &library,
        &[
            "-fsanitize=fuzzer-no-link,address",
            "-fsanitize-recover=address",
        ],
    );
    let dylib = format!("dylib:{}:t_", library.display());
    refused(
        config,
        state,
        &dylib,
        "libtiny.coverage.so does not exist; build it from the library's sources with `clang-",
    );
    let coverage_build = dir.join("libtiny.coverage.so");
    // Built without the mapping, then with it.
    build_tiny(&coverage_build, &["-fprofile-instr-generate"]);
    refused(config, state, &dylib, "has no coverage mapping");
    build_tiny(
        &coverage_build,
        &["-fprofile-instr-generate", "-fcoverage-mapping"],
    );

    let (out, text) = coverage(
        config,
        state,
        &["--allocator", &dylib, "--target", "alloc_ops"],
    );
    assert!(out.status.success(), "coverage failed:\n{text}");
    let summary = std::fs::read(state.join("coverage/summary.json")).unwrap();
    let summary: serde_json::Value = serde_json::from_slice(&summary).unwrap();
    let tiny = &summary["allocators"][0];
    assert_eq!(tiny["allocator"], dylib.as_str(), "{summary}");
    assert!(tiny["inputs"].as_u64().unwrap() > 0, "{tiny}");
    assert_eq!(tiny["failed"], 0, "{tiny}");
    let files: Vec<&str> = tiny["coverage"]["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert!(
        files.len() == 1 && files[0].ends_with("tiny_alloc.c"),
        "{files:?}"
    );
    let never = never_run(tiny);
    assert!(
        !never.iter().any(|n| n == "t_malloc" || n == "t_free"),
        "{never:?}"
    );
    let t = &tiny["coverage"]["totals"];
    let count = |m: &str, f: &str| t[m][f].as_u64().unwrap();
    assert!(count("functions", "covered") > 0, "{t}");
    assert_eq!(llvm_cov_totals(tiny), totals(tiny));

    // A library rebuilt after its coverage build: the report would be of
    // other code.
    std::thread::sleep(std::time::Duration::from_millis(20));
    build_tiny(
        &library,
        &[
            "-fsanitize=fuzzer-no-link,address",
            "-fsanitize-recover=address",
        ],
    );
    refused(config, state, &dylib, "is older than");
}
