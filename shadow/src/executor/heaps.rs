//! The heap API's ops (`heap-new`, `heap-delete`, `heap-destroy`, collects
//! and visits), on the allocator's own heaps or emulated ones.

use super::heap_table::holds;
use super::{Executor, On, Outcome, Request};
use crate::allocator::HeapId;
use crate::op::Op;
use crate::violation::{Site, Violation};

/// The heap ops on the executor: each changes the table and the shadow,
/// through the call guard.
impl Executor {
    /// A heap op. [`Executor::dispatch`] hands it heap ops only.
    pub(super) fn heap_op(&mut self, op: &Op) -> Outcome {
        match *op {
            Op::HeapNew => self.heap_new(),
            Op::HeapDelete { heap } => self.heap_delete(heap),
            Op::HeapDestroy { heap } => self.heap_destroy(heap),
            Op::HeapAlloc {
                heap,
                size,
                align,
                zeroed,
            } => self.heap_alloc(heap, Request::new(size, align, zeroed, None)),
            Op::HeapCollect { heap, force } => self
                .heaps
                .pick(heap)
                .map_or(Outcome::Skipped, |h| self.heap_collect(h, force)),
            Op::HeapVisit { heap } => self
                .heaps
                .pick(heap)
                .map_or(Outcome::Skipped, |h| self.heap_visit(h)),
            _ => unreachable!("not a heap op: {op}"),
        }
    }

    /// `heap-alloc`: request `r` in the live heap `heap` picks, one made
    /// first when there is none.
    pub(super) fn heap_alloc(&mut self, heap: usize, r: Request) -> Outcome {
        if self.heaps.is_empty() {
            self.heap_new();
        }
        match self.heaps.pick(heap) {
            None => Outcome::Skipped,
            Some(h) => self.alloc_block(Request { heap: Some(h), ..r }, On::Main),
        }
    }

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
