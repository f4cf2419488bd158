//! mimalloc's calls beyond alloc / realloc / free.

use std::ffi::{c_long, c_void};
use std::sync::OnceLock;

use libmimalloc_sys as mi;

use super::{malloc_serves, Mimalloc, NAME, PURGE_DELAY};
use crate::allocator::{Extras, GoodSize, Hook, HookCell, InPlace, PurgeDelay, Resize, ZeroedFrom};

/// The hook [`Extras::set_hook`] registered.
static HOOK: HookCell = HookCell::new();

unsafe extern "C" fn deferred(force: bool, _heartbeat: std::ffi::c_ulonglong, _arg: *mut c_void) {
    HOOK.call(force);
}

/// `mi_option_disallow_os_alloc`, `mi_option_disallow_arena_alloc`.
#[cfg(not(feature = "mimalloc-v3"))]
const DISALLOW: [mi::mi_option_t; 2] = [17, 27];
/// The same in v3, whose enum puts the second one place earlier.
#[cfg(feature = "mimalloc-v3")]
const DISALLOW: [mi::mi_option_t; 2] = [17, 26];
/// Largest request whose usable size `mi_good_size` gives exactly: the
/// small and medium bins (`MI_MEDIUM_OBJ_SIZE_MAX`).
const GOOD_SIZE_MAX: usize = 64 << 10;

impl Extras for Mimalloc {
    /// `mi_rezalloc` for odd sizes, `mi_recalloc(p, n / 2, 2)` for even
    /// ones; their aligned forms for over-aligned blocks. (mimalloc zeroes
    /// from the old usable size on, whatever the block was allocated with.)
    unsafe fn realloc_zeroed(&self, p: *mut u8, r: Resize) -> Option<*mut u8> {
        let (align, new_size) = (r.align, r.to);
        let p = p.cast();
        // SAFETY: `p` is a live block and `align` its alignment (`Extras::realloc_zeroed`).
        let q = unsafe {
            match (malloc_serves(new_size, align), new_size.is_multiple_of(2)) {
                (true, false) => mi::mi_rezalloc(p, new_size),
                (true, true) => mi::mi_recalloc(p, new_size / 2, 2),
                (false, false) => mi::mi_rezalloc_aligned(p, new_size, align),
                (false, true) => mi::mi_recalloc_aligned(p, new_size / 2, 2, align),
            }
        };
        Some(q.cast())
    }

    /// mimalloc's "Re-allocation of zero initialized blocks" zeroes from
    /// the old usable size on; the bundled release has mimalloc#763, so it
    /// is held to that for every block ([`ZeroedFrom::MIMALLOC`]).
    fn zeroed_from(&self) -> ZeroedFrom {
        ZeroedFrom::MIMALLOC
    }

    /// `mi_expand`: fits in the block's usable size, or null (always null
    /// in builds with padding).
    unsafe fn resize_in_place(&self, p: *mut u8, r: Resize, _extra: usize) -> Option<InPlace> {
        let new_size = r.to;
        // SAFETY: `p` is a live block of this allocator (`Extras::resize_in_place`'s contract).
        let q = unsafe { mi::mi_expand(p.cast(), new_size) };
        Some(InPlace::of_expand(q, new_size))
    }

    unsafe fn free_sized(&self, p: *mut u8, size: usize, align: usize) -> bool {
        match malloc_serves(size, align) {
            // SAFETY: `p` is a live block allocated with `size` (`Extras::free_sized`'s contract).
            true => unsafe { mi::mi_free_size(p.cast(), size) },
            // SAFETY: `p` is a live block allocated with `size`, `align` (the same contract).
            false => unsafe { mi::mi_free_size_aligned(p.cast(), size, align) },
        }
        true
    }

    unsafe fn realloc_plain(&self, p: *mut u8, r: Resize) -> Option<*mut u8> {
        let new_size = r.to;
        // SAFETY: `p` is a live block of this allocator (`Extras::realloc_plain`'s contract).
        Some(unsafe { mi::mi_realloc(p.cast(), new_size) }.cast())
    }

    unsafe fn realloc_null(&self, size: usize) -> Option<*mut u8> {
        // SAFETY: a null block is allowed: `mi_realloc` then allocates, as `mi_malloc`.
        Some(unsafe { mi::mi_realloc(std::ptr::null_mut(), size) }.cast())
    }

