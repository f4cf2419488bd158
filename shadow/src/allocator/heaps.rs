//! A heap API for allocators that have none: a heap is the set of blocks
//! allocated in it, destroy frees them one by one, delete forgets the set.
//!
//! Deterministic: destroy frees a heap's blocks in the order they were
//! allocated (a realloc keeps its block's place), never in an order that
//! depends on addresses or hashing, so a `heap_api` program makes the same
//! allocator calls in every process and replays and minimizes exactly.

use std::collections::BTreeMap;
use std::sync::Mutex;

use super::{Allocator, HeapId, Heaps, InPlace, ReallocToZero, Resize};

/// Heap emulation over any allocator.
pub struct EmulatedHeaps {
    inner: &'static dyn Allocator,
    state: Mutex<State>,
}

/// A live block of an emulated heap.
#[derive(Clone, Copy)]
struct Member {
    ptr: usize,
    size: usize,
    align: usize,
}

#[derive(Default)]
struct State {
    next: HeapId,
    /// Per heap: its blocks in allocation order. A heap holds at most a
    /// program's live blocks (256), so a linear search is cheap.
    heaps: BTreeMap<HeapId, Vec<Member>>,
}

impl EmulatedHeaps {
    pub fn new(inner: &'static dyn Allocator) -> EmulatedHeaps {
        EmulatedHeaps {
            inner,
            state: Mutex::new(State::default()),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Moves `p`'s membership of `heap` to `q`, now of `new_size` bytes
    /// (`q` null: `p` was freed; `q == p`: resized where it is).
    fn moved(&self, heap: HeapId, p: *mut u8, q: *mut u8, new_size: usize, align: usize) {
        let mut st = self.state();
        let set = st.heaps.entry(heap).or_default();
        let at = set.iter().position(|m| m.ptr == p as usize);
        match (at, q.is_null()) {
            (Some(i), false) => {
                set[i] = Member {
                    ptr: q as usize,
                    size: new_size,
                    align,
                }
            }
            (Some(i), true) => {
                set.remove(i);
            }
            (None, false) => set.push(Member {
                ptr: q as usize,
                size: new_size,
                align,
            }),
            (None, true) => {}
        }
    }

    /// Drops `p` from `heap`'s blocks.
    fn forget(&self, heap: HeapId, p: *mut u8) {
        if let Some(set) = self.state().heaps.get_mut(&heap) {
            set.retain(|m| m.ptr != p as usize);
        }
    }

    /// The blocks of `heap` as (address, size, align), sorted by address.
    pub fn blocks(&self, heap: HeapId) -> Vec<(usize, usize, usize)> {
        let mut v: Vec<_> = self
            .state()
            .heaps
            .get(&heap)
            .into_iter()
            .flatten()
            .map(|m| (m.ptr, m.size, m.align))
            .collect();
        v.sort_unstable();
        v
    }
}

impl Heaps for EmulatedHeaps {
    fn new_heap(&self) -> Option<HeapId> {
        let mut st = self.state();
        st.next += 1;
        let id = st.next;
        st.heaps.insert(id, Vec::new());
        Some(id)
    }

    unsafe fn alloc_in(&self, heap: HeapId, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        // SAFETY: `align` is one the allocator serves (this fn's contract).
        let p = unsafe { self.inner.alloc(size, align, zeroed) };
        if !p.is_null() {
            self.state().heaps.entry(heap).or_default().push(Member {
                ptr: p as usize,
                size,
                align,
            });
        }
        p
    }

    unsafe fn realloc_in(&self, heap: HeapId, p: *mut u8, r: Resize) -> *mut u8 {
        let (old, align, new_size) = (r.old, r.align, r.to);
        // SAFETY: `p` is a live block of the allocator, with `old` and `align` (this
        // fn's contract).
        let q = unsafe { self.inner.realloc(p, old, align, new_size) };
        let freed =
            q.is_null() && new_size == 0 && self.inner.realloc_to_zero() == ReallocToZero::Frees;
        if !q.is_null() || freed {
            self.moved(heap, p, q, new_size, align);
        }
        q
    }

    unsafe fn realloc_zeroed_in(&self, heap: HeapId, p: *mut u8, r: Resize) -> Option<*mut u8> {
        let x = self.inner.extras()?;
        // SAFETY: `p` is a live block of the allocator, as `r` says (this
        // fn's contract).
        let q = unsafe { x.realloc_zeroed(p, r) }?;
        if !q.is_null() {
            self.moved(heap, p, q, r.to, r.align);
        }
        Some(q)
    }

    unsafe fn free_in(&self, heap: HeapId, p: *mut u8, size: usize, align: usize) {
        self.forget(heap, p);
        // SAFETY: `p` is a live block of the allocator, with `size` and `align` (this
        // fn's contract).
        unsafe { self.inner.free(p, size, align) }
    }

    /// The allocator's realloc; a block that moves leaves the heap.
    unsafe fn remote_realloc_in(&self, heap: HeapId, p: *mut u8, r: Resize) -> Option<*mut u8> {
        let (old, align, new_size) = (r.old, r.align, r.to);
        // SAFETY: `p` is a live block of the allocator, with `old` and `align` (this
        // fn's contract).
        let q = unsafe { self.inner.realloc(p, old, align, new_size) };
        if q == p {
            self.moved(heap, p, q, new_size, align);
        } else if !q.is_null() {
            self.forget(heap, p);
        }
        Some(q)
    }

    fn reallocs_remotely(&self) -> bool {
        true
    }

    unsafe fn resize_in_place_in(
        &self,
        heap: HeapId,
        p: *mut u8,
        r: Resize,
        extra: usize,
    ) -> Option<InPlace> {
        let x = self.inner.extras()?;
        // SAFETY: `p` is a live block of the allocator, as `r` says (this
        // fn's contract).
        let result = unsafe { x.resize_in_place(p, r, extra) }?;
        if let InPlace::Resized { owned, .. } = result {
            self.moved(heap, p, p, owned, r.align);
        }
        Some(result)
    }

    unsafe fn free_sized_in(&self, heap: HeapId, p: *mut u8, size: usize, align: usize) -> bool {
        let freed = self
            .inner
            .extras()
            // SAFETY: `p` is a live block of the allocator, with `size` and `align`
            // (this fn's contract).
            .is_some_and(|x| unsafe { x.free_sized(p, size, align) });
        if freed {
            self.forget(heap, p);
        }
        freed
    }

    unsafe fn delete(&self, heap: HeapId) {
        self.state().heaps.remove(&heap);
    }

    unsafe fn destroy(&self, heap: HeapId) {
        let blocks = self.state().heaps.remove(&heap).unwrap_or_default();
        for m in blocks {
            // SAFETY: each member is a live block of the heap, with its size and
            // alignment; none is used again (this fn's contract).
            unsafe { self.inner.free(m.ptr as *mut u8, m.size, m.align) };
        }
    }

    fn collect(&self, _heap: HeapId, _force: bool) {}

    fn visit(&self, heap: HeapId) -> Option<Vec<(usize, usize)>> {
        Some(
            self.blocks(heap)
                .into_iter()
                .map(|(p, size, _)| (p, size))
                .collect(),
        )
    }

    fn contains(&self, heap: HeapId, p: usize) -> Option<bool> {
        Some(
            self.state()
                .heaps
                .get(&heap)
                .is_some_and(|s| s.iter().any(|m| m.ptr == p)),
        )
    }
}

/// mimalloc's block visitor (`mi_heap_visit_blocks`'s, and a C
/// allocator's `heap_visit_blocks`' under the same contract): collects
/// each visited block as (start, size) into the `Vec<(usize, usize)>` at
/// `arg`. Called once per area with a null block first, which it skips.
///
/// # Safety
/// `arg` is a `&mut Vec<(usize, usize)>` alive for the whole visit, which
/// only this visitor touches.
pub(crate) unsafe extern "C" fn collect_block<Heap, Area>(
    _heap: *const Heap,
    _area: *const Area,
    block: *mut std::ffi::c_void,
    size: usize,
    arg: *mut std::ffi::c_void,
) -> bool {
    if !block.is_null() {
        // SAFETY: `arg` is a `&mut Vec<(usize, usize)>` alive for the visit, which
        // only this visitor touches (this fn's contract).
        unsafe { (*(arg as *mut Vec<(usize, usize)>)).push((block as usize, size)) };
    }
    true
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::allocator::by_name;

    /// `system`, recording the address of every free.
    struct Recording {
        frees: Mutex<Vec<usize>>,
    }

    impl Allocator for Recording {
        fn name(&self) -> &str {
            "recording"
        }
        unsafe fn alloc(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
            // SAFETY: the caller's contract holds for `system` too (the same `max_align`).
            unsafe { by_name("system").unwrap().alloc(size, align, zeroed) }
        }
        unsafe fn realloc(&self, p: *mut u8, old: usize, align: usize, new: usize) -> *mut u8 {
            // SAFETY: the caller's: `p` is a block of `system`, as every block here is.
            unsafe { by_name("system").unwrap().realloc(p, old, align, new) }
        }
        unsafe fn free(&self, p: *mut u8, size: usize, align: usize) {
            self.frees.lock().unwrap().push(p as usize);
            // SAFETY: the caller's: `p` is a block of `system`, as every block here is.
            unsafe { by_name("system").unwrap().free(p, size, align) }
        }
    }

    #[test]
    fn destroy_frees_in_allocation_order() {
        let rec: &'static Recording = Box::leak(Box::new(Recording {
            frees: Mutex::new(Vec::new()),
        }));
        let heaps = EmulatedHeaps::new(rec);
        let h = heaps.new_heap().unwrap();
        let mut order = Vec::new();
        for i in 0..64 {
            // Sizes that scatter the blocks over size classes, so address
            // order is not allocation order either.
            let size = [24, 5000, 40, 300, 100_000][i % 5] + i;
            // SAFETY: `h` is the live heap just made; align 8 is within `system`'s max_align.
            order.push(unsafe { heaps.alloc_in(h, size, 8, false) } as usize);
        }
        // A realloc keeps its block's place; a freed block leaves the order.
        let r = Resize {
            old: 303,
            align: 8,
            to: 9000,
        };
        // SAFETY: `order[3]` is live in `h`, allocated above with size 300 + 3 and align 8.
        let grown = unsafe { heaps.realloc_in(h, order[3] as *mut u8, r) } as usize;
        order[3] = grown;
        // SAFETY: `order[10]` is live in `h` (only `order[3]` was reallocated), allocated with
        // size 24 + 10 and align 8, and freed once.
        unsafe { heaps.free_in(h, order[10] as *mut u8, 24 + 10, 8) };
        order.remove(10);
        rec.frees.lock().unwrap().clear();
        // SAFETY: `h` is live and neither it nor its blocks are used after (only their
        // addresses are compared).
        unsafe { heaps.destroy(h) };
        assert_eq!(*rec.frees.lock().unwrap(), order);
    }
}
