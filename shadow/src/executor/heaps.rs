//! The heap API (`heap-new`, `heap-delete`, `heap-destroy`, visits), on the
//! allocator's own heaps or emulated ones.

use super::race::HeapCalls;
use super::{Executor, Outcome, MAX_HEAPS};
use crate::allocator::{HeapId, Heaps};
use crate::violation::{Site, Violation};

impl Executor {
    pub(super) fn heaps(&self) -> &dyn Heaps {
        match &self.emulated {
            Some(e) => &**e,
            None => self.alloc.heaps().expect("allocator lost its heap API"),
        }
    }

    /// [`Executor::heaps`], for a race section's workers.
    pub(super) fn heap_calls(&self) -> HeapCalls {
        match &self.emulated {
            Some(e) => HeapCalls::Emulated(e.clone()),
            None => HeapCalls::Own(self.alloc.heaps().expect("allocator lost its heap API")),
        }
    }

    pub(super) fn pick_heap(&self, raw: usize) -> Option<HeapId> {
        (!self.heap_ids.is_empty()).then(|| self.heap_ids[raw % self.heap_ids.len()])
    }

    pub(super) fn heap_new(&mut self) -> Outcome {
        if self.heap_ids.len() >= MAX_HEAPS {
            return Outcome::Skipped;
        }
        self.site = Site::bare(self.heap_api("heap-new", "none"));
        match self.guarded(|| self.heaps().new_heap()) {
            Some(h) => {
                self.heap_ids.push(h);
                Outcome::Done
            }
            None => Outcome::Failed,
        }
    }

    pub(super) fn heap_delete(&mut self, raw: usize) -> Outcome {
        let Some(h) = self.pick_heap(raw) else {
            return Outcome::Skipped;
        };
        self.heap_ids.retain(|&x| x != h);
        self.remote_freed.retain(|&(of, _)| of != h);
        self.site = Site::bare(self.heap_api("heap-delete", "free"));
        // SAFETY: `h` was live in `heap_ids` and is removed from it first, so it is not used
        // again; its blocks stay valid and are tracked as default-heap blocks below.
        self.guarded(|| unsafe { self.heaps().delete(h) });
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
                self.verify_after_call(b, "after its heap was deleted");
            }
        }
        Outcome::Done
    }

    pub(super) fn heap_destroy(&mut self, raw: usize) -> Outcome {
        let Some(h) = self.pick_heap(raw) else {
            return Outcome::Skipped;
        };
        self.heap_ids.retain(|&x| x != h);
        self.remote_freed.retain(|&(of, _)| of != h);
        self.site = Site::bare(self.heap_api("heap-destroy", "free"));
        // SAFETY: `h` was live in `heap_ids` and is removed from it first; its blocks leave
        // the shadow just below without being touched.
        self.guarded(|| unsafe { self.heaps().destroy(h) });
        // The blocks are gone: drop them from the shadow without touching them.
        while let Some(i) = self.shadow.blocks().iter().position(|b| b.heap == Some(h)) {
            self.shadow.remove(i);
        }
        Outcome::Done
    }

    pub(super) fn heap_visit(&mut self, h: HeapId) -> Outcome {
        self.site = Site::bare(self.heap_api("heap-visit", "none"));
        if !self.checked {
            self.guarded(|| self.heaps().visit(h));
            return Outcome::Done;
        }
        let in_heap = || self.shadow.blocks().iter().filter(|b| b.heap == Some(h));
        let disowned = self.guarded(|| {
            in_heap()
                .find(|b| self.heaps().contains(h, b.ptr) == Some(false))
                .copied()
        });
        if let Some(b) = disowned {
            self.fail(Violation::HeapOwned {
                heap: h,
                ptr: b.ptr,
            });
        }
        let Some(mut visited) = self.guarded(|| self.heaps().visit(h)) else {
            return Outcome::Done;
        };
        // Each live block must lie in exactly one visited block, and each
        // visited block must hold a live one, or one another thread freed
        // that the heap has not taken back yet.
        let holds = |(start, size): (usize, usize), p: usize| start <= p && p < start + size.max(1);
        let expected: Vec<usize> = in_heap().map(|b| b.ptr).collect();
        visited.retain(|&v| {
            expected.iter().any(|&p| holds(v, p))
                || !self
                    .remote_freed
                    .iter()
                    .any(|&(of, p)| of == h && holds(v, p))
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
            self.fail(Violation::HeapVisit {
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

    /// `real` when the allocator has its own heap API, else `emulated`
    /// (emulated heaps call the allocator's plain functions).
    pub(super) fn heap_api(&self, real: &'static str, emulated: &'static str) -> &'static str {
        match self.emulated {
            None => real,
            Some(_) => emulated,
        }
    }
}
