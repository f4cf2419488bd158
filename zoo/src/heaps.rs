//! The zoo's heap API: the emulation, with `HeapDeleteDrops`,
//! `HeapSizedFreeTwice`, `HeapRezallocFreesTwice`, `HeapExpandOverclaims`
//! and `HeapRemoteFreeTwice` planted.

use super::Bug;
use shadow::allocator::{Allocator, EmulatedHeaps, HeapId, Heaps, InPlace, Resize};

/// Heap emulation, with `HeapDeleteDrops` planted in delete and the
/// others in the heap's calls they name.
pub(super) struct ZooHeaps {
    pub(super) inner: EmulatedHeaps,
    pub(super) base: &'static dyn Allocator,
    /// The zoo's planted bugs; only the heap ones matter here.
    pub(super) bugs: Vec<Bug>,
}

impl ZooHeaps {
    fn has(&self, bug: Bug) -> bool {
        self.bugs.contains(&bug)
    }
}

impl Heaps for ZooHeaps {
    fn new_heap(&self) -> Option<HeapId> {
        self.inner.new_heap()
    }
    unsafe fn alloc_in(&self, heap: HeapId, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        // SAFETY: forwarded: this fn's contract (a valid align, `heap` live) is `alloc_in`'s.
        unsafe { self.inner.alloc_in(heap, size, align, zeroed) }
    }
    unsafe fn realloc_in(&self, heap: HeapId, p: *mut u8, r: Resize) -> *mut u8 {
        // SAFETY: forwarded: `p` is a live block of `heap` as `r` says (this fn's contract).
        unsafe { self.inner.realloc_in(heap, p, r) }
    }
    unsafe fn free_in(&self, heap: HeapId, p: *mut u8, size: usize, align: usize) {
        // SAFETY: forwarded: `p` is a live block of `heap` with `size` and `align` (this fn's
        // contract).
        unsafe { self.inner.free_in(heap, p, size, align) }
    }
    unsafe fn remote_free_in(&self, heap: HeapId, p: *mut u8, size: usize, align: usize) {
        // SAFETY: forwarded: `p` is a live block of `heap` with `size` and `align` (this fn's
        // contract).
        unsafe { self.inner.free_in(heap, p, size, align) };
        if self.has(Bug::HeapRemoteFreeTwice) {
            // The bug: the free queued for the heap's own thread is done
            // here too, and the queue frees it again.
            // SAFETY: not sound, on purpose: the planted `HeapRemoteFreeTwice` frees `p`,
            // freed just above, a second time.
            unsafe { self.base.free(p, size, align) };
        }
    }
    unsafe fn realloc_zeroed_in(&self, heap: HeapId, p: *mut u8, r: Resize) -> Option<*mut u8> {
        let (old, align, new_size) = (r.old, r.align, r.to);
        // The base has no zeroed realloc: a realloc, then zeroes past the
        // old request, as the zoo's own does.
        // SAFETY: `p` is a live block of `heap` with `old` and `align` (this fn's contract).
        let q = unsafe { self.inner.realloc_in(heap, p, r) };
        if self.has(Bug::HeapRezallocFreesTwice) && !q.is_null() && q != p {
            // The bug: the moved block's old home is freed again, by a
            // fall-through into the plain zeroed realloc's own free.
            // SAFETY: not sound, on purpose: the planted `HeapRezallocFreesTwice` frees `p`,
            // which the realloc that moved it freed already.
            unsafe { self.base.free(p, old, align) };
        }
        if !q.is_null() && new_size > old {
            // SAFETY: `q` is a block of `new_size` bytes, so `[old, new_size)` lies in it.
            unsafe { std::ptr::write_bytes(q.add(old), 0, new_size - old) };
        }
        Some(q)
    }
    unsafe fn resize_in_place_in(
        &self,
        heap: HeapId,
        p: *mut u8,
        r: Resize,
        extra: usize,
    ) -> Option<InPlace> {
        let (old, new_size) = (r.old, r.to);
        if self.has(Bug::HeapExpandOverclaims) && new_size > old {
            // The bug: the heap's expand says the block grew, and did nothing.
            return Some(InPlace::Resized {
                ptr: p as usize,
                owned: new_size,
            });
        }
        // SAFETY: forwarded: `p` is a live block of `heap` as `r` says (this fn's contract).
        unsafe { self.inner.resize_in_place_in(heap, p, r, extra) }
    }
    unsafe fn free_sized_in(&self, heap: HeapId, p: *mut u8, size: usize, align: usize) -> bool {
        // SAFETY: `p` is a live block of `heap` with `size` and `align` (this fn's contract).
        unsafe { self.inner.free_in(heap, p, size, align) };
        if self.has(Bug::HeapSizedFreeTwice) {
            // The bug: the heap's sized free falls through to the global
            // one, which frees the block again.
            // SAFETY: not sound, on purpose: the planted `HeapSizedFreeTwice` frees `p`,
            // freed just above, a second time.
            unsafe { self.base.free(p, size, align) };
        }
        true
    }
    unsafe fn delete(&self, heap: HeapId) {
        let blocks = self.inner.blocks(heap);
        if self.has(Bug::HeapDeleteDrops) && blocks.len() >= 3 {
            if let Some(&(p, size, align)) = blocks.iter().max_by_key(|(p, size, _)| (*size, *p)) {
                // SAFETY: not sound, on purpose: the planted `HeapDeleteDrops` frees a block
                // of the heap (with its size and align) that delete must leave live.
                unsafe { self.base.free(p as *mut u8, size, align) };
            }
        }
        // SAFETY: forwarded: `heap` is live and not used again (this fn's contract).
        unsafe { self.inner.delete(heap) }
    }
    unsafe fn destroy(&self, heap: HeapId) {
        // SAFETY: forwarded: `heap` is live and none of its blocks is used again (this fn's
        // contract).
        unsafe { self.inner.destroy(heap) }
    }
    fn collect(&self, heap: HeapId, force: bool) {
        self.inner.collect(heap, force)
    }
    fn visit(&self, heap: HeapId) -> Option<Vec<(usize, usize)>> {
        self.inner.visit(heap)
    }
    fn contains(&self, heap: HeapId, p: usize) -> Option<bool> {
        self.inner.contains(heap, p)
    }
}
