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

/// ASan's `__asan_get_shadow_mapping`: writes its shadow's scale and offset.
pub type ShadowMapping = unsafe extern "C" fn(*mut usize, *mut usize);

static IS_POISONED: OnceLock<RegionIsPoisoned> = OnceLock::new();
/// The shadow's scale and offset: the shadow byte of address `a` is at
/// `(a >> scale) + offset`.
static MAPPING: OnceLock<(usize, usize)> = OnceLock::new();

/// Lets the harness ask ASan about memory before touching it, and find
/// its shadow (the fuzz targets pass `__asan_region_is_poisoned` and
/// `__asan_get_shadow_mapping` when they install the sanitizer's hooks).
pub(crate) fn install(is_poisoned: RegionIsPoisoned, mapping: ShadowMapping) {
    let _ = IS_POISONED.set(is_poisoned);
    let (mut scale, mut offset) = (0, 0);
    // SAFETY: both arguments are valid `size_t` out-parameters on this frame, which ASan
    // only writes.
    unsafe { mapping(&mut scale, &mut offset) };
    let _ = MAPPING.set((scale, offset));
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
            // SAFETY: `at` is in `[from, to)`, the range the caller was about to
            // access (this fn's contract); the read is what makes ASan report it.
            unsafe { std::ptr::read_volatile(base.add(at)) };
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

/// Gives back to the OS every resident page of ASan's shadow that reads
/// all zero (the 32 KiB of memory it covers are all addressable), over
/// the shadow of every mapping of the process. A page given back reads zero again when next touched, so the
/// shadow says what it said: nothing ASan knows is lost.
///
/// Why: ASan unpoisons a range by writing zeros over its shadow, and an
/// allocator built with ASan tracking unpoisons each region it maps
/// (mimalloc, an eighth of each 1 GiB arena it reserves). Those pages
/// stay resident while the region lives, and arenas live as long as the
/// process: a fuzzing process of `heap_api` on mimalloc held 1.35 GiB of
/// shadow after two minutes, most of it zeros, and libFuzzer's RSS limit
/// filed a correct mimalloc as `oom`.
///
/// Call it between programs, when no other thread runs the allocator: a
/// poisoning meanwhile between the check and the release of its page
/// would be lost (a report missed, never a report made up). Without ASan
/// it does nothing.
pub fn release_zero_shadow() {
    let (Some(is_poisoned), Some(&(scale, offset))) = (IS_POISONED.get(), MAPPING.get()) else {
        return;
    };
    let Ok(maps) = std::fs::read_to_string("/proc/self/maps") else {
        return;
    };
    let page = crate::edges::page_size();
    let shadow = |a: usize| (a >> scale) + offset;
    // The shadow and ASan's own regions in it are not application memory.
    let shadow_end = shadow(1 << 47);
    for range in maps.lines().filter_map(|l| l.split(' ').next()) {
        let Some((lo, hi)) = range.split_once('-') else {
            continue;
        };
        let (Ok(lo), Ok(hi)) = (usize::from_str_radix(lo, 16), usize::from_str_radix(hi, 16))
        else {
            continue;
        };
        if hi <= lo || hi > 1 << 47 || (lo >= offset && lo < shadow_end) {
            continue;
        }
        let from = shadow(lo).next_multiple_of(page);
        let to = shadow(hi) / page * page;
        // In pieces: a reservation of terabytes (an allocator's address
        // space, mapped and never touched) would need a table of gigabytes.
        for at in (from..to).step_by(page * MINCORE_PAGES) {
            let end = to.min(at + page * MINCORE_PAGES);
            release_zero_pages(at, end, page, scale, offset, is_poisoned);
        }
    }
}

/// Most shadow pages [`release_zero_pages`] asks about at once: a
/// 1 MiB table, for 32 GiB of application memory.
const MINCORE_PAGES: usize = 1 << 20;

/// [`release_zero_shadow`] over the shadow pages `[from, to)`.
fn release_zero_pages(
    from: usize,
    to: usize,
    page: usize,
    scale: usize,
    offset: usize,
    is_poisoned: &RegionIsPoisoned,
) {
    let pages = (to - from) / page;
    let mut resident = vec![0u8; pages];
    // SAFETY: `[from, to)` is page-aligned shadow, which ASan maps for the whole address
    // space; `mincore` only writes `resident`, one byte per page. Called by number, so no
    // sanitizer interceptor reads the range.
    if unsafe { libc::syscall(libc::SYS_mincore, from, to - from, resident.as_mut_ptr()) } != 0 {
        return;
    }
    let covered = page << scale;
    let zero = |i: usize| {
        let app = ((from + i * page - offset) << scale) as *mut c_void;
        // SAFETY: ASan reads only the shadow of `[app, app + covered)`, the resident page `i`.
        resident[i] & 1 == 1 && unsafe { is_poisoned(app, covered) }.is_null()
    };
    // Each run of zero pages goes back in one call; page `i` after a run
    // is not zero (or is past the end).
    let mut i = 0;
    while i < pages {
        let start = i;
        while i < pages && zero(i) {
            i += 1;
        }
        if i > start {
            let (at, len) = (from + start * page, (i - start) * page);
            // SAFETY: pages `[start, i)` are shadow that reads all zero, and an anonymous
            // page given back reads zero when touched again; called by number, past any
            // interceptor.
            unsafe { libc::syscall(libc::SYS_madvise, at, len, libc::MADV_DONTNEED) };
        }
        i += 1;
    }
}
