//! The daemon under SIGKILL at random moments and in the middle of merges
//! and filings (minimizations included), which it counts from what each
//! kill left on disk: no merged corpus input and no crash artifact is ever
//! lost, and the store always opens. And the systemd notify protocol
//! against a fake NOTIFY_SOCKET.

use std::collections::BTreeSet;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// Two bugs, two groups, that a soak files in its first seconds.
const BUGS: &str = "zoo:double-issue+tiny-realloc-short";

fn start(state: &Path, secs: &str, (target, allocator): (&str, &str)) -> Child {
    Command::new(env!("CARGO_BIN_EXE_allocsoak"))
        .arg("soak")
        .arg("--state")
        .arg(state)
        .args(["--target", target, "--allocator", allocator])
        .args(["--jobs", "2", "--slice-secs", "8", "--duration", secs])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The slot a round soaks, and what its kill aims at. A round that aims
/// at a filing brings a bug no group holds yet, and one that aims at a
/// merge a target whose corpus is empty, so there is one to hit: a soak
/// that has filed its bugs and saturated its corpus does neither.
fn round_plan(round: usize) -> ((&'static str, &'static str), Option<Busy>) {
    match round {
        0 => (("alloc_ops", BUGS), Some(Busy::Filing)),
        2 => (("heap_api", BUGS), Some(Busy::Merging)),
        4 => (("alloc_ops", "zoo:usable-oversize"), Some(Busy::Filing)),
        6 => (("mt_ops", BUGS), Some(Busy::Merging)),
        8 => (("alloc_ops", "zoo:small-underalign"), Some(Busy::Filing)),
        10 => (("diff_mimalloc", BUGS), Some(Busy::Merging)),
        _ => (("alloc_ops", BUGS), None),
    }
}

/// Every file that must never be lost: corpus inputs (by name: libFuzzer
/// names them by content hash) and crash inputs.
fn kept(state: &Path) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    for target in shadow::Target::ALL {
        if let Ok(entries) = std::fs::read_dir(state.join("corpus").join(target.name())) {
            for e in entries {
                out.insert(format!(
                    "corpus/{target}/{}",
                    e.unwrap().file_name().to_string_lossy()
                ));
            }
        }
    }
    if let Ok(groups) = std::fs::read_dir(state.join("crashes")) {
        for g in groups {
            let g = g.unwrap();
            let name = g.file_name().to_string_lossy().into_owned();
            if name.starts_with('.') {
                continue;
            }
            for file in ["original"] {
                if g.path().join(file).is_file() {
                    out.insert(format!("crashes/{name}/{file}"));
                }
            }
            if let Ok(inputs) = std::fs::read_dir(g.path().join("inputs")) {
                for i in inputs {
                    out.insert(format!(
                        "crashes/{name}/inputs/{}",
                        i.unwrap().file_name().to_string_lossy()
                    ));
                }
            }
        }
    }
    out
}

