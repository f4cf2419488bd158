//! The entry point fuzz targets share: picks the allocator and mode from
//! the environment once per process, decodes, runs.
//!
//! - `ALLOCSOAK_ALLOCATOR`: allocator name (default: what follows `__` in the
//!   binary's name, `alloc_ops__mimalloc`, else `system`).
//! - `ALLOCSOAK_REFERENCE`: the allocator `diff_mimalloc` compares against
//!   (default: the mimalloc this build links, `mimalloc` in a plain build).
//! - `ALLOCSOAK_MODE`: `checked` (default) or `bare` (no shadow model: the
//!   cost floor for `just bench`).
//! - `ALLOCSOAK_TOLERATE`: a file of violation keys (or `prefix*`
//!   patterns) that are got past instead of crashing: a violation that
//!   leaves the heap sound is counted and the program goes on, any other
//!   ends its program quietly (see [`crate::violation`]).
//! - `ALLOCSOAK_FINDINGS`: a folder where a violation that leaves the
//!   heap sound is saved with its input, and the process goes on; unset,
//!   it panics unless tolerated (see [`crate::findings`]).
//! - `ALLOCSOAK_RECORD`: a file the violation that ends the run is
//!   written to, typed (replays set it).
//! - `ALLOCSOAK_HISTORY`: a file that keeps the last inputs the process
//!   ran, for a crash that needs them (see [`crate::history`]).
//! - `ALLOCSOAK_TEXT_INPUTS=1`: an input that is op program text (as
//!   `program.txt` and a minimized crash hold it) runs as written; any
//!   other input decodes as fuzz bytes. Replays set it; fuzzing does not,
//!   so no fuzzer spends its time in the text parser.

use std::sync::OnceLock;

use crate::allocator::{self, Allocator};
use crate::executor::{Executor, Mode, Stats};
use crate::op::{Program, Target};

struct Config {
    alloc: &'static dyn Allocator,
    mode: Mode,
    text_inputs: bool,
}

fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let exit = |msg: String| -> ! {
            eprintln!("allocsoak: {msg}");
            std::process::exit(2)
        };
        let (name, from) = allocator_name();
        let alloc = allocator::by_name(&name).unwrap_or_else(|e| exit(format!("{from}: {e}")));
        let mode = match std::env::var("ALLOCSOAK_MODE").as_deref() {
            Err(_) | Ok("checked") => Mode::Checked,
            Ok("bare") => Mode::Bare,
            Ok(other) => exit(format!(
                "ALLOCSOAK_MODE: unknown mode `{other}`; use `checked` or `bare`"
            )),
        };
        let text_inputs = match std::env::var("ALLOCSOAK_TEXT_INPUTS").as_deref() {
            Err(_) | Ok("0") => false,
            Ok("1") => true,
            Ok(other) => exit(format!("ALLOCSOAK_TEXT_INPUTS: `{other}` is not 0 or 1")),
        };
        // The serial replay: the same race sections, one worker at a time.
        match std::env::var("ALLOCSOAK_SERIAL_RACES").as_deref() {
            Err(_) | Ok("0") => {}
            Ok("1") => crate::executor::serial_races(true),
            Ok(other) => exit(format!("ALLOCSOAK_SERIAL_RACES: `{other}` is not 0 or 1")),
        }
        Config {
            alloc,
            mode,
            text_inputs,
        }
    })
}

/// The allocator a binary runs, and where its name came from:
/// `ALLOCSOAK_ALLOCATOR`; else, for a binary named `<target>__<allocator>`,
/// the part after `__` (OSS-Fuzz and ClusterFuzzLite run a copy of each
/// target per allocator and set no environment of ours:
/// `oss-fuzz/build.sh`); else `system`.
fn allocator_name() -> (String, &'static str) {
    if let Ok(name) = std::env::var("ALLOCSOAK_ALLOCATOR") {
        return (name, "ALLOCSOAK_ALLOCATOR");
    }
    let exe = std::env::current_exe().ok();
    let file = exe.as_deref().and_then(|p| p.file_name()?.to_str());
    match file.and_then(|f| f.rsplit_once("__")) {
        Some((_, name)) if !name.is_empty() => {
            eprintln!("INFO: allocsoak: allocator `{name}`, from the binary's name");
            (name.to_string(), "the allocator in the binary's name")
        }
        _ => ("system".into(), "ALLOCSOAK_ALLOCATOR"),
    }
}

/// Reads the environment and loads the allocator now rather than at the
/// first input. libFuzzer targets call it from their init: a `dylib:`
/// library built with coverage (`-fsanitize=fuzzer-no-link`) registers its
/// counters as it loads, and libFuzzer counts them from then on, but lists
/// the modules it fuzzes (`INFO: Loaded 2 modules ...`) once, after init;
/// and a bad allocator name ends the process before fuzzing starts.
pub fn load() {
    config();
}

/// The allocator `diff_mimalloc` compares against: the one
/// `ALLOCSOAK_REFERENCE` names, read once per process; `Err` is a one-line
/// message for a bad name.
pub fn reference() -> Result<&'static dyn Allocator, String> {
    static REFERENCE: OnceLock<Result<&'static dyn Allocator, String>> = OnceLock::new();
    REFERENCE
        .get_or_init(|| reference_named(std::env::var("ALLOCSOAK_REFERENCE").ok().as_deref()))
        .clone()
}

/// The reference `name` names, or by default the mimalloc flavor this
/// build links (`mimalloc` or one of [`allocator::MIMALLOC_FLAVORS`]).
pub fn reference_named(name: Option<&str>) -> Result<&'static dyn Allocator, String> {
    let name = match name {
        Some(name) => name,
        None => default_reference()?,
    };
    allocator::by_name(name).map_err(|e| format!("ALLOCSOAK_REFERENCE: {e}"))
}

fn default_reference() -> Result<&'static str, String> {
    #[cfg(feature = "mimalloc-c")]
    return Ok(allocator::MIMALLOC);
    #[cfg(not(feature = "mimalloc-c"))]
    Err(
        "ALLOCSOAK_REFERENCE: unset, and this build has no mimalloc; name a reference allocator"
            .into(),
    )
}

/// Runs one program in `mode`; the differential target runs both sides.
pub fn run_program(program: &Program, alloc: &'static dyn Allocator, mode: Mode) -> Stats {
    match program.target {
        Target::DiffMimalloc => {
            let reference = reference().unwrap_or_else(|e| panic!("{e}"));
            crate::diff::run(program, alloc, reference, mode)
        }
        _ => Executor::with_seed_base(alloc, mode, crate::executor::seed_base_for(program))
            .run(program),
    }
}

/// One fuzz input for `target`.
pub fn fuzz(target: Target, data: &[u8]) {
    let config = config();
    if target == Target::DiffMimalloc {
        if let Err(e) = reference() {
            eprintln!("allocsoak: {e}");
            std::process::exit(2)
        }
    }
    crate::history::record(data);
    let program = match config.text_inputs {
        true => Program::from_input(target, data).unwrap_or_else(|e| {
            eprintln!("allocsoak: {e}");
            std::process::exit(2)
        }),
        false => Program::decode(target, data),
    };
    crate::findings::with_input(data, || {
        crate::tolerance::tolerate(|| {
            run_program(&program, config.alloc, config.mode);
            // In a replay: a leak of a block the program gave back is
            // keyed by the call that lost it.
            if let Some(leak) = crate::sanitizer::lost_block() {
                crate::sanitizer::check();
                crate::tolerance::raise_always(leak);
            }
        })
    });
}
