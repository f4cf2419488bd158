//! `allocsoak repro`: replays a crash group's inputs, or input files from
//! libFuzzer or honggfuzz, on the current build, without a fuzz loop, and
//! shows the programs, the failing op, the violation and the stack. A
//! group that needs its history replays it first, in one process.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use report::Signature;
use shadow::Target;
use triage::replay::Replayer;

use crate::engines::libfuzzer::startup_error;
use crate::foundation::config::Config;
use crate::foundation::state::StateDir;
use crate::foundation::store::Store;
use crate::pipeline::groups::{self, Group};
use crate::pipeline::program::read_programs;

/// What to replay.
pub struct Case {
    /// Replayed in order in one process; the last is the crash input.
    pub inputs: Vec<PathBuf>,
    pub target: Target,
    pub allocator: String,
    pub tolerate: Option<PathBuf>,
    /// The group the input belongs to, when it came from one.
    pub group: Option<crate::foundation::store::GroupRow>,
    /// The emitted test's name.
    pub test_name: String,
}

impl Case {
    /// The case `what` names: a group id (or unique prefix) in the state
    /// dir `state`, or input files of `target` to replay on `allocator`.
    pub fn find(
        what: &[String],
        state: &Path,
        target: Option<Target>,
        allocator: &str,
        config: &Config,
    ) -> Result<Case> {
        let files = what.len() > 1 || what.first().is_some_and(|w| Path::new(w).is_file());
        if !files {
            let state = StateDir::open_to_read(state)?;
            let store = Store::open(&state.store())?;
            let g = Group::find(&state, &store, &what[0])?;
            return Ok(Case {
                inputs: g.inputs()?,
                target: g.target()?,
                allocator: g.slot.allocator.clone(),
                tolerate: g.tolerate(),
                group: Some(g.row.clone()),
                test_name: groups::test_name(&g.row),
            });
        }
        let target = target.context(
            "an input file needs --target (alloc_ops, heap_api, mt_ops, diff_mimalloc or workload)",
        )?;
        config.check_allocator(allocator)?;
        if let Some(missing) = what.iter().find(|w| !Path::new(w).is_file()) {
            bail!("{missing} is not a file; give a group id alone, or input files");
        }
        Ok(Case {
            inputs: what.iter().map(PathBuf::from).collect(),
            target,
            allocator: allocator.to_string(),
            tolerate: None,
            group: None,
            test_name: "allocsoak_repro".into(),
        })
    }
}

/// What the replay showed.
pub struct Shown {
    pub text: String,
    pub reproduced: bool,
    pub signature: Option<Signature>,
}

/// Replays `case` once on `binary` and renders what happened.
pub fn replay(case: &Case, binary: &Path, config: &Config) -> Result<Shown> {
    let replayer = Replayer {
        binary,
        allocator: &case.allocator,
        tolerate: case.tolerate.as_deref(),
        timeout_secs: config.timeout_secs,
        rss_limit_mb: config.rss_limit_mb,
        budget: Default::default(),
    };
    let inputs: Vec<&Path> = case.inputs.iter().map(PathBuf::as_path).collect();
    let replay = replayer
        .replay(&inputs, true)
        .with_context(|| format!("failed to run {}; run `just build`", binary.display()))?;
    if !replay.started {
        bail!("{}", startup_error(&case.allocator, &replay.log));
    }
    let programs = read_programs(case.target, &case.inputs)?;
    let slot = format!("{}/{}", case.target, case.allocator);
    let signature = replay.signature(&slot);
    let files = crate::pipeline::sequence::shell_args(&case.inputs);

    let mut text = String::new();
    writeln!(text, "repro: {files} on {slot}")?;
    match programs.as_slice() {
        [program] => writeln!(text, "\nprogram ({} ops):", program.ops.len())?,
        _ => writeln!(
            text,
            "\n{} programs, in order in one process (the crash needs the allocator state the ones before it leave):",
            programs.len()
        )?,
    }
    for line in triage::render::sequence_text(&programs, &replay.log).lines() {
        writeln!(text, "  {line}")?;
    }
    match &signature {
        Some(sig) => write_finding(&mut text, sig, &replay.log, case)?,
        None => writeln!(text, "\ndoes not reproduce on this build")?,
    }
    let tolerate = case.tolerate.as_ref().map_or_else(String::new, |t| {
        format!("ALLOCSOAK_TOLERATE={} ", t.display())
    });
    writeln!(
        text,
        "\nReproduce with: {tolerate}ALLOCSOAK_ALLOCATOR='{}' {} {files}",
        case.allocator,
        binary.display(),
    )?;
    Ok(Shown {
        text,
        reproduced: replay.reproduced,
        signature,
    })
}

/// What a replay that reproduced showed: its signature, the line that
/// says what broke, the stack, and whether it is still its group's bug.
fn write_finding(text: &mut String, sig: &Signature, log: &str, case: &Case) -> Result<()> {
    writeln!(text, "\n{}: {}", sig.kind, sig.title())?;
    let what = log.lines().find(|l| {
        l.contains("allocsoak violation:") || l.contains("ERROR: ") || l.contains("ssertion")
    });
    if let Some(line) = what {
        writeln!(text, "  {}", line.trim())?;
    }
    let stack = report::stack(log);
    if !stack.is_empty() {
        writeln!(text, "\nstack:")?;
        for (i, f) in stack.iter().enumerate().take(24) {
            writeln!(text, "  #{i} {f}")?;
        }
    }
    if let Some(row) = &case.group {
        let same = match row.shown_by(sig) {
            true => "same signature",
            false => "a different signature now",
        };
        writeln!(text, "\ngroup {}: {same}", row.id)?;
    }
    Ok(())
}

/// Writes the case's programs as a standalone `#[test]` to `path`.
pub fn emit_test(case: &Case, path: &Path, config: &Config) -> Result<()> {
    let programs = read_programs(case.target, &case.inputs)?;
    let setup = config.test_setup(&case.allocator);
    let test = shadow::Program::rust_test(&programs, &case.test_name, &case.allocator, &setup);
    crate::foundation::state::write_atomic(path, test.as_bytes())
}
