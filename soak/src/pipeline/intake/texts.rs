//! The texts a new group's folder gets: its repro command, its program
//! and its crash stack.

use std::path::{Path, PathBuf};

use anyhow::Result;
use report::Signature;
use shadow::Target;
use triage::render;

use super::source::Source;
use crate::pipeline::sequence;

/// How a group reproduces: its command, and whether that command needs
/// the group's `tolerate` file (a known bug would otherwise fire first).
pub(super) struct Repro {
    pub command: String,
    pub needs_tolerate: bool,
}

/// The program a new group's page shows: `input` (its minimized text
/// when `minimized`, else the original input), replayed after the
/// history inputs `before`.
pub(super) struct Shown<'a> {
    pub input: &'a Path,
    pub minimized: bool,
    pub before: &'a [PathBuf],
}

/// The command that reproduces the group: the fuzz binary on the inputs
/// it needs before the crash (`history/`, in the group's folder `dir`; now
/// at `shown.before`) and the crash input (now at `shown.input`), plus the tolerate
/// file only when they need it. A minimized input is op program text,
/// which the binary runs as written under `ALLOCSOAK_TEXT_INPUTS=1`.
pub(super) fn repro_command(
    src: &Source,
    dir: &Path,
    shown: &Shown,
    sig: &Signature,
) -> Result<Repro> {
    let Shown {
        input,
        minimized,
        before,
    } = *shown;
    let file = dir.join(if minimized { "minimized" } else { "original" });
    let files: Vec<PathBuf> = (0..before.len())
        .map(|i| dir.join("history").join(sequence::file_name(i)))
        .chain([file])
        .collect();
    let inputs: Vec<&Path> = before.iter().map(PathBuf::as_path).chain([input]).collect();
    let plain = src.replay(&inputs, false)?;
    let plain_same = plain
        .signature(&src.slot_label())
        .is_some_and(|s| s.same_bug(sig));
    let needs_tolerate = !plain_same && src.tolerate.is_some();
    let tolerate = match needs_tolerate {
        true => format!("ALLOCSOAK_TOLERATE={} ", dir.join("tolerate").display()),
        false => String::new(),
    };
    let text = if minimized {
        "ALLOCSOAK_TEXT_INPUTS=1 "
    } else {
        ""
    };
    Ok(Repro {
        command: format!(
            "{tolerate}{text}{}ALLOCSOAK_ALLOCATOR='{}' {} {}",
            reference_setting(&sig.title()),
            src.allocator,
            src.binary.display(),
            sequence::shell_args(&files)
        ),
        needs_tolerate,
    })
}

/// `ALLOCSOAK_REFERENCE='<name>' ` for a bug of `diff_mimalloc`'s
/// reference (its title names it), which the replay must run beside: the
/// soak's reference may not be the binary's default.
pub(crate) fn reference_setting(title: &str) -> String {
    report::key::reference_of(title)
        .map(|r| format!("ALLOCSOAK_REFERENCE='{r}' "))
        .unwrap_or_default()
}

/// The program the input decodes to, the failing op marked; after the
/// programs of the inputs it needs before it, when it does.
pub(super) fn program_text(
    target: Target,
    before: &[PathBuf],
    input: &Path,
    log: &str,
) -> Result<String> {
    if shadow::op::trace::file_is_trace(input) {
        let data = std::fs::read(input)?;
        let trace = shadow::op::trace::Trace::parse(&data).map_err(anyhow::Error::msg)?;
        return Ok(format!(
            "# A recorded trace ({} calls on {} threads), replayed whole: `original`.\n\
             # Replay it beside its peers: allocsoak trace replay original --allocator <name>\n",
            trace.calls,
            trace.threads.len()
        ));
    }
    let mut inputs = before.to_vec();
    inputs.push(input.to_path_buf());
    let programs = crate::pipeline::program::read_programs(target, &inputs)?;
    Ok(render::sequence_text(&programs, log))
}

/// The crash stack of a log, one frame per line, every frame.
pub(super) fn stack_text(log: &str) -> String {
    report::stack(log)
        .iter()
        .map(|f| format!("{f}\n"))
        .collect()
}
