//! The heaps a program holds, on the allocator's own heap API or an
//! emulated one.

use std::sync::Arc;

use crate::allocator::{Allocator, EmulatedHeaps, HeapId, Heaps};

/// Most heaps a program holds at once.
const MAX_HEAPS: usize = 8;

/// The heaps a program holds: the heap API it makes them through (the
/// allocator's own, or an emulation over its plain calls when it has
/// none), the live heaps, and the heap blocks other threads freed.
pub(super) struct HeapTable {
    alloc: &'static dyn Allocator,
    /// Used when the allocator has no heap API of its own.
    emulated: Option<Arc<EmulatedHeaps>>,
    ids: Vec<HeapId>,
    /// Heap blocks freed by a race section's other threads since their
    /// heap last collected: a visit may still list them, as a heap defers
    /// a free from another thread to its own (mimalloc's page keeps a
    /// "list of deferred free blocks freed by other threads").
    remote_freed: Vec<(HeapId, usize)>,
}

impl HeapTable {
    pub(super) fn new(alloc: &'static dyn Allocator) -> HeapTable {
        HeapTable {
            alloc,
            emulated: alloc
                .heaps()
                .is_none()
                .then(|| Arc::new(EmulatedHeaps::new(alloc))),
            ids: Vec::new(),
            remote_freed: Vec::new(),
        }
    }

    /// The heap API the heaps are made through.
    pub(super) fn api(&self) -> &dyn Heaps {
        match &self.emulated {
            Some(e) => &**e,
            None => self.alloc.heaps().expect("allocator lost its heap API"),
        }
    }

    /// [`HeapTable::api`], for a race section's workers.
    pub(super) fn calls(&self) -> HeapCalls {
        match &self.emulated {
            Some(e) => HeapCalls::Emulated(e.clone()),
            None => HeapCalls::Own(self.alloc.heaps().expect("allocator lost its heap API")),
        }
    }

    /// Whether the heaps are the allocator's own.
    pub(super) fn are_own(&self) -> bool {
        self.emulated.is_none()
    }

    /// `real` when the allocator has its own heap API, else `emulated`
    /// (emulated heaps call the allocator's plain functions).
    pub(super) fn api_name(&self, real: &'static str, emulated: &'static str) -> &'static str {
        match self.emulated {
            None => real,
            Some(_) => emulated,
        }
    }

    pub(super) fn is_empty(&self) -> bool {
        self.ids.is_empty()
    }

    /// Whether the program holds as many heaps as it may.
    pub(super) fn is_full(&self) -> bool {
        self.ids.len() >= MAX_HEAPS
    }

    pub(super) fn add(&mut self, h: HeapId) {
        self.ids.push(h);
    }

    /// The live heap a raw heap number selects.
    pub(super) fn pick(&self, raw: usize) -> Option<HeapId> {
        (!self.ids.is_empty()).then(|| self.ids[raw % self.ids.len()])
    }

    /// Every live heap, which the table forgets.
    pub(super) fn take_ids(&mut self) -> Vec<HeapId> {
        std::mem::take(&mut self.ids)
    }

    /// Heap `h`'s block at `ptr` was freed on another thread.
    pub(super) fn freed_remotely(&mut self, h: HeapId, ptr: usize) {
        self.remote_freed.push((h, ptr));
    }

    /// Heap `h` took in the frees other threads made of its blocks.
    pub(super) fn collected(&mut self, h: HeapId) {
        self.remote_freed.retain(|&(of, _)| of != h);
    }

    /// Heap `h` is ending: it is no longer live.
    pub(super) fn forget(&mut self, h: HeapId) {
        self.ids.retain(|&x| x != h);
        self.collected(h);
    }

    /// Whether the block `visited` (start, size) heap `h`'s visit listed
    /// holds a block another thread freed that the heap has not taken back.
    pub(super) fn holds_remotely_freed(&self, h: HeapId, visited: (usize, usize)) -> bool {
        self.remote_freed
            .iter()
            .any(|&(of, p)| of == h && holds(visited, p))
    }
}

/// Whether the visited block `(start, size)` holds the block at `p`.
pub(super) fn holds((start, size): (usize, usize), p: usize) -> bool {
    start <= p && p < start + size.max(1)
}

/// The heap API a section frees heap blocks through: the allocator's own,
/// or the executor's emulation of one (shared with the workers).
#[derive(Clone)]
pub(super) enum HeapCalls {
    Own(&'static dyn Heaps),
    Emulated(Arc<EmulatedHeaps>),
}

impl HeapCalls {
    pub(super) fn get(&self) -> &dyn Heaps {
        match self {
            HeapCalls::Own(h) => *h,
            HeapCalls::Emulated(e) => &**e,
        }
    }
}
