//! `output_within` ends what it ran, and everything that started, however
//! it hangs: past its limit, a little after its budget is over, and when
//! the process itself exits but leaves a child holding its pipes
//! (libFuzzer's merge child after its parent died, a sanitizer's
//! symbolizer).

use std::io;
use std::path::Path;
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use triage::budget::Budget;
use triage::replay::{output_within, PAST_BUDGET, PAST_STOP};

/// A shell that starts a `sleep` holding its stdout and stderr (for two
/// minutes: a run that waits for it fails the tests' 30-s bound), writes
/// that sleep's pid to `pid_file`, then runs `then`.
fn with_lingering_child(pid_file: &Path, then: &str) -> Command {
    let mut cmd = Command::new("sh");
    cmd.arg("-c").arg(format!(
        "sleep 120 & echo $! > {}; echo started >&2; {then}",
        pid_file.display()
    ));
    cmd
}

/// Whether the process whose pid is in `pid_file` is gone, or a zombie
/// (dead, waiting to be reaped), within a few seconds: a SIGKILL takes
/// effect a moment after `kill` returns.
fn dead(pid_file: &Path) -> bool {
    let pid = std::fs::read_to_string(pid_file).unwrap();
    let gone = || {
        std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).map_or(true, |s| {
            // The state is the field after the command's closing parenthesis.
            s.rsplit_once(')')
                .is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'))
        })
    };
    let start = Instant::now();
    while !gone() {
        if start.elapsed() > Duration::from_secs(5) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    true
}

/// Runs [`with_lingering_child`] through `output_within`: what it
/// returned, how long that took, and whether the lingering child is dead
/// by then.
fn run(then: &str, limit: Duration, budget: &Budget) -> (io::Result<Output>, Duration, bool) {
    let dir = tempfile::tempdir().unwrap();
    let pid = dir.path().join("pid");
    let start = Instant::now();
    let out = output_within(&mut with_lingering_child(&pid, then), limit, budget);
    let took = start.elapsed();
    (out, took, dead(&pid))
}

#[test]
fn a_run_past_its_limit_is_killed_with_what_it_started() {
    let (out, took, dead) = run("exec sleep 120", Duration::from_secs(1), &Budget::default());
    assert!(took < Duration::from_secs(30), "{took:?}");
    let out = out.unwrap();
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.starts_with("started"), "{stderr}");
    assert!(stderr.contains("killed after"), "{stderr}");
    assert!(dead, "the child it started still runs");
}

#[test]
fn a_run_whose_budget_is_over_is_killed_and_shows_nothing() {
    let budget = Budget {
        until: Some(Instant::now() + Duration::from_millis(500)),
        stop: None,
    };
    let (out, took, dead) = run("exec sleep 120", Duration::from_secs(60), &budget);
    // Given time to end as usual first (a replay nearly done when filing
    // closes), then killed.
    assert!(took >= PAST_BUDGET, "{took:?}");
    assert!(took < Duration::from_secs(30), "{took:?}");
    let e = out.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::Interrupted, "{e}");
    assert!(dead, "the child it started still runs");
}

#[test]
fn a_run_the_soak_was_asked_to_stop_is_killed_sooner() {
    let stop = AtomicBool::new(false);
    let budget = Budget {
        until: None,
        stop: Some(&stop),
    };
    let (out, took, dead) = std::thread::scope(|s| {
        s.spawn(|| {
            std::thread::sleep(Duration::from_millis(500));
            stop.store(true, Ordering::Relaxed);
        });
        run("exec sleep 120", Duration::from_secs(60), &budget)
    });
    assert!(took >= PAST_STOP, "{took:?}");
    assert!(took < PAST_BUDGET, "{took:?}");
    let e = out.unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::Interrupted, "{e}");
    assert!(dead, "the child it started still runs");
}

#[test]
fn a_run_that_exits_leaving_a_child_on_its_pipes_ends_with_it() {
    let (out, took, dead) = run("exit 3", Duration::from_secs(600), &Budget::default());
    assert!(took < Duration::from_secs(30), "{took:?}");
    let out = out.unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "started\n");
    assert!(dead, "the child it started still runs");
}
