//! The heap API (`heap-new`, `heap-delete`, `heap-destroy`, collects and
//! visits), on the allocator's own heaps or emulated ones.

use std::sync::Arc;

use super::race::HeapCalls;
use super::{Executor, Outcome, MAX_HEAPS};
use crate::allocator::{Allocator, EmulatedHeaps, HeapId, Heaps};
use crate::violation::{Site, Violation};

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
    fn is_full(&self) -> bool {
        self.ids.len() >= MAX_HEAPS
    }

    fn add(&mut self, h: HeapId) {
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
    fn collected(&mut self, h: HeapId) {
        self.remote_freed.retain(|&(of, _)| of != h);
    }

    /// Heap `h` is ending: it is no longer live.
    fn forget(&mut self, h: HeapId) {
        self.ids.retain(|&x| x != h);
        self.collected(h);
    }

    /// Whether the block `visited` (start, size) heap `h`'s visit listed
    /// holds a block another thread freed that the heap has not taken back.
    fn holds_remotely_freed(&self, h: HeapId, visited: (usize, usize)) -> bool {
        self.remote_freed
            .iter()
            .any(|&(of, p)| of == h && holds(visited, p))
    }
}

/// Whether the visited block `(start, size)` holds the block at `p`.
fn holds((start, size): (usize, usize), p: usize) -> bool {
    start <= p && p < start + size.max(1)
}

/// The heap ops on the executor: each changes the table and the shadow,
/// through the call guard.
impl Executor {
    pub(super) fn heap_new(&mut self) -> Outcome {
        if self.heaps.is_full() {
            return Outcome::Skipped;
        }
        self.guard
            .set_site(Site::bare(self.heaps.api_name("heap-new", "none")));
        match self.guard.guarded(|| self.heaps.api().new_heap()) {
            Some(h) => {
                self.heaps.add(h);
                Outcome::Done
            }
            None => Outcome::Failed,
        }
    }

    pub(super) fn heap_collect(&mut self, h: HeapId, force: bool) -> Outcome {
        self.guard.set_site(Site::bare("heap-collect"));
        self.guard.guarded(|| self.heaps.api().collect(h, force));
        self.heaps.collected(h);
        Outcome::Done
    }

    pub(super) fn heap_delete(&mut self, raw: usize) -> Outcome {
        let Some(h) = self.heaps.pick(raw) else {
            return Outcome::Skipped;
        };
        self.heaps.forget(h);
        self.guard
            .set_site(Site::bare(self.heaps.api_name("heap-delete", "free")));
        // SAFETY: `h` was a live heap of the table and is forgotten first, so it is not used
        // again; its blocks stay valid and are tracked as default-heap blocks below.
        self.guard.guarded(|| unsafe { self.heaps.api().delete(h) });
        for b in self
            .shadow
            .blocks_mut()
            .iter_mut()
            .filter(|b| b.heap == Some(h))
        {
            b.heap = None;
        }
        if self.checked {
            // Blocks of a deleted heap must stay valid; check them now.
            for b in self.shadow.blocks().iter().filter(|b| b.heap.is_none()) {
                self.guard
                    .verify_after_call(b, "after its heap was deleted");
            }
        }
        Outcome::Done
    }

    pub(super) fn heap_destroy(&mut self, raw: usize) -> Outcome {
        let Some(h) = self.heaps.pick(raw) else {
            return Outcome::Skipped;
        };
        self.heaps.forget(h);
        self.guard
            .set_site(Site::bare(self.heaps.api_name("heap-destroy", "free")));
        // SAFETY: `h` was a live heap of the table and is forgotten first; its blocks leave
        // the shadow just below without being touched.
        self.guard
            .guarded(|| unsafe { self.heaps.api().destroy(h) });
        // The blocks are gone: drop them from the shadow without touching them.
        while let Some(i) = self.shadow.blocks().iter().position(|b| b.heap == Some(h)) {
            self.shadow.remove(i);
        }
        Outcome::Done
    }

    pub(super) fn heap_visit(&mut self, h: HeapId) -> Outcome {
        self.guard
            .set_site(Site::bare(self.heaps.api_name("heap-visit", "none")));
        if !self.checked {
            self.guard.guarded(|| self.heaps.api().visit(h));
            return Outcome::Done;
        }
        let in_heap = || self.shadow.blocks().iter().filter(|b| b.heap == Some(h));
        let disowned = self.guard.guarded(|| {
            in_heap()
                .find(|b| self.heaps.api().contains(h, b.ptr) == Some(false))
                .copied()
        });
        if let Some(b) = disowned {
            self.guard.fail(Violation::HeapOwned {
                heap: h,
                ptr: b.ptr,
            });
        }
        let Some(mut visited) = self.guard.guarded(|| self.heaps.api().visit(h)) else {
            return Outcome::Done;
        };
        // Each live block must lie in exactly one visited block, and each
        // visited block must hold a live one, or one another thread freed
        // that the heap has not taken back yet.
        let expected: Vec<usize> = in_heap().map(|b| b.ptr).collect();
        visited.retain(|&v| {
            expected.iter().any(|&p| holds(v, p)) || !self.heaps.holds_remotely_freed(h, v)
        });
        let missing: Vec<usize> = expected
            .iter()
            .copied()
            .filter(|&p| !visited.iter().any(|&v| holds(v, p)))
            .collect();
        let extra: Vec<usize> = visited
            .iter()
            .filter(|&&v| !expected.iter().any(|&p| holds(v, p)))
            .map(|v| v.0)
            .collect();
        if !missing.is_empty() || !extra.is_empty() || visited.len() != expected.len() {
            // Counts and one `0x` address each, so the signature (which
            // reads numbers as N) is the same whatever the addresses.
            let list = |what: &str, blocks: &[usize]| match blocks.first() {
                None => format!("{what} none"),
                Some(p) => format!("{what} {} (first {p:#x})", blocks.len()),
            };
            self.guard.fail(Violation::HeapVisit {
                heap: h,
                detail: format!(
                    "visit saw {} blocks, {} are live; {}, {}",
                    visited.len(),
                    expected.len(),
                    list("missing", &missing),
                    list("extra", &extra)
                ),
            });
        }
        Outcome::Done
    }
}
