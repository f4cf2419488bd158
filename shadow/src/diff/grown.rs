//! Whose memory a `diff_mimalloc` process grows by: the reference's or
//! the allocator under test's.
//!
//! libFuzzer ends a process past its RSS limit with no stack, as an `oom`
//! of the input it ran last, and the soak files that under the slot: its
//! allocator under test. One process runs both sides, so a reference that
//! keeps memory it should give back (a cache with no bound) would be filed
//! against every allocator compared with it. Their calls interleave, and
//! ASan gives memory back on a thread of its own, so the growth cannot be
//! read off each side's calls. It is measured as an experiment instead:
//! once a fuzzing process is past a third of its limit (libFuzzer's limit
//! is on its peak, which a huge block adds hundreds of MiB to)
//! ([`crate::resident::rss_limit`]), up to [`PROGRAMS`] programs run as
//! usual, then as many on the allocator under test alone, then up to as
//! many as usual again, both sides asked at each end to give back what
//! they hold free. When the process grew by a sixty-fourth of its limit with the
//! reference beside, by less than a quarter of that without it, and by a
//! sixty-fourth again with it (a reference that only reached a new
//! high-water mark once does not grow twice), the growth is the
//! reference's: a `grown` finding whose line ends `[reference allocator
//! <name>]`, filed once, and the reference is retired: the process runs
//! the allocator under test alone from then on, so it never reaches the
//! limit through the reference. Otherwise the comparison goes on, and the
//! experiment is made again once the process has grown by another eighth
//! of its limit; a process that grows through the allocator under test
//! reaches the limit as before, an `oom` of its slot.
//!
//! The figure is the process's resident size after a program (everything
//! freed), so it needs nothing of either allocator.

use std::sync::atomic::{AtomicI64, AtomicU32, AtomicU64, AtomicU8, Ordering};

use crate::allocator::Allocator;
use crate::resident::{bounded, resident_bytes, rss_limit};
use crate::violation::{By, Report, Site, Violation};

/// Programs between two looks at the resident size while no experiment runs.
const EVERY: u32 = 64;
/// Programs an experiment's first part runs at most: seconds of `diff_mimalloc`
/// under ASan (600–1,000 exec/s once the process is large).
const PROGRAMS: u32 = 8192;

/// Where the experiment is: [`IDLE`], [`WITH`] (both sides run, since
/// `FROM`), [`WITHOUT`] (the allocator under test alone, since `FROM`,
/// for as many programs as the first part ran, having grown `WITH_GREW`),
/// [`AGAIN`] (both, up to [`PROGRAMS`] again, `WITHOUT_GREW` after the
/// second part) or [`RETIRED`].
static STATE: AtomicU8 = AtomicU8::new(IDLE);
const IDLE: u8 = 0;
const WITH: u8 = 1;
const WITHOUT: u8 = 2;
const AGAIN: u8 = 3;
const RETIRED: u8 = 4;
static RAN: AtomicU32 = AtomicU32::new(0);
static FIRST_PART: AtomicU32 = AtomicU32::new(0);
static FROM: AtomicU64 = AtomicU64::new(0);
static WITH_GREW: AtomicU64 = AtomicU64::new(0);
static WITHOUT_GREW: AtomicI64 = AtomicI64::new(0);
/// The resident size the next experiment waits for (0: a third of the limit).
static NEXT_AT: AtomicU64 = AtomicU64::new(0);

/// Whether the next program runs on the allocator under test alone: the
/// experiment's second part, or a retired reference.
pub(super) fn alone() -> bool {
    matches!(STATE.load(Ordering::Relaxed), WITHOUT | RETIRED)
}

/// After each program of a fuzzing process compared against `reference`
/// (alone or not): moves the experiment on (see the module doc).
pub(super) fn after_program(under_test: &dyn Allocator, reference: &dyn Allocator) {
    let state = STATE.load(Ordering::Relaxed);
    if !bounded() || state == RETIRED {
        return;
    }
    let ran = RAN.fetch_add(1, Ordering::Relaxed) + 1;
    if state == IDLE && !ran.is_multiple_of(EVERY) {
        return;
    }
    let (Some(limit), Some(now)) = (rss_limit(), resident_bytes()) else {
        return;
    };
    let from = FROM.load(Ordering::Relaxed);
    let due = match state {
        IDLE => now >= NEXT_AT.load(Ordering::Relaxed).max(limit / 3),
        WITH => ran >= PROGRAMS || now.saturating_sub(from) >= limit / 16,
        WITHOUT => ran >= FIRST_PART.load(Ordering::Relaxed),
        _ => ran >= PROGRAMS || now.saturating_sub(from) >= limit / 64,
    };
    if !due {
        return;
    }
    // What a side gives back when asked is not kept: mimalloc holds what
    // it freed until its purge delay (an hour here).
    for alloc in [under_test, reference] {
        crate::resident::trim(alloc);
    }
    let now = resident_bytes().unwrap_or(now);
    let grew = now as i64 - from as i64;
    let enough = (limit / 64) as i64;
    let with = WITH_GREW.load(Ordering::Relaxed) as i64;
    match state {
        IDLE => start(WITH, now),
        WITH if grew < enough => give_up(now, limit),
        WITH => {
            FIRST_PART.store(ran, Ordering::Relaxed);
            WITH_GREW.store(grew as u64, Ordering::Relaxed);
            start(WITHOUT, now);
        }
        WITHOUT if grew >= with / 4 => give_up(now, limit),
        WITHOUT => {
            WITHOUT_GREW.store(grew, Ordering::Relaxed);
            start(AGAIN, now);
        }
        _ if grew < enough => give_up(now, limit),
        _ => {
            STATE.store(RETIRED, Ordering::Relaxed);
            let (first, without) = (
                FIRST_PART.load(Ordering::Relaxed),
                WITHOUT_GREW.load(Ordering::Relaxed),
            );
            report(reference, first, [with, without, grew], limit);
        }
    }
}

/// Moves to `state`, counting its programs from the resident size `now`.
fn start(state: u8, now: u64) {
    STATE.store(state, Ordering::Relaxed);
    RAN.store(0, Ordering::Relaxed);
    FROM.store(now, Ordering::Relaxed);
}

/// No verdict: the comparison goes on, and the next experiment waits for
/// another eighth of the limit.
fn give_up(now: u64, limit: u64) {
    NEXT_AT.store(now + limit / 8, Ordering::Relaxed);
    start(IDLE, now);
}

/// Files the reference's `grown` finding: what the process grew by with
/// the reference, without it and with it again.
fn report(reference: &dyn Allocator, programs: u32, grew: [i64; 3], limit: u64) {
    crate::ending::record(Report {
        op_index: 0,
        op: "end of program".into(),
        site: Site::bare("end"),
        path: Vec::new(),
        violation: Violation::Grown {
            programs,
            grew,
            limit,
        },
        by: By::Reference(reference.name().to_string()),
    });
}
