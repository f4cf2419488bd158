//! glibc's malloc family (or whatever `malloc` the process links: ASan's in
//! fuzz builds).

use std::ptr;

use super::{malloc_serves, Allocator, Extras, PurgeDelay, ReallocToZero, Resize};

/// The process's malloc family.
///
/// No validator: glibc's one account of what is in use, `mallinfo2`, sums
/// every arena of the process, every thread's blocks and the harness's own
/// (the shadow's maps and vectors use the same malloc). It always covers a
/// program's live bytes, so a comparison with them cannot fail, and its
/// change across a program counts other threads and the harness as much as
/// the program. In fuzz builds, where findings come from, malloc is ASan's
/// and glibc's arenas stay empty.
pub struct System;

unsafe fn aligned(size: usize, align: usize) -> *mut u8 {
    if size.is_multiple_of(align) && size > 0 {
        // SAFETY: no pointer involved; `align` is a power of two and `size` a nonzero multiple.
        return unsafe { libc::aligned_alloc(align, size) }.cast();
    }
    let mut p = ptr::null_mut();
    // SAFETY: `p` is a valid out-parameter; the alignment is a power of two (both callers have
    // one from `Allocator`'s contract) and a multiple of a pointer's size, as POSIX asks.
    match unsafe { libc::posix_memalign(&mut p, align.max(std::mem::size_of::<usize>()), size) } {
        0 => p.cast(),
        _ => ptr::null_mut(),
    }
}

impl Allocator for System {
    /// Its locks are taken around a fork (ASan's and glibc's; mimalloc's
    /// and jemalloc's own fork handlers).
    fn fork_safe(&self) -> bool {
        true
    }

    fn name(&self) -> &str {
        "system"
    }

    /// glibc's `mallinfo2`, over every arena: `malloc_in_use` (bytes in
    /// live blocks, mmapped ones included), `malloc_free` (free bytes kept
    /// in the arenas), `malloc_mapped` (bytes of mmapped blocks) and
    /// `malloc_arena` (bytes the arenas hold from the system, mmapped
    /// blocks not included). Under ASan, whose malloc this is in the fuzz
    /// builds, the figures are not glibc's.
    fn memory_figures(&self) -> Vec<(&'static str, u64)> {
        // SAFETY: `mallinfo2` takes no arguments and returns a struct by value.
        let m = unsafe { libc::mallinfo2() };
        vec![
            ("malloc_in_use", (m.uordblks + m.hblkhd) as u64),
            ("malloc_free", m.fordblks as u64),
            ("malloc_mapped", m.hblkhd as u64),
            ("malloc_arena", m.arena as u64),
        ]
    }

    unsafe fn alloc(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        match (malloc_serves(size, align), zeroed) {
            // SAFETY: `malloc` takes any size.
            (true, false) => unsafe { libc::malloc(size) }.cast(),
            // SAFETY: `calloc` takes any count and size.
            (true, true) => unsafe { libc::calloc(1, size) }.cast(),
            (false, zeroed) => {
                // SAFETY: `align` is a power of two (`Allocator::alloc`'s contract).
                let p = unsafe { aligned(size, align) };
                if zeroed && !p.is_null() {
                    // SAFETY: `p` is a fresh block of at least `size` bytes.
                    unsafe { ptr::write_bytes(p, 0, size) };
                }
                p
            }
        }
    }

    unsafe fn calloc(&self, count: usize, size: usize) -> *mut u8 {
        // SAFETY: `calloc` takes any count and size; it fails cleanly on overflow.
        unsafe { libc::calloc(count, size) }.cast()
    }

    unsafe fn realloc(
        &self,
        p: *mut u8,
        old_size: usize,
        align: usize,
        new_size: usize,
    ) -> *mut u8 {
        if malloc_serves(new_size, align) {
            // SAFETY: `p` is a live block of this allocator (`Allocator::realloc`'s contract).
            return unsafe { libc::realloc(p.cast(), new_size) }.cast();
        }
        // C has no aligned realloc: move by hand, as Rust's System does.
        // SAFETY: `align` is a power of two (`Allocator::realloc`'s contract).
        let q = unsafe { aligned(new_size, align) };
        if !q.is_null() {
            // SAFETY: `p` is live with `old_size` bytes (the caller's contract) and `q` is a fresh
            // block of `new_size`: both hold the bytes copied, and they are distinct blocks.
            unsafe { ptr::copy_nonoverlapping(p, q, old_size.min(new_size)) };
            // SAFETY: `p` is a live block of this allocator, not used again once moved.
            unsafe { libc::free(p.cast()) };
        }
        q
    }

    fn realloc_to_zero(&self) -> ReallocToZero {
        ReallocToZero::Frees
    }

    unsafe fn free(&self, p: *mut u8, _size: usize, _align: usize) {
        // SAFETY: `p` is a live block of this allocator (`Allocator::free`'s contract).
        unsafe { libc::free(p.cast()) }
    }

    unsafe fn usable_size(&self, p: *mut u8, _size: usize, _align: usize) -> usize {
        // SAFETY: `p` is a live block of this allocator (`Allocator::usable_size`'s contract).
        unsafe { libc::malloc_usable_size(p.cast()) }
    }

    fn extras(&self) -> Option<&dyn Extras> {
        Some(self)
    }
}

/// C's realloc edge cases, and `malloc_trim` as the purge.
impl Extras for System {
    unsafe fn realloc_plain(&self, p: *mut u8, r: Resize) -> Option<*mut u8> {
        let new_size = r.to;
        // SAFETY: `p` is a live block of this allocator (`Extras::realloc_plain`'s contract).
        Some(unsafe { libc::realloc(p.cast(), new_size) }.cast())
    }

    unsafe fn realloc_null(&self, size: usize) -> Option<*mut u8> {
        // SAFETY: a null block is allowed: `realloc` then allocates, as `malloc`.
        Some(unsafe { libc::realloc(ptr::null_mut(), size) }.cast())
    }

    unsafe fn free_null(&self) -> bool {
        // SAFETY: freeing null does nothing.
        unsafe { libc::free(ptr::null_mut()) };
        true
    }

    /// glibc has no purge delay to set; `malloc_trim(0)` returns what it can.
    fn purge(&self, _delay: PurgeDelay, force: bool) -> bool {
        if force {
            // SAFETY: `malloc_trim` only returns free memory to the system; live blocks stay.
            unsafe { libc::malloc_trim(0) };
        }
        true
    }
}
