//! The entry point fuzz targets share: loads the allocator the process's
//! [`Settings`](crate::settings::Settings) name (read from the
//! environment once per process, see there for the `ALLOCSOAK_*`
//! variables), decodes, runs.

use std::sync::OnceLock;

use crate::allocator::{self, Allocator, PurgeDelay};
use crate::executor::{Executor, Mode, Stats};
use crate::op::{Op, Program, Target};
use crate::settings::{self, AllocatorFrom};

/// The allocator under test, loaded once per process from the name the
/// settings give (a bad name ends the process); the serial replay's switch
/// is thrown here too, and mimalloc's purge timer is stopped before the
/// allocator loads ([`allocator::purge_when_asked`]), and the process
/// bounds its resident size ([`crate::resident`]).
fn loaded() -> &'static dyn Allocator {
    static ALLOC: OnceLock<&'static dyn Allocator> = OnceLock::new();
    *ALLOC.get_or_init(|| {
        let settings = settings::get();
        allocator::purge_when_asked();
        crate::resident::bound_this_process();
        let choice = &settings.allocator;
        if choice.from == AllocatorFrom::BinaryName {
            eprintln!(
                "INFO: allocsoak: allocator `{}`, from the binary's name",
                choice.name
            );
        }
        crate::sanitizer::starting(true);
        let alloc = allocator::by_name(&choice.name).unwrap_or_else(|e| {
            eprintln!("allocsoak: {}: {e}", choice.from.describe());
            std::process::exit(crate::sanitizer::EXIT_STARTUP)
        });
        // A check that fails before any program ran is read wrongly, or
        // is not a heap check: every op would be a finding of its own.
        if let Err(e) = alloc.heap_check() {
            eprintln!(
                "allocsoak: allocator `{}`: its heap check fails on a fresh heap ({e}): declare what it returns when the heap is sound (heap_check_returns, docs/allocators.md)",
                choice.name
            );
            std::process::exit(crate::sanitizer::EXIT_STARTUP)
        }
        crate::sanitizer::starting(false);
        // The serial replay: the same race sections, one worker at a time.
        if settings.serial_races {
            crate::executor::serial_races(true);
        }
        alloc
    })
}

/// Reads the environment and loads the allocator now rather than at the
/// first input. libFuzzer targets call it from their init: a `dylib:`
/// library built with coverage (`-fsanitize=fuzzer-no-link`) registers its
/// counters as it loads, and libFuzzer counts them from then on, but lists
/// the modules it fuzzes (`INFO: Loaded 2 modules ...`) once, after init;
/// and a bad allocator name ends the process before fuzzing starts.
pub fn load() {
    loaded();
}

/// The allocator `diff_mimalloc` compares against: the one the settings'
/// `ALLOCSOAK_REFERENCE` names, loaded once per process; `Err` is a
/// one-line message for a bad name.
/// The process says which once ([`report::REFERENCE_NAMED`]): a timeout
/// or a leak in the reference's calls is then the reference's. What it
/// maps as it loads is in its ledger ([`crate::allocator::os::ledger`]).
pub fn reference() -> Result<&'static dyn Allocator, String> {
    static REFERENCE: OnceLock<Result<&'static dyn Allocator, String>> = OnceLock::new();
    REFERENCE
        .get_or_init(|| {
            // What it maps as it loads (mimalloc reserves its arena for
            // the block it keeps) is its own too.
            crate::allocator::os::ledger::reference_side(true);
            let reference = reference_named(settings::get().reference.as_deref());
            crate::allocator::os::ledger::reference_side(false);
            if let Ok(r) = reference {
                eprintln!("{}{}", report::REFERENCE_NAMED, r.name());
            }
            reference
        })
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
/// In a checked replay, a child waits to name the writer of a word the
/// program's calls change ([`crate::writer`]).
pub fn run_program(program: &Program, alloc: &'static dyn Allocator, mode: Mode) -> Stats {
    if mode == Mode::Checked && crate::findings::recording() {
        crate::writer::fork_for(program);
    }
    // What a forced purge must give back is counted after it
    // (`purge-kept`): a program that makes one starts with what earlier
    // programs left free given back, so the count is its own, and the
    // program alone shows it again.
    let checks_purge = mode == Mode::Checked && program.ops.iter().any(purges_all);
    if checks_purge {
        alloc.trim();
    }
    let stats = match program.target {
        Target::DiffMimalloc => {
            let reference = reference().unwrap_or_else(|e| panic!("{e}"));
            if checks_purge {
                crate::sanitizer::on_reference_side(reference.name(), || reference.trim());
            }
            crate::diff::run(program, alloc, reference, mode)
        }
        Target::Workload => crate::executor::workload::run(program, alloc, mode),
        _ => Executor::with_seed_base(alloc, mode, crate::executor::seed_base_for(program))
            .run(program),
    };
    crate::writer::end_in_child();
    crate::writer::drop_child();
    stats
}

/// A purge at once of everything freed: the one `purge-kept` counts after.
fn purges_all(op: &Op) -> bool {
    matches!(
        op,
        Op::Purge {
            delay: PurgeDelay::Immediate,
            force: true
        }
    )
}

/// A `workload` input that is a recorded trace (a drift series' finding,
/// replayed to be filed), replayed whole. A fuzzer's input that only
/// starts like one is no trace: it does nothing.
fn replay_trace(data: &[u8], alloc: &'static dyn Allocator, mode: Mode) {
    let Ok(trace) = crate::op::trace::Trace::parse(data) else {
        return;
    };
    as_input(data, || {
        let replay = crate::executor::workload::replay;
        crate::tally::count(&replay(&trace, "recorded", alloc, mode, None));
    });
}

/// Runs `body` as the fuzz input `data`: its findings carry the input,
/// and a violation the settings tolerate ends the body, not the process.
fn as_input(data: &[u8], body: impl FnOnce()) {
    crate::findings::with_input(data, || crate::tolerance::tolerate(body));
}

/// One fuzz input for `target`.
pub fn fuzz(target: Target, data: &[u8]) {
    let settings = settings::get();
    let alloc = loaded();
    if target == Target::DiffMimalloc {
        if let Err(e) = reference() {
            eprintln!("allocsoak: {e}");
            std::process::exit(2)
        }
    }
    crate::history::record(data);
    if target == Target::Workload && crate::op::trace::is_trace(data) {
        return replay_trace(data, alloc, settings.mode);
    }
    let program = match settings.text_inputs {
        true => Program::from_input(target, data).unwrap_or_else(|e| {
            eprintln!("allocsoak: {e}");
            std::process::exit(2)
        }),
        false => Program::decode(target, data),
    };
    as_input(data, || {
        crate::tally::count(&run_program(&program, alloc, settings.mode));
        // In a replay: a leak of a block the program gave back is keyed by
        // the call that lost it.
        if let Some(leak) = crate::sanitizer::lost_block() {
            crate::ending::raise_always(leak);
        }
    });
}
