//! Memory `diff_mimalloc`'s reference holds, filed as the reference's.
//!
//! libFuzzer ends a process past its RSS limit with no stack, as an `oom`
//! of the input it ran last, and the soak files that under the slot: its
//! allocator under test. One process runs both sides, so a reference that
//! keeps memory it should give back (a cache with no bound) would be filed
//! against every allocator compared with it. What the reference holds is
//! read instead of guessed: the OS wrappers keep the ranges it mapped
//! as it loaded and while its side ran ([`ledger`]: mimalloc's arena,
//! reserved for the block it keeps from its start), and the pages of them
//! resident are its share of the process.
//!
//! Every [`EVERY`]th program of a fuzzing process, once its resident size
//! is a quarter of its RSS limit ([`crate::resident::rss_limit`]): when
//! the reference's ranges hold a quarter of the limit resident, it is
//! asked to give back what it holds free (mimalloc keeps what it freed
//! until its purge delay, an hour here) and they are counted again. Still
//! a quarter: a `held` finding whose line ends `[reference allocator
//! <name>]`, filed once, and the reference is retired: the process runs
//! the allocator under test alone from then on, so the reference never
//! ends it. Between programs every block is freed, so a correct reference
//! holds only what its own bookkeeping needs.
//!
//! A reference whose memory ASan's allocator serves (`system`, a Rust
//! allocator over `System`) or a `dylib:` (which maps through the C
//! library, not the wrappers) maps nothing the ledger sees: its growth is
//! still an `oom` of the slot.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

use crate::allocator::os::ledger;
use crate::allocator::Allocator;
use crate::resident::{bounded, resident_bytes, rss_limit};
use crate::sanitizer::on_reference_side;
use crate::violation::{By, Report, Site, Violation};

/// Programs between two looks.
const EVERY: u32 = 64;

static PROGRAMS: AtomicU32 = AtomicU32::new(0);
static RETIRED: AtomicBool = AtomicBool::new(false);

/// Whether the reference was retired for this process: the next program
/// runs on the allocator under test alone.
pub(super) fn retired() -> bool {
    RETIRED.load(Ordering::Relaxed)
}

/// After each program of a fuzzing process compared against `reference`:
/// files and retires a reference that holds a quarter of the RSS limit
/// (see the module doc).
pub(super) fn after_program(reference: &'static dyn Allocator) {
    if !bounded()
        || retired()
        || !PROGRAMS
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(EVERY)
    {
        return;
    }
    let Some(limit) = rss_limit() else { return };
    let quarter = limit / 4;
    // The reference holds a quarter only once the process does.
    if resident_bytes().is_none_or(|now| now < quarter) || ledger::reference_resident() < quarter {
        return;
    }
    on_reference_side(reference.name(), || crate::resident::trim(reference));
    let held = ledger::reference_resident();
    if held < quarter {
        return;
    }
    RETIRED.store(true, Ordering::Relaxed);
    crate::ending::record(Report {
        op_index: 0,
        op: "end of program".into(),
        site: Site::bare("end"),
        path: Vec::new(),
        violation: Violation::Held { held, limit },
        by: By::Reference(reference.name().to_string()),
    });
}
