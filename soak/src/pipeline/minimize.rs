//! A new group's crash input minimized as a program
//! ([`triage::minimize`]): each candidate program is written as text and
//! replayed on the fuzz binary (after the history inputs the crash needs),
//! and kept when the replay's signature is the group's.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Result;
use report::Signature;
use shadow::{Program, Target};
use triage::render;
use triage::replay::{Replay, Replayer};

use triage::budget::Budget;

/// Seconds minimizing one new group's program may take; past it the
/// program is kept as far as it got.
const MINIMIZE_SECS: u64 = 10;

/// What minimizing kept, and what it took.
pub struct Minimized {
    /// The minimized program's text file.
    pub path: PathBuf,
    /// Its replay, after the history inputs.
    pub replay: Replay,
    pub ops_before: usize,
    pub ops_after: usize,
    pub replays: usize,
    pub secs: f64,
}

impl Minimized {
    /// `384 ops to 3 in 4.1 s (57 replays)`.
    pub fn summary(&self) -> String {
        format!(
            "{} ops to {} in {:.1} s ({} replays)",
            self.ops_before, self.ops_after, self.secs, self.replays
        )
    }
}

/// A crash to minimize: `input`'s program, replayed on `slot` of
/// `target` after the history inputs `before`, failed with `sig`, its
/// replay's log `log`.
pub struct Failing<'a> {
    pub target: Target,
    pub slot: &'a str,
    pub before: &'a [PathBuf],
    pub input: &'a Path,
    pub sig: &'a Signature,
    pub log: &'a str,
}

/// Minimizes `crash`'s program into `work/minimized`. `None` when nothing
/// smaller fails the same way, and for timeouts and OOMs (each replay
/// would take the whole limit), a reference's `held` (a whole process's
/// memory, no program's) and race programs (whether one fails is up to
/// the machine).
pub fn minimize(
    replayer: &Replayer,
    crash: &Failing,
    work: &Path,
    budget: &Budget,
) -> Result<Option<Minimized>> {
    let Failing {
        target,
        slot,
        before,
        input,
        sig,
        log,
    } = *crash;
    if matches!(sig.kind.as_str(), "timeout" | "oom" | "held") {
        return Ok(None);
    }
    let program = crate::pipeline::program::read_program(target, input)?;
    // A race is not minimized; a recorded trace has no ops to take out.
    if program.ops.is_empty() || program.ops.iter().any(shadow::Op::is_race) {
        return Ok(None);
    }
    let start = Instant::now();
    let deadline = start + Duration::from_secs(MINIMIZE_SECS);
    let inputs = |path: &Path| -> Vec<PathBuf> {
        before.iter().cloned().chain([path.to_path_buf()]).collect()
    };
    let candidate = work.join("minimize-candidate");
    let fails = |program: &Program| -> Result<bool> {
        crate::foundation::state::write_atomic(&candidate, program.to_string().as_bytes())?;
        let inputs = inputs(&candidate);
        let inputs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
        Ok(replayer.fails_as(&inputs, sig, slot)?)
    };
    let mut error = None;
    let m = triage::minimize::minimize(&program, render::failing_op(log), |p| {
        if error.is_some() || Instant::now() > deadline || budget.over() {
            return false;
        }
        fails(p).unwrap_or_else(|e| {
            error = Some(e);
            false
        })
    });
    if candidate.exists() {
        std::fs::remove_file(&candidate)?;
    }
    if let Some(e) = error {
        return Err(e);
    }
    if m.program == program {
        return Ok(None);
    }
    // The replay shown in REPORT.md, with its stack.
    let path = work.join("minimized");
    crate::foundation::state::write_atomic(&path, m.program.to_string().as_bytes())?;
    let all = inputs(&path);
    let replay = replayer.replay(&all.iter().map(PathBuf::as_path).collect::<Vec<_>>(), true)?;
    if replay.signature(slot).is_none_or(|s| !s.same_bug(sig)) {
        // It failed the same way during the search but not now: a flaky
        // program keeps its original.
        std::fs::remove_file(&path)?;
        return Ok(None);
    }
    Ok(Some(Minimized {
        path,
        replay,
        ops_before: program.ops.len(),
        ops_after: m.program.ops.len(),
        replays: m.tests + 1,
        secs: start.elapsed().as_secs_f64(),
    }))
}