    unsafe fn free_null(&self) -> bool {
        // SAFETY: freeing null does nothing.
        unsafe { mi::mi_free(std::ptr::null_mut()) };
        true
    }

    /// Exact for the small and medium bins of a release build without
    /// ASan: padding (debug and secure builds, and ASan tracking in the
    /// fuzz builds) makes the usable size smaller, and large blocks round
    /// to what the segment gives. Elsewhere, at least the request.
    fn good_size(&self, size: usize, align: usize) -> Option<GoodSize> {
        let padded = NAME != "mimalloc" || crate::poison::active();
        // SAFETY: `mi_good_size` is a pure function of its argument, for any size.
        let good = malloc_serves(size, align).then(|| unsafe { mi::mi_good_size(size) })?;
        Some(match !padded && size <= GOOD_SIZE_MAX {
            true => GoodSize::Exact(good),
            false => GoodSize::AtLeastAsked(good),
        })
    }

    /// Sets the purge delay and collects. Two ways around mimalloc's own
    /// behaviour: a forced purge first purges, under a delay above 0,
    /// everything marked for purging, since mimalloc (2.3.2 and 3.3.2,
    /// arena.c `mi_arenas_try_purge`) purges nothing while the delay is 0,
    /// not even what it marked under an earlier delay (corpus/findings,
    /// `mimalloc-2.3.2-purge-delay-zero-strands`); and "never" is a delay
    /// no run outlives, since what is freed under mimalloc's own -1 is
    /// never marked, for any later purge.
    fn purge(&self, delay: PurgeDelay, force: bool) -> bool {
        let millis = match delay {
            PurgeDelay::Never => c_long::from(i32::MAX),
            _ => delay.millis().into(),
        };
        // SAFETY: no pointer involved: `mi_option_set` range-checks the option, and
        // `mi_collect` only releases memory mimalloc holds free.
        unsafe {
            if force {
                mi::mi_option_set(PURGE_DELAY, 1);
                mi::mi_collect(true);
            }
            mi::mi_option_set(PURGE_DELAY, millis);
            mi::mi_collect(force);
        }
        true
    }

    /// Its free arena blocks' resident bytes (`kept.rs`); none counted in
    /// the v3 line, whose arenas are laid out otherwise.
    #[cfg(not(feature = "mimalloc-v3"))]
    fn free_pages_kept(&self, live: &[(usize, usize)]) -> Option<usize> {
        super::kept::free_blocks_resident(live)
    }

    /// `mi_register_deferred_free`: mimalloc calls the hook from its
    /// allocation slow path ("re-entrant": it may free and allocate).
    fn set_hook(&self, hook: Option<Hook>) -> bool {
        HOOK.set(hook);
        let deferred: mi::mi_deferred_free_fun = hook.and(Some(deferred));
        // SAFETY: `deferred`, when set, has `mi_deferred_free_fun`'s C signature, ignores `arg`
        // (null), and any thread may call it: it only reads an atomic and calls a hook that
        // never unwinds. None takes it away.
        unsafe { mi::mi_register_deferred_free(deferred, std::ptr::null_mut()) };
        true
    }

    /// A normal collect of the calling thread's heap calls the deferred free.
    fn run_hook(&self) -> bool {
        // SAFETY: no pointer involved; a non-forced collect only frees what mimalloc holds free.
        unsafe { mi::mi_collect(false) };
        true
    }

    /// Neither the OS nor an arena gives a new segment (every huge block,
    /// room past the segments held); then back to the process's values.
    fn fail_os(&self, refuse: bool) -> bool {
        static USUAL: OnceLock<[c_long; 2]> = OnceLock::new();
        // SAFETY: no pointer involved; `mi_option_get` range-checks the option.
        let usual = USUAL.get_or_init(|| DISALLOW.map(|o| unsafe { mi::mi_option_get(o) }));
        for (option, usual) in DISALLOW.into_iter().zip(usual) {
            // SAFETY: as above; `mi_option_set` takes any value for these two.
            unsafe { mi::mi_option_set(option, if refuse { 1 } else { *usual }) };
        }
        true
    }
}
