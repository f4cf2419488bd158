//! A C allocator's calls beyond the malloc family ([`Extras`]), under
//! mimalloc's names and argument orders (`rezalloc`, `expand`,
//! `free_size`, ...), and C's realloc edge cases.

use std::ptr;

use super::{malloc_serves, Dylib};
use crate::allocator::os;
use crate::allocator::{Extras, GoodSize, InPlace, Resize, ZeroedFrom};

/// C's realloc edge cases, where the library has `realloc`.
impl Extras for Dylib {
    unsafe fn realloc_plain(&self, p: *mut u8, r: Resize) -> Option<*mut u8> {
        let new_size = r.to;
        // SAFETY: `p` is a live block of this allocator (this fn's contract).
        self.realloc
            .map(|f| unsafe { f(p.cast(), new_size) }.cast())
    }

    unsafe fn realloc_null(&self, size: usize) -> Option<*mut u8> {
        // SAFETY: `realloc(NULL, size)` takes no block.
        self.realloc
            .map(|f| unsafe { f(ptr::null_mut(), size) }.cast())
    }

    unsafe fn free_null(&self) -> bool {
        // SAFETY: `free(NULL)` takes no block.
        unsafe { (self.free)(ptr::null_mut()) };
        true
    }

    /// A C allocator built from its sources calls the OS through
    /// [`os`]; a library loaded (`dylib:`) calls it directly.
    fn fail_os(&self, refuse: bool) -> bool {
        if self.library.is_none() {
            os::refuse(refuse);
        }
        self.library.is_none()
    }

    /// A C allocator's `rezalloc` is mimalloc's API, held to what
    /// mimalloc documents of it ([`ZeroedFrom::Written`]) unless declared
    /// otherwise.
    fn zeroed_from(&self) -> ZeroedFrom {
        self.properties.zeroed_from.unwrap_or(ZeroedFrom::Written)
    }

    unsafe fn realloc_zeroed(&self, p: *mut u8, r: Resize) -> Option<*mut u8> {
        let (align, new_size) = (r.align, r.to);
        let more = &self.more;
        // SAFETY: `p` is a live block of this allocator, with `align` (this fn's contract).
        unsafe {
            match (
                malloc_serves(new_size, align),
                more.rezalloc,
                more.rezalloc_aligned,
            ) {
                (true, Some(f), _) => Some(f(p.cast(), new_size).cast()),
                (_, _, Some(f)) => Some(f(p.cast(), new_size, align).cast()),
                _ => None,
            }
        }
    }

    unsafe fn resize_in_place(&self, p: *mut u8, r: Resize, _extra: usize) -> Option<InPlace> {
        let new_size = r.to;
        let expand = self.more.expand?;
        // SAFETY: `p` is a live block of this allocator (this fn's contract).
        let q = unsafe { expand(p.cast(), new_size) };
        Some(InPlace::of_expand(q, new_size))
    }

    unsafe fn free_sized(&self, p: *mut u8, size: usize, align: usize) -> bool {
        let more = &self.more;
        // SAFETY: `p` is a live block of this allocator, allocated with `size` and
        // `align` (this fn's contract).
        unsafe {
            match (
                malloc_serves(size, align),
                more.free_size,
                more.free_size_aligned,
            ) {
                (true, Some(f), _) => f(p.cast(), size),
                (_, _, Some(f)) => f(p.cast(), size, align),
                _ => return false,
            }
        }
        true
    }

    /// At least the request (mimalloc's promise, whose API family this
    /// is), and exact up to the declared `good_size_exact_up_to`.
    fn good_size(&self, size: usize, align: usize) -> Option<GoodSize> {
        let f = self.more.good_size?;
        // SAFETY: a pure function of its argument, by its contract.
        let good = malloc_serves(size, align).then(|| unsafe { f(size) })?;
        Some(match size <= self.properties.good_size_exact_up_to {
            true => GoodSize::Exact(good),
            false => GoodSize::AtLeastAsked(good),
        })
    }
}
