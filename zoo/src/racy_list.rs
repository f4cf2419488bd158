//! `RacyFreeList`'s free list, with its race in plain sight.

use std::sync::atomic::{AtomicUsize, Ordering};

/// The racy free list: a stack in a fixed array whose top is read and
/// written in two steps, with a window between them wide enough for a
/// race section to land in.
pub(super) struct RacyList {
    slots: [AtomicUsize; 1024],
    top: AtomicUsize,
}

impl RacyList {
    pub(super) const fn new() -> RacyList {
        RacyList {
            slots: [const { AtomicUsize::new(0) }; 1024],
            top: AtomicUsize::new(0),
        }
    }

    pub(super) fn window() {
        for _ in 0..256 {
            std::hint::spin_loop();
        }
    }

    /// False when the list is full (the caller frees to the base).
    pub(super) fn push(&self, p: usize) -> bool {
        let t = self.top.load(Ordering::Acquire);
        if t == self.slots.len() {
            return false;
        }
        self.slots[t].store(p, Ordering::Release);
        Self::window();
        // The bug: a pop between the load and this store is undone.
        self.top.store(t + 1, Ordering::Release);
        true
    }

    /// The window comes before the emptiness check too, so a pop takes as
    /// long as a push whatever the list holds: an owner allocating while
    /// another thread frees keeps pace with it instead of finishing its
    /// pops on the empty list before the first push lands.
    pub(super) fn pop(&self) -> Option<usize> {
        let t = self.top.load(Ordering::Acquire);
        let p = self.slots[t.saturating_sub(1)].load(Ordering::Acquire);
        Self::window();
        if t == 0 {
            return None;
        }
        self.top.store(t - 1, Ordering::Release);
        Some(p)
    }

    /// Every distinct block on the list (a lost update can leave one twice).
    pub(super) fn drain(&self) -> Vec<usize> {
        let t = self.top.swap(0, Ordering::AcqRel);
        let mut blocks: Vec<usize> = self.slots[..t]
            .iter()
            .map(|s| s.load(Ordering::Acquire))
            .collect();
        blocks.sort_unstable();
        blocks.dedup();
        blocks
    }
}
