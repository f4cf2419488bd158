//! The zoo's heap API: the emulation, with `HeapDeleteDrops`,
//! `HeapSizedFreeStays`, `HeapRezallocStays` and `HeapExpandOverclaims`
//! planted.

use crate::allocator::{Allocator, EmulatedHeaps, HeapId, Heaps, InPlace};

/// Heap emulation, with `HeapDeleteDrops` planted in delete and the
/// other two in the heap's sized free and zeroed realloc.
pub(super) struct ZooHeaps {
    pub(super) inner: EmulatedHeaps,
    pub(super) base: &'static dyn Allocator,
    pub(super) drops: bool,
    /// `HeapSizedFreeStays`: a sized free leaves the block in its heap,
    /// so destroying the heap frees it again.
    pub(super) sized_free_stays: bool,
    /// `HeapExpandOverclaims`: an in-place grow of a heap's block says
    /// it grew and does nothing.
    pub(super) expand_overclaims: bool,
    /// `HeapRezallocStays`: a zeroed realloc that moves the block leaves
    /// the old one in its heap, so destroying the heap frees it again.
    pub(super) rezalloc_stays: bool,
}

impl Heaps for ZooHeaps {
    fn new_heap(&self) -> Option<HeapId> {
        self.inner.new_heap()
    }
    unsafe fn alloc_in(&self, heap: HeapId, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        self.inner.alloc_in(heap, size, align, zeroed)
    }
    unsafe fn realloc_in(
        &self,
        heap: HeapId,
        p: *mut u8,
        old: usize,
        align: usize,
        new_size: usize,
    ) -> *mut u8 {
        self.inner.realloc_in(heap, p, old, align, new_size)
    }
    unsafe fn free_in(&self, heap: HeapId, p: *mut u8, size: usize, align: usize) {
        self.inner.free_in(heap, p, size, align)
    }
    unsafe fn realloc_zeroed_in(
        &self,
        heap: HeapId,
        p: *mut u8,
        old: usize,
        align: usize,
        new_size: usize,
    ) -> Option<*mut u8> {
        // The base has no zeroed realloc: a realloc, then zeroes past the
        // old request, as the zoo's own does.
        let q = match self.rezalloc_stays {
            // The bug: the heap is not told the block moved.
            true => self.base.realloc(p, old, align, new_size),
            false => self.inner.realloc_in(heap, p, old, align, new_size),
        };
        if !q.is_null() && new_size > old {
            std::ptr::write_bytes(q.add(old), 0, new_size - old);
        }
        Some(q)
    }
    unsafe fn resize_in_place_in(
        &self,
        heap: HeapId,
        p: *mut u8,
        old: usize,
        align: usize,
        new_size: usize,
        extra: usize,
    ) -> Option<InPlace> {
        if self.expand_overclaims && new_size > old {
            // The bug: the heap's expand says the block grew, and did nothing.
            return Some(InPlace::Resized {
                ptr: p as usize,
                owned: new_size,
            });
        }
        self.inner
            .resize_in_place_in(heap, p, old, align, new_size, extra)
    }
    unsafe fn free_sized_in(&self, heap: HeapId, p: *mut u8, size: usize, align: usize) -> bool {
        match self.sized_free_stays {
            // The bug: the heap is not told the block is gone.
            true => self.base.free(p, size, align),
            false => self.inner.free_in(heap, p, size, align),
        }
        true
    }
    unsafe fn delete(&self, heap: HeapId) {
        let blocks = self.inner.blocks(heap);
        if self.drops && blocks.len() >= 3 {
            if let Some(&(p, size, align)) = blocks.iter().max_by_key(|(p, size, _)| (*size, *p)) {
                self.base.free(p as *mut u8, size, align);
            }
        }
        self.inner.delete(heap)
    }
    unsafe fn destroy(&self, heap: HeapId) {
        self.inner.destroy(heap)
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
