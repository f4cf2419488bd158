//! jemalloc's calls beyond alloc / realloc / free.

use std::ffi::c_int;

use tikv_jemalloc_sys as je;

use super::{classic, ctl, flags, Jemalloc};
use crate::allocator::{Extras, GoodSize, InPlace, PurgeDelay, Resize, ZeroedFrom};

/// Sets the calling thread's arena's dirty and muzzy decay times to `ms`,
/// or back to the process's options (`opt.*_decay_ms`).
pub(super) fn set_decay(ms: Option<isize>) -> bool {
    let Some(arena) = ctl::read::<u32>("thread.arena") else {
        return false;
    };
    ["dirty", "muzzy"].into_iter().all(|what| {
        let ms = ms.or_else(|| ctl::read::<isize>(&format!("opt.{what}_decay_ms")));
        ms.is_some_and(|ms| ctl::write(&format!("arena.{arena}.{what}_decay_ms"), ms))
    })
}

/// `rallocx` with `flags` (`MALLOCX_ZERO` among them); an impossible size,
/// undefined for *allocx, is refused here.
///
/// # Safety
/// `p` is a live jemalloc block; `flags` hold a power-of-two alignment and
/// only arena and tcache flags of this adapter's.
pub(super) unsafe fn rezalloc(p: *mut u8, new_size: usize, flags: c_int) -> *mut u8 {
    if classic(new_size) {
        return std::ptr::null_mut();
    }
    // SAFETY: `p` is live and `flags` valid (this fn's contract); `new_size` is not `classic`.
    unsafe { je::rallocx(p.cast(), new_size, flags) }.cast()
}

impl Extras for Jemalloc {
    /// `rallocx` with `MALLOCX_ZERO`: bytes past the old real size read zero.
    unsafe fn realloc_zeroed(&self, p: *mut u8, r: Resize) -> Option<*mut u8> {
        let (align, new_size) = (r.align, r.to);
        let flags = flags(align, true) | self.arenas.free_flags(p as usize);
        // SAFETY: `p` is a live block with `align` (`Extras::realloc_zeroed`'s contract), and
        // `free_flags` adds only `MALLOCX_TCACHE_NONE`.
        Some(unsafe { rezalloc(p, new_size, flags) })
    }

    /// jemalloc(3) on `MALLOCX_ZERO`: "In the growing reallocation case,
    /// the real size prior to reallocation defines the boundary between
    /// untouched bytes and those that are initialized to contain zero
    /// bytes"; the untouched bytes of a block allocated zeroed are zero.
    fn zeroed_from(&self) -> ZeroedFrom {
        ZeroedFrom::Written
    }

    /// `xallocx`: the real size it returns is at least `new_size` when the
    /// resize worked, else the block's old real size.
    unsafe fn resize_in_place(&self, p: *mut u8, r: Resize, extra: usize) -> Option<InPlace> {
        let (align, new_size) = (r.align, r.to);
        if classic(new_size) || classic(new_size.saturating_add(extra)) {
            return None;
        }
        // SAFETY: `p` is a live block with `align` (`Extras::resize_in_place`'s contract); the
        // sizes are not `classic`.
        let real = unsafe { je::xallocx(p.cast(), new_size, extra, flags(align, false)) };
        Some(match real >= new_size {
            true => InPlace::Resized {
                ptr: p as usize,
                owned: real,
            },
            false => InPlace::Unchanged,
        })
    }

    unsafe fn free_sized(&self, p: *mut u8, size: usize, align: usize) -> bool {
        if size == 0 {
            return false;
        }
        let flags = flags(align, false) | self.arenas.free_flags(p as usize);
        // SAFETY: `p` is a live block allocated with `size`, `align` (`Extras::free_sized`'s
        // contract), as `sdallocx` needs; `free_flags` adds only `MALLOCX_TCACHE_NONE`.
        unsafe { je::sdallocx(p.cast(), size, flags) };
        true
    }

    unsafe fn realloc_plain(&self, p: *mut u8, r: Resize) -> Option<*mut u8> {
        let new_size = r.to;
        // A deleted heap's block must skip the tcaches: `rallocx` can say so.
        let orphan = self.arenas.free_flags(p as usize);
        if orphan != 0 && !classic(new_size) {
            // SAFETY: `p` is a live block (`Extras::realloc_plain`'s contract); the size is not
            // `classic`.
            return Some(unsafe { je::rallocx(p.cast(), new_size, orphan) }.cast());
        }
        // SAFETY: `p` is a live block of this allocator (`Extras::realloc_plain`'s contract).
        Some(unsafe { je::realloc(p.cast(), new_size) }.cast())
    }

    unsafe fn realloc_null(&self, size: usize) -> Option<*mut u8> {
        // SAFETY: a null block is allowed: `realloc` then allocates, as `malloc`.
        Some(unsafe { je::realloc(std::ptr::null_mut(), size) }.cast())
    }

    unsafe fn free_null(&self) -> bool {
        // SAFETY: freeing null does nothing.
        unsafe { je::free(std::ptr::null_mut()) };
        true
    }

    fn good_size(&self, size: usize, align: usize) -> Option<GoodSize> {
        // SAFETY: jemalloc(3): `nallocx` is undefined only for size 0, which `classic` excludes;
        // it returns 0 for a size or alignment past the maximum.
        (!classic(size)).then(|| GoodSize::Exact(unsafe { je::nallocx(size, flags(align, false)) }))
    }

    /// Sets the calling thread's arena's decay times, flushes its tcache
    /// on `force`, and purges (`force`) or decays every arena.
    fn purge(&self, delay: PurgeDelay, force: bool) -> bool {
        if !set_decay(Some(delay.millis() as isize)) {
            return false;
        }
        if force {
            ctl::run("thread.tcache.flush");
        }
        ctl::arena_verb(ctl::ARENAS_ALL, if force { "purge" } else { "decay" });
        true
    }

    /// Every arena's dirty and muzzy pages (`stats.arenas.<all>.pdirty`,
    /// `.pmuzzy`, after an `epoch` refresh): freed pages not yet given
    /// back, which `arena.<all>.purge` purges ("all unused dirty pages").
    fn free_pages_kept(&self, _live: &[(usize, usize)]) -> Option<usize> {
        ctl::refresh_stats();
        let pages = ctl::all_arenas::<usize>("pdirty")? + ctl::all_arenas::<usize>("pmuzzy")?;
        Some(pages * ctl::read::<usize>("arenas.page")?)
    }

    /// Its `mmap`s refused on the program's thread, where the fuzz binary
    /// wraps them (`allocator/os/`): what it holds serves, nothing new.
    fn fail_os(&self, refuse: bool) -> bool {
        crate::allocator::os::refuse(refuse);
        crate::allocator::os::wrapped()
    }
}
