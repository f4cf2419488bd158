//! A new group's crash input minimized as a program
//! ([`triage::minimize`]): each candidate program is written as text and
//! replayed on the fuzz binary (after the history inputs the crash needs),
//! and kept when the replay's signature is the group's. A Miri finding's
//! candidates run under Miri instead ([`under_miri`]), each in a process
//! of its own.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use anyhow::Result;
use report::miri::Miri;
use report::Signature;
use shadow::{Program, Target};
use triage::budget::Budget;
use triage::render;
use triage::replay::{Replay, Replayer};

use crate::engines::miri::{self, Outcome};
use crate::engines::project::Project;
use crate::foundation::state::write_atomic;

/// Seconds minimizing one new group's program may take; past it the
/// program is kept as far as it got.
const MINIMIZE_SECS: u64 = 10;
/// The same for a Miri finding, whose candidates take a Miri process
/// each (a second or two for a small program).
const MIRI_MINIMIZE_SECS: u64 = 300;

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
        summary(self.ops_before, self.ops_after, self.secs, self.replays)
    }
}

fn summary(ops_before: usize, ops_after: usize, secs: f64, replays: usize) -> String {
    format!("{ops_before} ops to {ops_after} in {secs:.1} s ({replays} replays)")
}

/// A Miri finding's program minimized: its text file, Miri's log of it
/// (from the input's start), and [`Minimized::summary`]'s line.
pub struct MiriMinimized {
    pub path: PathBuf,
    pub log: String,
    pub summary: String,
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
    let process_wide = report::key::PROCESS_KINDS.contains(&sig.kind.as_str());
    if matches!(sig.kind.as_str(), "timeout" | "oom") || process_wide {
        return Ok(None);
    }
    let program = crate::pipeline::program::read_program(target, input)?;
    // A race is not minimized; a recorded trace has no ops to take out.
    if program.ops.is_empty() || program.ops.iter().any(shadow::Op::is_race) {
        return Ok(None);
    }
    let start = Instant::now();
    let inputs = |path: &Path| -> Vec<PathBuf> {
        before.iter().cloned().chain([path.to_path_buf()]).collect()
    };
    let search = Search {
        work,
        deadline: start + Duration::from_secs(MINIMIZE_SECS),
        budget,
    };
    let found = search.run(&program, render::failing_op(log), |candidate| {
        let inputs = inputs(candidate);
        let inputs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
        Ok(replayer.fails_as(&inputs, sig, slot)?)
    })?;
    let Some((smaller, tests)) = found else {
        return Ok(None);
    };
    // The replay shown in REPORT.md, with its stack.
    let path = work.join("minimized");
    write_atomic(&path, smaller.to_string().as_bytes())?;
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
        ops_after: smaller.ops.len(),
        replays: tests + 1,
        secs: start.elapsed().as_secs_f64(),
    }))
}

/// Minimizes `input`'s program, which stopped Miri with `sig` under
/// `replay` (`log`: Miri's log of it), into `work/minimized`: each
/// candidate runs under Miri and is kept when Miri stops at the same bug.
/// `None` when nothing smaller does, or the smaller one no longer stops
/// Miri when run again.
pub fn under_miri(
    project: &Project,
    replay: miri::Replay,
    input: &Path,
    (sig, log): (&Signature, &str),
    work: &Path,
    budget: &Budget,
) -> Result<Option<MiriMinimized>> {
    let program = crate::pipeline::program::read_program(replay.target, input)?;
    if program.ops.is_empty() {
        return Ok(None);
    }
    let start = Instant::now();
    // Miri's log of `candidate` when it stops at the same bug.
    let stops = |candidate: &Path| -> Result<Option<String>> {
        // Absolute: the replay runs in the fuzz package's folder.
        let candidate = std::path::absolute(candidate)?;
        let outcomes = miri::run(project, replay, &[candidate], budget)?;
        Ok(match outcomes.into_iter().next() {
            Some((
                _,
                Outcome::Stopped {
                    miri: Miri::Finding(s),
                    log,
                },
            )) if s.same_bug(sig) => Some(log),
            _ => None,
        })
    };
    let search = Search {
        work,
        deadline: start + Duration::from_secs(MIRI_MINIMIZE_SECS),
        budget,
    };
    let found = search.run(&program, render::failing_op(log), |c| {
        Ok(stops(c)?.is_some())
    })?;
    let Some((smaller, tests)) = found else {
        return Ok(None);
    };
    let path = work.join("minimized");
    write_atomic(&path, smaller.to_string().as_bytes())?;
    let Some(log) = stops(&path)? else {
        std::fs::remove_file(&path)?;
        return Ok(None);
    };
    let secs = start.elapsed().as_secs_f64();
    Ok(Some(MiriMinimized {
        path,
        log,
        summary: summary(program.ops.len(), smaller.ops.len(), secs, tests + 1),
    }))
}

/// One search for a smaller program that still fails, up to `deadline`
/// or the end of `budget`; candidates are written to `work`.
struct Search<'a> {
    work: &'a Path,
    deadline: Instant,
    budget: &'a Budget<'a>,
}

impl Search<'_> {
    /// [`triage::minimize`] over `program`, each candidate written as a
    /// program file and asked to `fails`; the smaller program and how
    /// many candidates were tried, `None` when nothing smaller fails.
    fn run(
        &self,
        program: &Program,
        failing_op: Option<usize>,
        mut fails: impl FnMut(&Path) -> Result<bool>,
    ) -> Result<Option<(Program, usize)>> {
        let candidate = self.work.join("minimize-candidate");
        let mut error = None;
        let m = triage::minimize::minimize(program, failing_op, |p| {
            if error.is_some() || Instant::now() > self.deadline || self.budget.over() {
                return false;
            }
            let written = write_atomic(&candidate, p.to_string().as_bytes());
            written
                .and_then(|()| fails(&candidate))
                .unwrap_or_else(|e| {
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
        Ok((m.program != *program).then_some((m.program, m.tests)))
    }
}
