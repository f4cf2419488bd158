//! The zoo's heap API: the emulation, with `HeapDeleteDrops` planted.

use crate::allocator::{Allocator, EmulatedHeaps, HeapId, Heaps};

/// Heap emulation, with `HeapDeleteDrops` planted in delete.
pub(super) struct ZooHeaps {
    pub(super) inner: EmulatedHeaps,
    pub(super) base: &'static dyn Allocator,
    pub(super) drops: bool,
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
