//! ASan's poisoning: how much of a block the harness may touch.
//!
//! In recover mode a bad access still happens after ASan's report, so the
//! harness asks ASan before it touches a block ([`accessible`]), and reads
//! one byte where the poison starts, which reports it, instead of writing
//! there. Without ASan (the tests, honggfuzz) every range is taken as
//! accessible.

use std::ffi::c_void;
use std::sync::OnceLock;

/// ASan's `__asan_region_is_poisoned`: the first poisoned byte of a
/// region, or null.
pub type RegionIsPoisoned = unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void;

static IS_POISONED: OnceLock<RegionIsPoisoned> = OnceLock::new();

/// Lets the harness ask ASan about memory before touching it (the fuzz
/// targets pass `__asan_region_is_poisoned` when they install the
/// sanitizer's hooks).
pub(crate) fn install(is_poisoned: RegionIsPoisoned) {
    let _ = IS_POISONED.set(is_poisoned);
}

/// Whether the process runs under ASan (the fuzz builds), where the C
/// allocators are built with it too.
pub fn active() -> bool {
    IS_POISONED.get().is_some()
}

/// How much of `[base + from, base + to)` the harness may touch: `to`
/// when ASan poisons none of it; else the first poisoned offset, after a
/// one-byte read there has made ASan report it (see the module docs).
///
/// # Safety
/// `base + from .. base + to` is what the caller was about to access.
pub unsafe fn accessible(base: *const u8, from: usize, to: usize) -> usize {
    match poisoned_from(base, from, to) {
        Some(at) => {
            std::ptr::read_volatile(base.add(at));
            at
        }
        None => to,
    }
}

/// The first offset in `[from, to)` of the block at `base` that ASan
/// poisons, without touching it: `None` when it poisons none (or the
/// process runs without ASan). What a check asks before it believes an
/// allocator's answer about a block's size.
pub fn poisoned_from(base: *const u8, from: usize, to: usize) -> Option<usize> {
    let is_poisoned = IS_POISONED.get()?;
    if from >= to {
        return None;
    }
    // SAFETY: ASan reads only its shadow of the range, and answers for
    // any address (one outside application memory counts as poisoned).
    let p = unsafe { is_poisoned(base.wrapping_add(from) as *mut c_void, to - from) };
    (!p.is_null()).then(|| p as usize - base as usize)
}
