//! Replaying inputs on a fuzz binary, without a fuzz loop: libFuzzer
//! binaries run each file argument once, in order, in one process (so a
//! crash that needs the allocator state earlier inputs left replays as
//! that sequence). Inputs from honggfuzz are the same raw bytes and
//! replay the same way.

use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use report::{Record, Signature};

use crate::budget::Budget;

/// How to replay inputs of one slot.
pub struct Replayer<'a> {
    /// The libFuzzer binary of the target.
    pub binary: &'a Path,
    /// `ALLOCSOAK_ALLOCATOR`: the allocator the input failed on.
    pub allocator: &'a str,
    /// `ALLOCSOAK_TOLERATE` for replays that ask for it: known bugs the
    /// input may hit before the one being replayed.
    pub tolerate: Option<&'a Path>,
    /// libFuzzer `-timeout` (a timeout input must time out again).
    pub timeout_secs: u64,
    /// libFuzzer `-rss_limit_mb`.
    pub rss_limit_mb: u64,
    /// When replays must end ([`output_within`]).
    pub budget: Budget<'a>,
}

/// What one replay showed.
pub struct Replay {
    /// The binary's stderr: the violation line, the sanitizer report, the stack.
    pub log: String,
    /// Whether the inputs failed again with a finding.
    pub reproduced: bool,
    /// The violation that ended the run, as the harness recorded it
    /// (`ALLOCSOAK_RECORD`); `None` when something else ended it.
    pub record: Option<Record>,
    /// Whether the harness started: `false` when it exited before the
    /// first input ([`shadow::sanitizer::EXIT_STARTUP`]: the allocator
    /// did not load, a declared function is missing), its reason the
    /// log's `allocsoak: ` line. Such a run replayed nothing.
    pub started: bool,
}

impl Replay {
    /// The replay's signature, when it reproduced: its violation's record
    /// when the harness wrote one, else what the log reports (a sanitizer
    /// report, a crash, an engine's finding).
    pub fn signature(&self, slot: &str) -> Option<Signature> {
        if !self.reproduced {
            return None;
        }
        match &self.record {
            Some(record) => Some(Signature::from_record(record)),
            None => Signature::from_log(&self.log, slot),
        }
    }
}

/// A fresh path for one replay's record, unique in this machine's temp
/// folder (replays run from several threads and processes at once).
fn record_path() -> PathBuf {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    std::env::temp_dir().join(format!(
        "allocsoak-record-{}-{}.json",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::Relaxed)
    ))
}

/// How long a run may go on once its budget is over: time for a replay
/// that was under way to end as usual (so the filing it serves ends with
/// what it has), not to hang on.
pub const PAST_BUDGET: Duration = Duration::from_secs(10);

/// How long a run may go on once the soak was asked to stop (SIGINT,
/// SIGTERM): the user is waiting, and what the run serves stays pending.
pub const PAST_STOP: Duration = Duration::from_secs(2);

