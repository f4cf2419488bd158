//! The entry point fuzz targets share: picks the allocator and mode from
//! the environment once per process, decodes, runs.
//!
//! - `ALLOCSOAK_ALLOCATOR`: allocator name (default `system`).
//! - `ALLOCSOAK_MODE`: `checked` (default) or `bare` (no shadow model: the
//!   cost floor for `just bench`).
//! - `ALLOCSOAK_TOLERATE`: a file of violation keys (or `prefix*`
//!   patterns) that are got past instead of crashing: a violation that
//!   leaves the heap sound is counted and the program goes on, any other
//!   ends its program quietly (see [`crate::violation`]).
//! - `ALLOCSOAK_HISTORY`: a file that keeps the last inputs the process
//!   ran, for a crash that needs them (see [`crate::history`]).

use std::sync::OnceLock;

use crate::allocator::{self, Allocator};
use crate::executor::{Executor, Mode, Stats};
use crate::op::{Program, Target};

struct Config {
    alloc: &'static dyn Allocator,
    mode: Mode,
}

fn config() -> &'static Config {
    static CONFIG: OnceLock<Config> = OnceLock::new();
    CONFIG.get_or_init(|| {
        let exit = |msg: String| -> ! {
            eprintln!("allocsoak: {msg}");
            std::process::exit(2)
        };
        let name = std::env::var("ALLOCSOAK_ALLOCATOR").unwrap_or_else(|_| "system".into());
        let alloc =
            allocator::by_name(&name).unwrap_or_else(|e| exit(format!("ALLOCSOAK_ALLOCATOR: {e}")));
        let mode = match std::env::var("ALLOCSOAK_MODE").as_deref() {
            Err(_) | Ok("checked") => Mode::Checked,
            Ok("bare") => Mode::Bare,
            Ok(other) => exit(format!(
                "ALLOCSOAK_MODE: unknown mode `{other}`; use `checked` or `bare`"
            )),
        };
        Config { alloc, mode }
    })
}

/// The allocator `diff_mimalloc` compares against.
pub fn reference() -> Result<&'static dyn Allocator, String> {
    #[cfg(feature = "mimalloc")]
    return allocator::by_name(
        allocator::bundled_names()
            .into_iter()
            .find(|n| n.starts_with("mimalloc"))
            .unwrap(),
    );
    #[cfg(not(feature = "mimalloc"))]
    Err("diff_mimalloc needs a build with the `mimalloc` feature".into())
}

/// Runs one program in `mode`; the differential target runs both sides.
pub fn run_program(program: &Program, alloc: &'static dyn Allocator, mode: Mode) -> Stats {
    match program.target {
        Target::DiffMimalloc => {
            let reference = reference().unwrap_or_else(|e| panic!("{e}"));
            crate::diff::run(program, alloc, reference, mode);
            Stats {
                ops: program.ops.len(),
                ..Stats::default()
            }
        }
        _ => Executor::new(alloc, mode).run(program),
    }
}

/// One fuzz input for `target`.
pub fn fuzz(target: Target, data: &[u8]) {
    let config = config();
    crate::history::record(data);
    let program = Program::decode(target, data);
    crate::violation::tolerate(|| {
        run_program(&program, config.alloc, config.mode);
    });
}