/// Files in `dir` a filing would take: every file but records, counts
/// and what is still being written.
fn inputs_in(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .map(|d| {
            d.filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
                .filter(|n| {
                    !(n.starts_with('.') || n.ends_with(".json") || n.starts_with("slow-unit"))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Crash artifacts and saved findings waiting in slice scratch (filed on
/// the next start).
fn scratch_artifacts(state: &Path) -> usize {
    let Ok(slices) = std::fs::read_dir(state.join("slices")) else {
        return 0;
    };
    slices
        .filter_map(|s| s.ok())
        .map(|s| {
            inputs_in(&s.path().join("artifacts")).len()
                + inputs_in(&s.path().join("findings")).len()
        })
        .sum()
}

/// Artifacts a soak parked in `pending/` when its filing time was over.
fn parked(state: &Path) -> Vec<String> {
    let Ok(slices) = std::fs::read_dir(state.join("pending")) else {
        return Vec::new();
    };
    slices
        .filter_map(|s| s.ok())
        .flat_map(|s| {
            let mut inputs = inputs_in(&s.path().join("artifacts"));
            inputs.extend(inputs_in(&s.path().join("findings")));
            inputs
        })
        .collect()
}

/// Everything found and not yet filed.
fn pending_artifacts(state: &Path) -> usize {
    scratch_artifacts(state) + parked(state).len()
}

/// What a daemon was in the middle of.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Busy {
    /// A corpus merge: building the next generation, or dropping the last.
    Merging,
    /// Filing a new crash group, in its temporary folder (minimizing, most
    /// of the time).
    Filing,
}

/// The corpus generations other than each target's current one.
fn other_generations(state: &Path) -> BTreeSet<String> {
    let current: Vec<String> = shadow::Target::ALL
        .iter()
        .filter_map(|t| {
            let link = std::fs::read_link(state.join("corpus").join(t.name())).ok()?;
            Some(link.file_name()?.to_string_lossy().into_owned())
        })
        .collect();
    std::fs::read_dir(state.join("corpus"))
        .map(|d| {
            d.filter_map(|e| Some(e.ok()?.file_name().to_string_lossy().into_owned()))
                .filter(|n| n.starts_with('.') && n.contains(".g") && !current.contains(n))
                .collect()
        })
        .unwrap_or_default()
}

/// What the daemon `pid` is in the middle of, by what it has on disk: a
/// corpus generation that was not there when it started (`before`, which
/// holds what earlier kills left) is a merge's; a `crashes/.tmp-<pid>-…`
/// folder (intake's temporary name) is a filing's. Read after a kill, it
/// is what the kill interrupted.
fn busy(state: &Path, pid: u32, before: &BTreeSet<String>) -> Vec<Busy> {
    let mut out = Vec::new();
    if other_generations(state).difference(before).next().is_some() {
        out.push(Busy::Merging);
    }
    let ours = format!(".tmp-{pid}-");
    let filing = std::fs::read_dir(state.join("crashes"))
        .map(|d| {
            d.filter_map(|e| e.ok())
                .any(|e| e.file_name().to_string_lossy().starts_with(&ours))
        })
        .unwrap_or(false);
    if filing {
        out.push(Busy::Filing);
    }
    out
}

/// Waits until the daemon `pid` is `what` (or `limit` passes).
fn busy_moment(state: &Path, pid: u32, before: &BTreeSet<String>, what: Busy, limit: Duration) {
    let start = Instant::now();
    while start.elapsed() < limit && !busy(state, pid, before).contains(&what) {
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigkill_at_any_moment_loses_nothing() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let mut seen = BTreeSet::new();
    let mut pending = 0;
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let (mut merges, mut filings) = (0, 0);
    for round in 0..12 {
        let before = other_generations(&state);
        let (slot, aim) = round_plan(round);
        let mut child = start(&state, "600", slot);
        let pid = child.id();
        match aim {
            Some(what) => busy_moment(&state, pid, &before, what, Duration::from_secs(30)),
            None => {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                std::thread::sleep(Duration::from_millis(300 + x % 6000));
            }
        }
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        let interrupted = busy(&state, pid, &before);
        eprintln!("round {round}: the kill interrupted {interrupted:?}");
        merges += usize::from(interrupted.contains(&Busy::Merging));
        filings += usize::from(interrupted.contains(&Busy::Filing));
        let now = kept(&state);
        let lost: Vec<_> = seen.difference(&now).collect();
        assert!(lost.is_empty(), "round {round}: lost {lost:?}");
        // An artifact waiting in a slice's scratch is either still there
        // or filed now.
        assert!(
            now.len() + pending_artifacts(&state) >= seen.len() + pending,
            "round {round}"
        );
        pending = pending_artifacts(&state);
        seen = now;
        let db = rusqlite::Connection::open(state.join("store.sqlite")).unwrap();
        let check: String = db
            .query_row("PRAGMA integrity_check", [], |r| r.get(0))
            .unwrap();
        assert_eq!(check, "ok", "round {round}");
    }
    // The kills must have hit what is fragile, or the rounds proved little.
    assert!(
        merges >= 1 && filings >= 1,
        "of 12 kills, {merges} landed during a merge and {filings} during a filing; \
         each needs at least one"
    );
    // A clean run finishes what the kills left: nothing waits in scratch,
    // everything seen is still there, and both bugs are on file.
    let mut last = start(&state, "25", round_plan(1).0);
    assert!(last.wait().unwrap().success());
    let now = kept(&state);
    assert!(seen.is_subset(&now));
    // Filed, or parked for the next soak (one that ends on time may leave
    // some): nothing is left in a slice's scratch.
    assert_eq!(scratch_artifacts(&state), 0);
    assert!(
        now.iter().any(|f| f.starts_with("corpus/")),
        "no corpus grew: {now:?}"
    );
    let db = rusqlite::Connection::open(state.join("store.sqlite")).unwrap();
    let groups: i64 = db
        .query_row("SELECT COUNT(*) FROM crash_group", [], |r| r.get(0))
        .unwrap();
    assert!(groups >= 1);
    let on_disk = std::fs::read_dir(state.join("crashes"))
        .unwrap()
        .filter(|e| {
            !e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with('.')
        })
        .count() as i64;
    assert_eq!(groups, on_disk, "the store and crashes/ disagree");
}

#[test]
fn a_stop_during_filing_ends_within_seconds_and_the_next_soak_files_what_it_left() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    // Alignment violations at many sites: each slice saves a dozen
    // findings, whose filing takes longer than a stop may.
    let slot = ("alloc_ops", "zoo:small-underalign+size-eq-align");
    let mut child = start(&state, "600", slot);
    let before = other_generations(&state);
    busy_moment(
        &state,
        child.id(),
        &before,
        Busy::Filing,
        Duration::from_secs(120),
    );
    assert!(
        busy(&state, child.id(), &before).contains(&Busy::Filing),
        "never filed"
    );
    let waiting = scratch_artifacts(&state);
    // SAFETY: `kill` has no memory preconditions; our own child's pid, not yet waited
    // for, so not reused.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let asked = Instant::now();
    let status = child.wait().unwrap();
    let took = asked.elapsed();
    assert!(status.success(), "{status}");
    assert!(
        took < Duration::from_secs(10),
        "stopped {took:?} after SIGINT"
    );
    let left = parked(&state);
    eprintln!("{waiting} waiting at the stop, {} parked", left.len());
    assert!(!left.is_empty(), "nothing was left pending");
    assert_eq!(scratch_artifacts(&state), 0);
    // The next soak files them first.
    let groups_before = kept(&state)
        .iter()
        .filter(|k| k.starts_with("crashes/"))
        .count();
    let mut next = start(&state, "20", slot);
    assert!(next.wait().unwrap().success());
    let still: Vec<_> = parked(&state)
        .into_iter()
        .filter(|p| left.contains(p))
        .collect();
    assert!(still.is_empty(), "still pending: {still:?}");
    let filed = kept(&state)
        .iter()
        .filter(|k| k.starts_with("crashes/"))
        .count();
    assert!(
        filed >= groups_before + left.len(),
        "{filed} crash inputs kept, {groups_before} before, {} parked",
        left.len()
    );
}

/// Every process below `pid` (its children's children too).
fn descendants(pid: u32) -> Vec<u32> {
    let mut out = Vec::new();
    let mut todo = vec![pid];
    while let Some(p) = todo.pop() {
        let Ok(tasks) = std::fs::read_dir(format!("/proc/{p}/task")) else {
            continue;
        };
        for task in tasks.filter_map(|t| t.ok()) {
            let children =
                std::fs::read_to_string(task.path().join("children")).unwrap_or_default();
            for c in children.split_whitespace().filter_map(|c| c.parse().ok()) {
                out.push(c);
                todo.push(c);
            }
        }
    }
    out
}

#[test]
fn killing_its_workers_never_ends_a_soak() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    // Fuzz slices, merges, filings (replays, minimizing), a drift replay
    // and Miri passes all run as processes of their own; every few
    // seconds one of them, whichever, is killed, a Miri interpreter first
    // when one runs.
    let config = dir.path().join("soak.toml");
    std::fs::write(
        &config,
        "[drift]\ntargets = [\"alloc_ops\"]\ncpu_share = 0.5\ninterval_secs = 1\n\
         [miri]\nevery_hours = 0.0003\nmost = 2\n",
    )
    .unwrap();
    // The Miri binary built first (a build the kills would cut short).
    let built = Command::new(env!("CARGO_BIN_EXE_allocsoak"))
        .args(["miri", "--allocator", "arena", "--most", "1"])
        .output()
        .unwrap();
    assert!(built.status.success(), "{built:?}");
    let secs = 45;
    let child = Command::new(env!("CARGO_BIN_EXE_allocsoak"))
        .arg("soak")
        .arg("--state")
        .arg(&state)
        .arg("--config")
        .arg(&config)
        .args(["--target", "alloc_ops", "--allocator", BUGS])
        .args(["--allocator", "arena"])
        .args([
            "--jobs",
            "2",
            "--slice-secs",
            "8",
            "--duration",
            &secs.to_string(),
        ])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let mut killed = BTreeSet::new();
    let mut names = Vec::new();
    while start.elapsed() < Duration::from_secs(secs - 5) {
        std::thread::sleep(Duration::from_secs(3));
        let below: Vec<(u32, String)> = descendants(child.id())
            .into_iter()
            .filter(|p| !killed.contains(p))
            .map(|p| {
                let comm = std::fs::read_to_string(format!("/proc/{p}/comm")).unwrap_or_default();
                (p, comm.trim().to_string())
            })
            .collect();
        let miri = below.iter().find(|(_, name)| name == "miri");
        if let Some((victim, name)) = miri.or(below.last()) {
            // SAFETY: `kill` has no memory preconditions. `victim` is a descendant just read from
            // /proc, not our child: if it exited and was reaped since, the pid could be another's.
            unsafe { libc::kill(*victim as i32, libc::SIGKILL) };
            killed.insert(*victim);
            names.push(name.clone());
            eprintln!("killed {victim} ({name})");
        }
    }
    let out = child.wait_with_output().unwrap();
    let took = start.elapsed();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{}\n{stderr}", out.status);
    assert!(killed.len() >= 10, "only {} kills", killed.len());
    assert!(
        names.iter().any(|n| n == "miri"),
        "no Miri process killed: {names:?}"
    );
    assert!(
        took < Duration::from_secs(secs + 60),
        "ended {took:?} after its start\n{stderr}"
    );
    let db = rusqlite::Connection::open(state.join("store.sqlite")).unwrap();
    let slices: i64 = db
        .query_row("SELECT COUNT(*) FROM slice", [], |r| r.get(0))
        .unwrap();
    assert!(slices >= 4, "{slices} slices\n{stderr}");
    // A program whose Miri process was killed waits for the next pass:
    // it is not counted past what Miri runs (the arena's all run), nor
    // filed.
    let stdout = String::from_utf8_lossy(&out.stdout);
    let passes: Vec<&str> = stdout
        .lines()
        .filter(|l| l.starts_with("miri alloc_ops/arena: "))
        .collect();
    assert!(!passes.is_empty(), "{stdout}");
    assert!(
        passes.iter().all(|l| l.ends_with(" 0 past what Miri runs")),
        "{passes:#?}"
    );
    let groups: i64 = db
        .query_row(
            "SELECT COUNT(*) FROM crash_group g JOIN slot s ON g.slot_id = s.id WHERE s.engine = 'miri'",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(groups, 0, "{stderr}");
}

#[test]
fn the_daemon_speaks_sd_notify() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let socket_path = dir.path().join("notify");
    let socket = std::os::unix::net::UnixDatagram::bind(&socket_path).unwrap();
    socket
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_allocsoak"))
        .arg("soak")
        .arg("--state")
        .arg(dir.path().join("state"))
        .args([
            "--target",
            "alloc_ops",
            "--allocator",
            "system",
            "--jobs",
            "1",
        ])
        .args(["--duration", "30", "--progress-secs", "1"])
        .env("NOTIFY_SOCKET", &socket_path)
        // 2 s: the daemon must ping every second.
        .env("WATCHDOG_USEC", "2000000")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut messages = Vec::new();
    let mut buf = [0u8; 4096];
    let start = Instant::now();
    while start.elapsed() < Duration::from_secs(8) {
        let n = socket.recv(&mut buf).unwrap();
        messages.push(String::from_utf8_lossy(&buf[..n]).into_owned());
    }
    // SIGTERM, as systemd stops a service: the daemon stops cleanly.
    // SAFETY: `kill` has no memory preconditions; our own child's pid, not yet waited
    // for, so not reused.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    while let Ok(n) = socket.recv(&mut buf) {
        messages.push(String::from_utf8_lossy(&buf[..n]).into_owned());
        if messages.last().unwrap().contains("STOPPING=1") {
            break;
        }
    }
    assert!(status.success(), "{status}");
    assert_eq!(
        messages.first().map(String::as_str),
        Some("READY=1\n"),
        "{messages:?}"
    );
    let pings = messages.iter().filter(|m| *m == "WATCHDOG=1\n").count();
    assert!(pings >= 4, "{pings} watchdog pings in 8 s: {messages:?}");
    assert!(
        messages
            .iter()
            .any(|m| m.starts_with("STATUS=soak: elapsed")),
        "{messages:?}"
    );
    assert_eq!(
        messages.last().map(String::as_str),
        Some("STOPPING=1\n"),
        "{messages:?}"
    );
}
