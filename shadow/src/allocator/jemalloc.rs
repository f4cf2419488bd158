//! jemalloc through tikv-jemalloc-sys (prefixed `_rjem_` symbols, so it runs
//! beside the process's malloc): the `*allocx` family, and the extras
//! (`rallocx` with `MALLOCX_ZERO`, `xallocx`, `sdallocx`, `nallocx`, decay
//! settings and purges).

use std::ffi::{c_int, c_void};

use tikv_jemalloc_sys as je;

use super::{Allocator, Extras, InPlace, LiveBlock, PurgeDelay};
use crate::edges::IMPOSSIBLE_FROM;

pub struct Jemalloc;

fn flags(align: usize, zeroed: bool) -> c_int {
    je::MALLOCX_ALIGN(align) | if zeroed { je::MALLOCX_ZERO } else { 0 }
}

/// The `*allocx` calls are undefined for size 0 and for sizes that overflow
/// a size class; those go through the classic API, which fails cleanly.
fn classic(size: usize) -> bool {
    size == 0 || size >= IMPOSSIBLE_FROM
}

impl Allocator for Jemalloc {
    fn name(&self) -> &str {
        "jemalloc"
    }

    unsafe fn alloc(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        if !classic(size) {
            return je::mallocx(size, flags(align, zeroed)).cast();
        }
        let mut p = std::ptr::null_mut();
        if je::posix_memalign(&mut p, align.max(std::mem::size_of::<usize>()), size) != 0 {
            return std::ptr::null_mut();
        }
        p.cast()
    }

    unsafe fn calloc(&self, count: usize, size: usize) -> *mut u8 {
        je::calloc(count, size).cast()
    }

    unsafe fn realloc(&self, p: *mut u8, _old: usize, align: usize, new_size: usize) -> *mut u8 {
        if classic(new_size) {
            return je::realloc(p.cast(), new_size).cast();
        }
        // Even sizes try to resize in place first, so both paths are covered.
        // Only an exact class change counts: sized free (`sdallocx`) later
        // needs `nallocx(new_size) == sallocx(p)`, and an in-place shrink that
        // could not shrink leaves the block in its old class.
        let flags = flags(align, false);
        if new_size % 2 == 0
            && je::xallocx(p.cast(), new_size, 0, flags) == je::nallocx(new_size, flags)
        {
            return p;
        }
        je::rallocx(p.cast(), new_size, flags).cast()
    }

    /// Unsized: `sdallocx` is the `free-sized` op's.
    unsafe fn free(&self, p: *mut u8, _size: usize, _align: usize) {
        je::dallocx(p.cast(), 0)
    }

    unsafe fn usable_size(&self, p: *mut u8, _size: usize, align: usize) -> usize {
        je::sallocx(p as *const c_void, flags(align, false))
    }

    fn extras(&self) -> Option<&dyn Extras> {
        Some(self)
    }

    /// The next program starts with the process's decay times.
    fn reset(&self) {
        unsafe { set_decay(None) };
    }

    /// What jemalloc says a block is (`sallocx`) must be what it says such a
    /// request gets (`nallocx`): sized free relies on it.
    fn validate(&self, live: &[LiveBlock]) -> Result<(), String> {
        for b in live.iter().filter(|b| !classic(b.size)) {
            let (real, promised) = unsafe {
                (
                    je::sallocx(b.ptr as *const c_void, flags(b.align, false)),
                    je::nallocx(b.size, flags(b.align, false)),
                )
            };
            if real != promised {
                return Err(format!(
                    "sallocx({:#x}) = {real} but nallocx({}, align {}) = {promised}",
                    b.ptr, b.size, b.align
                ));
            }
        }
        Ok(())
    }
}

/// `MALLCTL_ARENAS_ALL`: `arena.<i>` names every arena.
const ARENAS_ALL: u32 = 4096;

/// Writes `value` to the mallctl `name`; `false` if jemalloc refuses.
unsafe fn mallctl_set<T>(name: &str, mut value: T) -> bool {
    let name = std::ffi::CString::new(name).expect("mallctl name");
    let newp = (&mut value as *mut T).cast();
    je::mallctl(
        name.as_ptr(),
        std::ptr::null_mut(),
        std::ptr::null_mut(),
        newp,
        std::mem::size_of::<T>(),
    ) == 0
}

