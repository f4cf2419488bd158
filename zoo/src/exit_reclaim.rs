//! `ExitReclaimRace`'s per-thread caches: an exiting thread abandons its
//! cache, other threads reclaim from abandoned caches, and a pop has its
//! race in plain sight.

use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use shadow::allocator::Allocator;

use super::racy_list::RacyList;
use super::thread_slot::{self, OnExit, SLOTS};

/// The class: every block is taken from the base with the class's largest
/// size, so any block serves any request of it.
pub(super) const CLASS: RangeInclusive<usize> = 4097..=6144;
/// Blocks one thread's cache holds; past that, a free goes to the base.
const CAP: usize = 256;

/// One thread's cache: a stack in a fixed array.
struct Cache {
    /// Set while the thread that holds the slot exits: other threads may
    /// take its blocks.
    abandoned: AtomicBool,
    top: AtomicUsize,
    slots: [AtomicUsize; CAP],
}

impl Cache {
    fn new() -> Cache {
        Cache {
            abandoned: AtomicBool::new(false),
            top: AtomicUsize::new(0),
            slots: [const { AtomicUsize::new(0) }; CAP],
        }
    }

    /// Only the slot's own thread pushes. False when the cache is full
    /// (the caller frees to the base).
    fn push(&self, p: usize) -> bool {
        let t = self.top.load(Ordering::Acquire);
        if t == CAP {
            return false;
        }
        self.slots[t].store(p, Ordering::Release);
        self.top.store(t + 1, Ordering::Release);
        true
    }

    /// The bug: a load of the top, a window, a store of the top minus
    /// one, with nothing between them that would make a second pop of the
    /// same cache (the draining thread's, or another reclaimer's) wait or
    /// retry: both take the same block.
    ///
    /// The window comes before the emptiness check too (as
    /// `RacyList::pop`'s), so every allocation of the class takes as long
    /// as a pop of the drain: the threads allocating while another exits
    /// are still allocating when its drain starts, instead of done before
    /// its thread-local destructors run (`race-exit ... count=4` hit the
    /// race in 271 of 500 programs with the check first, 493 without).
    #[inline(never)]
    fn pop(&self) -> Option<usize> {
        let t = self.top.load(Ordering::Acquire);
        let p = self.slots[t.saturating_sub(1)].load(Ordering::Acquire);
        RacyList::window();
        if t == 0 {
            return None;
        }
        self.top.store(t - 1, Ordering::Release);
        Some(p)
    }

    fn is_empty(&self) -> bool {
        self.top.load(Ordering::Acquire) == 0
    }
}

/// Every slot's cache, and the base the blocks come from.
pub(super) struct ExitCaches {
    base: &'static dyn Allocator,
    caches: Box<[Cache]>,
}

impl ExitCaches {
    pub(super) fn new(base: &'static dyn Allocator) -> ExitCaches {
        ExitCaches {
            base,
            caches: (0..SLOTS).map(|_| Cache::new()).collect(),
        }
    }

    /// A block of the class: one reclaimed from an abandoned cache, else
    /// the calling thread's newest cached one, else a fresh one. `size`
    /// bytes of it zeroed if `zeroed`.
    ///
    /// # Safety
    /// As [`Allocator::alloc`] on the base.
    pub(super) unsafe fn alloc(self: &Arc<Self>, size: usize, zeroed: bool) -> *mut u8 {
        thread_slot::on_exit(self);
        let p = match self.reclaim() {
            Some(p) => p as *mut u8,
            None => match self.caches[thread_slot::current()].pop() {
                Some(p) => p as *mut u8,
                // SAFETY: align 16 is a power of two within every allocator's max_align.
                None => unsafe { self.base.alloc(*CLASS.end(), 16, false) },
            },
        };
        if zeroed && !p.is_null() {
            // SAFETY: `p` is a block of `*CLASS.end()` bytes, and `size` is
            // in the class.
            unsafe { std::ptr::write_bytes(p, 0, size) };
        }
        p
    }

    /// A block off any abandoned cache.
    #[inline(never)]
    fn reclaim(&self) -> Option<usize> {
        self.caches
            .iter()
            .filter(|c| c.abandoned.load(Ordering::Acquire) && !c.is_empty())
            .find_map(Cache::pop)
    }

    /// Puts block `p` of the class in the calling thread's cache, or
    /// frees it to the base when the cache is full.
    ///
    /// # Safety
    /// `p` came from [`ExitCaches::alloc`] and is freed once.
    pub(super) unsafe fn free(self: &Arc<Self>, p: *mut u8) {
        thread_slot::on_exit(self);
        if !self.caches[thread_slot::current()].push(p as usize) {
            // SAFETY: `p` came from `alloc` (this fn's contract), so from the base with the
            // class's largest size and align 16, and is freed once.
            unsafe { self.base.free(p, *CLASS.end(), 16) };
        }
    }

    /// Frees every cached block to the base (between programs, with no
    /// other thread inside and none exiting).
    pub(super) fn drain(&self) {
        for cache in self.caches.iter() {
            self.drain_one(cache);
        }
    }

    /// (Empty caches are passed over without a pop's window: a reset
    /// looks at every slot's.)
    fn drain_one(&self, cache: &Cache) {
        while let Some(p) = (!cache.is_empty()).then(|| cache.pop()).flatten() {
            // SAFETY: every block on a cache came from the base with the
            // class's largest size and alignment 16, and was popped here
            // (the race aside: that is the bug).
            unsafe { self.base.free(p as *mut u8, *CLASS.end(), 16) };
        }
    }
}

impl OnExit for ExitCaches {
    /// Abandons the exiting thread's cache: marked first, so others can
    /// take its blocks while it drains, then drained to the base.
    #[inline(never)]
    fn exit(&self, slot: usize) {
        let cache = &self.caches[slot];
        cache.abandoned.store(true, Ordering::Release);
        self.drain_one(cache);
        cache.abandoned.store(false, Ordering::Release);
    }
}
