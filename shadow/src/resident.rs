//! A fuzzing process's resident size, kept near what its programs need.
//!
//! One process runs hundreds of thousands of programs, and libFuzzer ends
//! it when its resident size passes the RSS limit, as an `oom` finding of
//! the input it ran last. What a correct allocator holds free, and what
//! ASan's shadow keeps of the regions it maps, grows with the process, not
//! with any program: so between programs, when the process has grown by
//! [`GROWTH`] since it last looked, the allocator gives back what it holds
//! free ([`Allocator::trim`]) and the shadow's all-zero pages go back to
//! the OS ([`poison::release_zero_shadow`]).
//!
//! Only a fuzzing process does this ([`bound_this_process`], from the
//! harness); a program's own growth is never trimmed, so an allocator that
//! keeps memory it should not is still seen by the drift replay, which
//! runs without it.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};

use crate::allocator::Allocator;
use crate::edges::page_size;
use crate::poison;

/// Programs between two reads of the process's resident size.
const EVERY: u32 = 64;
/// How far the resident size may grow past what the last trim left
/// before the next one.
const GROWTH: u64 = 256 << 20;

static BOUNDED: AtomicBool = AtomicBool::new(false);

/// Makes this process bound its resident size between programs, and turns
/// transparent huge pages off for it: with them a block touched in three
/// places (a huge request's head, tail and a window) costs 6 MiB, and
/// pages an allocator gives back lazily (`MADV_FREE`) stay counted whole
/// (mimalloc asks for huge pages on its arenas: 1.5 GiB of a `heap_api`
/// process's 3 GiB). The allocator's code runs the same with or without
/// them.
pub fn bound_this_process() {
    BOUNDED.store(true, Ordering::Relaxed);
    // SAFETY: no pointer involved; `PR_SET_THP_DISABLE` only sets a flag of this process.
    unsafe { libc::prctl(libc::PR_SET_THP_DISABLE, 1, 0, 0, 0) };
}

/// Whether this process bounds its resident size: a fuzzing process.
pub fn bounded() -> bool {
    BOUNDED.load(Ordering::Relaxed)
}

/// The resident size past which libFuzzer ends this process: its
/// `-rss_limit_mb=N` argument, 2048 MiB when none is given (its default,
/// and the soak's); `None` for `-rss_limit_mb=0`, no limit.
pub fn rss_limit() -> Option<u64> {
    let mb = std::env::args()
        .rev()
        .find_map(|a| a.strip_prefix("-rss_limit_mb=")?.parse::<u64>().ok())
        .unwrap_or(2048);
    (mb > 0).then_some(mb << 20)
}

/// Called after each program, once it has freed everything: every
/// [`EVERY`]th program, trims when the process has grown [`GROWTH`] past
/// what the last trim left.
pub fn after_program(alloc: &dyn Allocator) {
    static PROGRAMS: AtomicU32 = AtomicU32::new(0);
    static LEFT: AtomicU64 = AtomicU64::new(0);
    if !BOUNDED.load(Ordering::Relaxed)
        || !PROGRAMS
            .fetch_add(1, Ordering::Relaxed)
            .is_multiple_of(EVERY)
    {
        return;
    }
    let Some(now) = resident_bytes() else { return };
    let left = LEFT.load(Ordering::Relaxed);
    if left == 0 || now >= left + GROWTH {
        if left != 0 {
            trim(alloc);
        }
        LEFT.store(resident_bytes().unwrap_or(now), Ordering::Relaxed);
    }
}

/// Gives back what `alloc` holds free ([`Allocator::trim`]) and ASan's
/// all-zero shadow pages.
pub fn trim(alloc: &dyn Allocator) {
    alloc.trim();
    poison::release_zero_shadow();
}

/// The process's resident size, from `/proc/self/statm` (its second
/// field, in pages); `None` when it does not read.
pub fn resident_bytes() -> Option<u64> {
    let statm = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = statm.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * page_size() as u64)
}

/// Bytes of `[start, end)` resident now (`mincore(2)`), read 64 MiB at a
/// time; a part that is not mapped counts none.
pub fn resident_in(start: usize, end: usize) -> u64 {
    let page = page_size();
    let (start, end) = (start / page * page, end.div_ceil(page) * page);
    let mut pages = 0u64;
    let mut vec = Vec::new();
    let mut at = start;
    while at < end {
        let len = (end - at).min(64 << 20);
        vec.resize(len / page, 0u8);
        // SAFETY: `at` is page-aligned and `vec` holds one byte per page of `len`;
        // mincore only reads the page tables, and fails (ENOMEM) on a hole.
        let ok = unsafe { libc::mincore(at as *mut libc::c_void, len, vec.as_mut_ptr()) } == 0;
        if ok {
            pages += vec.iter().filter(|&&b| b & 1 != 0).count() as u64;
        }
        at += len;
    }
    pages * page as u64
}