/// Runs `cmd` to its end and returns its output, as [`Command::output`]
/// does, but kills it once it runs past `limit`: a replay or merge that
/// hangs (a sanitizer waiting on a symbolizer that died) must not hold up
/// a soak. The stderr of a killed run ends with a line that says so.
///
/// It runs in a process group of its own, and whatever it started that
/// outlives it (libFuzzer's merge child, a sanitizer's symbolizer) is
/// killed with it, so its pipes close. A run still going [`PAST_BUDGET`]
/// after `budget` is over ([`PAST_STOP`] after a stop) is killed too, and
/// the answer is an
/// [`io::ErrorKind::Interrupted`] error: a run cut short shows nothing
/// about its inputs.
pub fn output_within(cmd: &mut Command, limit: Duration, budget: &Budget) -> io::Result<Output> {
    use std::os::unix::process::CommandExt;
    let mut child = cmd
        .process_group(0)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()?;
    let read = |pipe: Option<Box<dyn Read + Send>>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            if let Some(mut pipe) = pipe {
                let _ = pipe.read_to_end(&mut text);
            }
            text
        })
    };
    let out = read(
        child
            .stdout
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let err = read(
        child
            .stderr
            .take()
            .map(|p| Box::new(p) as Box<dyn Read + Send>),
    );
    let start = Instant::now();
    let (mut killed, mut cancelled) = (false, false);
    let mut over_since = None;
    while !exited(&child)? {
        if !killed && start.elapsed() > limit {
            kill_group(&child);
            killed = true;
        }
        if budget.over() {
            let since = *over_since.get_or_insert_with(Instant::now);
            let grace = match budget.stopped() {
                true => PAST_STOP,
                false => PAST_BUDGET,
            };
            if !killed && !cancelled && since.elapsed() > grace {
                kill_group(&child);
                cancelled = true;
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    // The child is a zombie until `wait`, so its group id is not reused
    // yet: what is left in the group is its own.
    kill_group(&child);
    let status = child.wait()?;
    let mut stderr = err.join().unwrap_or_default();
    if cancelled {
        return Err(io::Error::new(
            io::ErrorKind::Interrupted,
            "stopped: filing time is over or the soak was asked to stop",
        ));
    }
    if killed {
        let secs = start.elapsed().as_secs();
        stderr.extend(format!("\nallocsoak: killed after {secs} s, past its limit\n").as_bytes());
    }
    Ok(Output {
        status,
        stdout: out.join().unwrap_or_default(),
        stderr,
    })
}

/// Whether `child` has exited, without reaping it.
fn exited(child: &Child) -> io::Result<bool> {
    // SAFETY: an all-zero `siginfo_t` is a valid value of the plain C struct.
    let mut info: libc::siginfo_t = unsafe { std::mem::zeroed() };
    // SAFETY: `waitid` writes only into `info`, which outlives the call;
    // WNOWAIT leaves the child unreaped, for `Child::wait`.
    let r = unsafe {
        libc::waitid(
            libc::P_PID,
            child.id() as libc::id_t,
            &mut info,
            libc::WEXITED | libc::WNOHANG | libc::WNOWAIT,
        )
    };
    if r != 0 {
        let e = io::Error::last_os_error();
        // A signal (the soak's SIGINT) came first: ask again next time.
        return match e.kind() {
            io::ErrorKind::Interrupted => Ok(false),
            _ => Err(e),
        };
    }
    // SAFETY: `waitid` succeeded, so `info` holds a SIGCHLD siginfo (or
    // zeros, when the child has not exited), whose `si_pid` is set.
    Ok(unsafe { info.si_pid() } != 0)
}

/// SIGKILLs every process in `child`'s process group (its id is the
/// child's: [`output_within`] makes it a group leader).
fn kill_group(child: &Child) {
    // SAFETY: `kill` has no memory preconditions. The child is not reaped
    // yet, so no other process can have taken its id as a group id.
    unsafe { libc::kill(-(child.id() as libc::pid_t), libc::SIGKILL) };
}

/// Runs a replay command with a record file of its own, for at most
/// `limit`: what it showed, `reproduced` set when it failed.
fn run(mut cmd: Command, limit: Duration, budget: &Budget) -> io::Result<Replay> {
    let path = record_path();
    let out = output_within(cmd.env("ALLOCSOAK_RECORD", &path), limit, budget);
    let text = std::fs::read_to_string(&path).ok();
    let _ = std::fs::remove_file(&path);
    let out = out?;
    Ok(Replay {
        log: String::from_utf8_lossy(&out.stderr).into_owned(),
        reproduced: !out.status.success(),
        record: text.and_then(|t| Record::from_json(&t).ok()),
        started: out.status.code() != Some(shadow::sanitizer::EXIT_STARTUP),
    })
}

impl Replayer<'_> {
    /// The longest a replay of `inputs` may take: each input its
    /// `-timeout`, and half a minute for the process to start, report and
    /// symbolize.
    fn limit(&self, inputs: &[&Path]) -> Duration {
        Duration::from_secs(self.timeout_secs * inputs.len() as u64 + 30)
    }

    /// The command that replays `inputs` (fuzz bytes or op program text)
    /// in order in one process, as a user would type it.
    pub fn command(&self, inputs: &[&Path], tolerate: bool) -> Command {
        let mut cmd = engine_command(self.binary);
        cmd.env("ALLOCSOAK_ALLOCATOR", self.allocator)
            .env("ALLOCSOAK_MODE", "checked")
            .env("ALLOCSOAK_TEXT_INPUTS", "1")
            .arg(format!("-timeout={}", self.timeout_secs))
            .arg(format!("-rss_limit_mb={}", self.rss_limit_mb))
            .args(inputs)
            .stdin(Stdio::null())
            .stdout(Stdio::null());
        if let (true, Some(t)) = (tolerate, self.tolerate) {
            cmd.env("ALLOCSOAK_TOLERATE", t);
        }
        cmd
    }

    /// Replays `inputs` once, in order, in one process. `Err` only when
    /// the binary cannot run.
    pub fn replay(&self, inputs: &[&Path], tolerate: bool) -> io::Result<Replay> {
        self.replay_as(self.command(inputs, tolerate), inputs)
    }

    /// [`Replayer::replay`] with every race section run one worker after
    /// another (`ALLOCSOAK_SERIAL_RACES=1`): the same steps and checks
    /// without contention. A race's finding does not reproduce this way.
    pub fn replay_serially(&self, inputs: &[&Path], tolerate: bool) -> io::Result<Replay> {
        let mut cmd = self.command(inputs, tolerate);
        cmd.env("ALLOCSOAK_SERIAL_RACES", "1");
        self.replay_as(cmd, inputs)
    }

    /// Replays `inputs` in order in one process that goes past each sound
    /// violation not listed in `tolerate`, saving the input and its
    /// record, code path included, into `findings` (as a fuzz process
    /// does, [`shadow::findings`]), and ends at the first violation that
    /// leaves memory in doubt (what comes after it would run on a heap it
    /// broke). `Err` only when the binary cannot run.
    pub fn replay_saving(
        &self,
        inputs: &[&Path],
        tolerate: &Path,
        findings: &Path,
    ) -> io::Result<()> {
        let mut cmd = self.command(inputs, false);
        cmd.env("ALLOCSOAK_TOLERATE", tolerate)
            .env("ALLOCSOAK_FINDINGS", findings)
            .env("ALLOCSOAK_END_IN_DOUBT", "1");
        run(cmd, self.limit(inputs), &self.budget).map(|_| ())
    }

    fn replay_as(&self, cmd: Command, inputs: &[&Path]) -> io::Result<Replay> {
        let mut replay = run(cmd, self.limit(inputs), &self.budget)?;
        replay.reproduced &= replay.record.is_some() || report::kind(&replay.log).is_some();
        Ok(replay)
    }
}

impl Replayer<'_> {
    /// Whether replaying `inputs` (with the tolerate file) fails as `sig`
    /// on `slot`: the question a search asks many times. A signature
    /// without frames (an `allocsoak violation:` line, an engine finding)
    /// or with a code path (a replay's record) needs no stack, so the
    /// process dies at its abort without libFuzzer's stack dump or Rust's
    /// backtrace (both symbolized), in a seventh of the time.
    pub fn fails_as(&self, inputs: &[&Path], sig: &Signature, slot: &str) -> io::Result<bool> {
        let mut cmd = self.command(inputs, true);
        if sig.frames.is_empty() || sig.path {
            cmd.arg("-handle_abrt=0").env("RUST_BACKTRACE", "0");
        }
        let replay = run(cmd, self.limit(inputs), &self.budget)?;
        Ok(replay.signature(slot).is_some_and(|s| s.same_bug(sig)))
    }
}

/// A command for an engine process that dies with the thread that started
/// it: a soak killed with SIGKILL must not leave engines writing into the
/// folders its restart is filing.
pub fn engine_command(binary: &Path) -> Command {
    use std::os::unix::process::CommandExt;
    let mut cmd = Command::new(binary);
    // SAFETY: prctl is async-signal-safe; nothing else runs between fork and exec.
    unsafe {
        cmd.pre_exec(|| {
            libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL);
            Ok(())
        });
    }
    cmd
}
