//! A heap API for allocators that have none: a heap is the set of blocks
//! allocated in it, destroy frees them one by one, delete forgets the set.

use std::collections::HashMap;
use std::sync::Mutex;

use super::{Allocator, HeapId, Heaps, ReallocToZero};

/// Heap emulation over any allocator.
pub struct EmulatedHeaps {
    inner: &'static dyn Allocator,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    next: HeapId,
    /// Per heap: block address -> (size, align).
    heaps: HashMap<HeapId, HashMap<usize, (usize, usize)>>,
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

    /// The blocks of `heap` as (address, size, align), sorted by address.
    pub fn blocks(&self, heap: HeapId) -> Vec<(usize, usize, usize)> {
        let mut v: Vec<_> = self
            .state()
            .heaps
            .get(&heap)
            .into_iter()
            .flatten()
            .map(|(&p, &(s, a))| (p, s, a))
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
        st.heaps.insert(id, HashMap::new());
        Some(id)
    }

    unsafe fn alloc_in(&self, heap: HeapId, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        let p = self.inner.alloc(size, align, zeroed);
        if !p.is_null() {
            self.state()
                .heaps
                .entry(heap)
                .or_default()
                .insert(p as usize, (size, align));
        }
        p
    }

    unsafe fn realloc_in(
        &self,
        heap: HeapId,
        p: *mut u8,
        old: usize,
        align: usize,
        new_size: usize,
    ) -> *mut u8 {
        let q = self.inner.realloc(p, old, align, new_size);
        let freed =
            q.is_null() && new_size == 0 && self.inner.realloc_to_zero() == ReallocToZero::Frees;
        if !q.is_null() || freed {
            let mut st = self.state();
            let set = st.heaps.entry(heap).or_default();
            set.remove(&(p as usize));
            if !q.is_null() {
                set.insert(q as usize, (new_size, align));
            }
        }
        q
    }

    unsafe fn free_in(&self, heap: HeapId, p: *mut u8, size: usize, align: usize) {
        if let Some(set) = self.state().heaps.get_mut(&heap) {
            set.remove(&(p as usize));
        }
        self.inner.free(p, size, align)
    }

    unsafe fn delete(&self, heap: HeapId) {
        self.state().heaps.remove(&heap);
    }

    unsafe fn destroy(&self, heap: HeapId) {
        let blocks = self.state().heaps.remove(&heap).unwrap_or_default();
        for (p, (size, align)) in blocks {
            self.inner.free(p as *mut u8, size, align);
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
                .is_some_and(|s| s.contains_key(&p)),
        )
    }
}
