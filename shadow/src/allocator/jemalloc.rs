//! jemalloc through tikv-jemalloc-sys (prefixed `_rjem_` symbols, so it runs
//! beside the process's malloc): the `*allocx` family and sized free.

use std::ffi::{c_int, c_void};

use tikv_jemalloc_sys as je;

use super::{Allocator, LiveBlock};
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

    unsafe fn free(&self, p: *mut u8, size: usize, align: usize) {
        if size == 0 {
            je::free(p.cast())
        } else {
            je::sdallocx(p.cast(), size, flags(align, false))
        }
    }

    unsafe fn usable_size(&self, p: *mut u8, _size: usize, align: usize) -> usize {
        je::sallocx(p as *const c_void, flags(align, false))
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