/// Runs the mallctl `name` that neither reads nor writes (a purge, a flush).
unsafe fn mallctl_run(name: &str) -> bool {
    let name = std::ffi::CString::new(name).expect("mallctl name");
    let null = std::ptr::null_mut();
    je::mallctl(name.as_ptr(), null, std::ptr::null_mut(), null, 0) == 0
}

/// Reads the mallctl `name`.
unsafe fn mallctl_get<T: Default>(name: &str) -> Option<T> {
    let name = std::ffi::CString::new(name).expect("mallctl name");
    let mut value = T::default();
    let mut len = std::mem::size_of::<T>();
    let oldp = (&mut value as *mut T).cast();
    (je::mallctl(name.as_ptr(), oldp, &mut len, std::ptr::null_mut(), 0) == 0).then_some(value)
}

/// Sets the calling thread's arena's dirty and muzzy decay times to `ms`,
/// or back to the process's options (`opt.*_decay_ms`).
unsafe fn set_decay(ms: Option<isize>) -> bool {
    let Some(arena) = mallctl_get::<u32>("thread.arena") else {
        return false;
    };
    ["dirty", "muzzy"].into_iter().all(|what| {
        let ms = ms.or_else(|| mallctl_get::<isize>(&format!("opt.{what}_decay_ms")));
        ms.is_some_and(|ms| mallctl_set(&format!("arena.{arena}.{what}_decay_ms"), ms))
    })
}

impl Extras for Jemalloc {
    /// `rallocx` with `MALLOCX_ZERO`: bytes past the old real size read zero.
    unsafe fn realloc_zeroed(
        &self,
        p: *mut u8,
        _old: usize,
        align: usize,
        new_size: usize,
    ) -> Option<*mut u8> {
        if classic(new_size) {
            // Undefined for *allocx; an impossible size is refused here.
            return Some(std::ptr::null_mut());
        }
        Some(je::rallocx(p.cast(), new_size, flags(align, true)).cast())
    }

    /// `xallocx`: the real size it returns is at least `new_size` when the
    /// resize worked, else the block's old real size.
    unsafe fn resize_in_place(
        &self,
        p: *mut u8,
        _old: usize,
        align: usize,
        new_size: usize,
        extra: usize,
    ) -> Option<InPlace> {
        if classic(new_size) || classic(new_size.saturating_add(extra)) {
            return None;
        }
        let real = je::xallocx(p.cast(), new_size, extra, flags(align, false));
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
        je::sdallocx(p.cast(), size, flags(align, false));
        true
    }

    unsafe fn realloc_plain(
        &self,
        p: *mut u8,
        _old: usize,
        _align: usize,
        new_size: usize,
    ) -> Option<*mut u8> {
        Some(je::realloc(p.cast(), new_size).cast())
    }

    unsafe fn realloc_null(&self, size: usize) -> Option<*mut u8> {
        Some(je::realloc(std::ptr::null_mut(), size).cast())
    }

    unsafe fn free_null(&self) -> bool {
        je::free(std::ptr::null_mut());
        true
    }

    fn good_size(&self, size: usize, align: usize) -> Option<usize> {
        (!classic(size)).then(|| unsafe { je::nallocx(size, flags(align, false)) })
    }

    /// Sets the calling thread's arena's dirty and muzzy decay, flushes
    /// its tcache on `force`, and purges (`force`) or decays every arena.
    fn purge(&self, delay: PurgeDelay, force: bool) -> bool {
        let ms: isize = match delay {
            PurgeDelay::Immediate => 0,
            PurgeDelay::Millis(ms) => ms as isize,
            PurgeDelay::Never => -1,
        };
        unsafe {
            if !set_decay(Some(ms)) {
                return false;
            }
            if force {
                mallctl_run("thread.tcache.flush");
            }
            let verb = if force { "purge" } else { "decay" };
            mallctl_run(&format!("arena.{ARENAS_ALL}.{verb}"));
        }
        true
    }
}
