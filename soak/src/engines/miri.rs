//! Miri as an engine: a fuzz package's `miri` binary (`fuzz_targets/`'s,
//! or a glue's `miri-<config>-<hash>`) run by `cargo +nightly miri run`
//! over a list of inputs. Miri stops a process at its first error, so a
//! run goes on from the input after the one that stopped it, in a new
//! process, until every input has run; what each error was is read by
//! `report::miri`.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{bail, Context, Result};
use report::miri::Miri;
use shadow::Target;
use triage::budget::Budget;
use triage::replay::output_within;

use super::project::Project;
pub use crate::foundation::config::Borrows;

/// Miri's flags: the inputs are files (isolation off), an allocator's
/// regions live for the process (leaks are not findings), and
/// integer-to-pointer casts are allowed, as they are in most allocators.
pub const MIRIFLAGS: &str =
    "-Zmiri-disable-isolation -Zmiri-ignore-leaks -Zmiri-permissive-provenance";

/// What a run replays: a target's programs on an allocator, under one
/// aliasing model.
#[derive(Clone, Copy, Debug)]
pub struct Replay<'a> {
    pub allocator: &'a str,
    pub target: Target,
    pub borrows: Borrows,
}

/// What one input did under Miri.
#[derive(Debug)]
pub enum Outcome {
    Clean,
    /// Miri's error and its log (the part after the input's start).
    Stopped {
        miri: Miri,
        log: String,
    },
}

/// How long one Miri process may run (its build, the first time, and the
/// inputs up to the one that stops it) before it is killed as hung.
const LIMIT: Duration = Duration::from_secs(3 * 3600);

/// Runs `inputs` (program files of the replay's target) under Miri: each
/// input with its outcome, in order. Once `budget` is over, or when a
/// Miri process is killed from outside (`SIGKILL`), the inputs it had not
/// finished are left out of the answer.
pub fn run(
    project: &Project,
    replay: Replay,
    inputs: &[PathBuf],
    budget: &Budget,
) -> Result<Vec<(PathBuf, Outcome)>> {
    let (allocator, target) = (replay.allocator, replay.target);
    let mut outcomes = Vec::new();
    let mut rest = inputs;
    while !rest.is_empty() && !budget.over() {
        let mut cmd = project.miri_command(allocator, target, rest)?;
        let flags = format!("{MIRIFLAGS} {}", replay.borrows.flag());
        let out = match output_within(cmd.env("MIRIFLAGS", flags.trim()), LIMIT, budget) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => break,
            out => out.context("failed to run `cargo +nightly miri`; run `just setup`")?,
        };
        let log = String::from_utf8_lossy(&out.stderr);
        let started = started(&log);
        let clean = started.iter().filter(|(_, clean)| *clean).count();
        outcomes.extend(rest[..clean].iter().map(|p| (p.clone(), Outcome::Clean)));
        if out.status.success() {
            break;
        }
        // Killed from outside (the OOM killer, an operator): the program
        // it was running is no finding, and waits with the rest for the
        // next run, as when the budget ends.
        if killed(out.status, &log) {
            break;
        }
        // The input that was running when Miri stopped, or none: then the
        // build or the runner's start failed (every input would), or the
        // process failed past its last input.
        let Some((at, false)) = started.last().copied() else {
            let tail: Vec<&str> = log.lines().rev().take(20).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            let when = match started.is_empty() {
                true => "before its first program",
                false => "after its last program",
            };
            bail!(
                "the Miri replay failed {when} ({}): {}",
                out.status,
                tail.join("\n")
            );
        };
        let log = log[at..].to_string();
        // Miri's own error, else what the harness raised (a violation, a
        // panic), signed as in any replay.
        let slot = format!("{target}/{allocator}");
        let miri = report::miri::parse(&log, allocator)
            .or_else(|| report::Signature::from_log(&log, &slot).map(Miri::Finding))
            .unwrap_or_else(|| Miri::Unsupported(format!("ended with {}", out.status)));
        outcomes.push((rest[clean].clone(), Outcome::Stopped { miri, log }));
        rest = &rest[clean + 1..];
    }
    Ok(outcomes)
}

/// Whether the Miri process ended by a `SIGKILL`: its own status, or, as
/// `cargo run` reports its child's, the interpreter's.
fn killed(status: std::process::ExitStatus, log: &str) -> bool {
    status.signal() == Some(libc::SIGKILL) || log.contains(CARGO_SAYS_KILLED)
}

/// How `cargo run` ends its error when the program it ran was killed.
const CARGO_SAYS_KILLED: &str = "(signal: 9, SIGKILL: kill)";

/// Where each input's line starts in `log`, and whether it ran clean.
fn started(log: &str) -> Vec<(usize, bool)> {
    let mut started: Vec<(usize, bool)> = Vec::new();
    let mut at = 0;
    for line in log.split_inclusive('\n') {
        if line.starts_with(report::miri::INPUT) {
            started.push((at, false));
        } else if line.starts_with(report::miri::CLEAN) {
            if let Some(last) = started.last_mut() {
                last.1 = true;
            }
        }
        at += line.len();
    }
    started
}

/// Whether `cargo +nightly miri` runs here.
pub fn installed() -> bool {
    std::process::Command::new("cargo")
        .args(["+nightly", "miri", "--version"])
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Whether `allocator` is Rust code Miri can run: `arena`, a zoo planted
/// in it, or a declared crate with no C sources.
pub fn runs_under_miri(project: &Project, allocator: &str) -> bool {
    let zoo_base = allocator
        .strip_prefix("zoo:")
        .map(|spec| zoo::split_spec(spec).1);
    allocator == "arena"
        || zoo_base == Some("arena")
        || project
            .declared()
            .iter()
            .any(|d| d.name == allocator && d.krate.is_some() && d.c.is_none())
}

/// The input files under `paths` (files, or folders of them), absolute,
/// the `most` smallest first: Miri runs a program a thousand times slower.
pub fn smallest(paths: &[PathBuf], most: usize) -> Result<Vec<PathBuf>> {
    let mut files: Vec<(u64, PathBuf)> = Vec::new();
    for path in paths {
        let entries: Vec<PathBuf> = match path.is_dir() {
            true => std::fs::read_dir(path)
                .with_context(|| format!("failed to read {}", path.display()))?
                .flatten()
                .map(|e| e.path())
                .collect(),
            false => vec![path.clone()],
        };
        for file in entries {
            let meta = std::fs::metadata(&file)
                .with_context(|| format!("no input at {}", file.display()))?;
            if meta.is_file() && !is_engine_file(&file) {
                // Absolute: the replay runs in the fuzz package's folder.
                files.push((meta.len(), std::fs::canonicalize(&file)?));
            }
        }
    }
    files.sort();
    Ok(files.into_iter().take(most).map(|(_, f)| f).collect())
}

/// honggfuzz's coverage files in a shared corpus are no programs.
fn is_engine_file(path: &Path) -> bool {
    path.extension().is_some_and(|e| e == "cov")
}
