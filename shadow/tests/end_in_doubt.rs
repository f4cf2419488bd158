//! With `ALLOCSOAK_END_IN_DOUBT=1` (a soak's `-fork` children), a process
//! that gets past a violation that leaves memory in doubt ends at once
//! with `EXIT_IN_DOUBT`, its count written; without it the program ends
//! quietly and the process goes on. Each case runs in a child process
//! (this test binary again), which the end would take down.

use std::path::Path;
use std::process::Command;

use shadow::tolerance::{tolerate, EXIT_IN_DOUBT};

const CHILD: &str = "ALLOCSOAK_TEST_END_IN_DOUBT";

/// The double issue's overlap (a block handed out twice), the key the
/// soak files it by.
const OVERLAP: &str = "overlap in alloc size 0..64 align ..16: block N+N overlaps live block N+N";

const REPORT: &str = "==9==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x7b at pc 0x55\n\
    WRITE of size 8 at 0x7b thread T0\n\
    \x20   #0 0x55 in shadow::pattern::fill_range /work/shadow/src/pattern.rs:60:9\n\
    \x20   #1 0x55 in <shadow::executor::Executor>::probe_usable /work/shadow/src/executor.rs:500:13\n\
    SUMMARY: AddressSanitizer: heap-buffer-overflow /work/shadow/src/pattern.rs:60:9 in shadow::pattern::fill_range\n";

const SANITIZER_KEY: &str =
    "asan: heap-buffer-overflow WRITE in shadow::executor::Executor::probe_usable";

/// What a child runs: the case its variable names, then a program after
/// it (which runs only when the process went on).
fn child(case: &str) {
    zoo::register();
    let ran_on = |text: &str| {
        let program: shadow::Program = "target alloc_ops\nalloc size=8 align=8\n".parse().unwrap();
        tolerate(|| {
            shadow::run(&program, shadow::allocator::by_name("system").unwrap());
        });
        println!("went on past the {text}");
    };
    match case {
        "overlap" => {
            let program: shadow::Program = "target alloc_ops\n\
                 alloc size=40 align=8\nfree slot=0\nalloc size=40 align=8\nalloc size=40 align=8\n"
                .parse()
                .unwrap();
            let allocator = shadow::allocator::by_name("zoo:double-issue").unwrap();
            tolerate(|| {
                shadow::run(&program, allocator);
            });
            ran_on("overlap");
        }
        "report" => {
            tolerate(|| {
                shadow::sanitizer::on_report(REPORT);
                shadow::sanitizer::check();
            });
            ran_on("report");
        }
        other => panic!("no case {other}"),
    }
}

/// Runs `case` in a child with `key` tolerated, ending in doubt or not:
/// its exit status, what it printed, and the count of `key` it wrote.
fn run(case: &str, key: &str, end: bool, dir: &Path) -> (Option<i32>, String, u64) {
    let findings = dir.join(format!("findings-{case}-{end}"));
    std::fs::write(dir.join("tolerate"), format!("{key}\n")).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_process_ends_past_memory_in_doubt_when_told",
            "--nocapture",
        ])
        .env(CHILD, case)
        .env("ALLOCSOAK_TOLERATE", dir.join("tolerate"))
        .env("ALLOCSOAK_FINDINGS", &findings)
        .env("ALLOCSOAK_END_IN_DOUBT", if end { "1" } else { "0" })
        .output()
        .unwrap();
    let mut count = 0;
    for entry in std::fs::read_dir(&findings).into_iter().flatten() {
        let text = std::fs::read_to_string(entry.unwrap().path()).unwrap();
        let counts: std::collections::HashMap<String, u64> = serde_json::from_str(&text).unwrap();
        count += counts.get(key).copied().unwrap_or(0);
    }
    let printed = String::from_utf8_lossy(&out.stdout).into_owned();
    (out.status.code(), printed, count)
}

#[test]
fn a_process_ends_past_memory_in_doubt_when_told() {
    if let Ok(case) = std::env::var(CHILD) {
        return child(&case);
    }
    let dir = tempfile::tempdir().unwrap();
    for (case, key) in [("overlap", OVERLAP), ("report", SANITIZER_KEY)] {
        let (status, printed, count) = run(case, key, true, dir.path());
        assert_eq!(status, Some(EXIT_IN_DOUBT), "{case}: {printed}");
        assert!(!printed.contains("went on"), "{case}: {printed}");
        assert_eq!(count, 1, "{case}: {printed}");

        let (status, printed, count) = run(case, key, false, dir.path());
        assert_eq!(status, Some(0), "{case}: {printed}");
        assert!(
            printed.contains(&format!("went on past the {case}")),
            "{case}: {printed}"
        );
        assert_eq!(count, 1, "{case}: {printed}");
    }
}
