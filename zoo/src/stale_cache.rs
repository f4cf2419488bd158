//! `ExitStaleCache`'s per-thread caches. A thread's exit hook hands its
//! cached blocks to the other threads (the orphans) and marks the cache
//! stale, to be cleared by the next thread that takes its slot; a call the
//! exiting thread makes after its hook (from a later destructor, as a
//! program's own late destructors call `malloc`) still goes by the cache
//! it had, as an allocator whose thread-local heap pointer outlives its
//! thread-exit handler does, and pops a block the orphans hold too.

use std::cell::Cell;
use std::collections::BTreeSet;
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex, MutexGuard};

use shadow::allocator::Allocator;

use super::thread_slot::{self, OnExit, SLOTS};

/// The class: every block is taken from the base with the class's largest
/// size, so any block serves any request of it.
pub(super) const CLASS: RangeInclusive<usize> = 20481..=24576;
/// Blocks an empty cache takes from the base at once (one handed out, the
/// rest cached), and the most it holds.
const REFILL: usize = 4;
const CAP: usize = 32;

thread_local! {
    /// The slot this thread's calls went by, kept past its exit hook: a
    /// plain cell, with no destructor to clear it. (That it is read then
    /// is the bug.)
    static LAST_SLOT: Cell<Option<usize>> = const { Cell::new(None) };
}

#[derive(Default)]
struct Cache {
    blocks: Vec<usize>,
    /// Its thread has exited and handed its blocks to the orphans.
    stale: bool,
}

/// Every slot's cache, the orphans, and the base the blocks come from.
pub(super) struct StaleCaches {
    base: &'static dyn Allocator,
    caches: Box<[Mutex<Cache>]>,
    orphans: Mutex<Vec<usize>>,
}

/// The calling thread's slot, and whether its exit hook is still to run.
/// `None`: a thread that made no call before its exit.
fn slot() -> Option<(usize, bool)> {
    match thread_slot::held() {
        Some(slot) => {
            LAST_SLOT.set(Some(slot));
            Some((slot, true))
        }
        None => LAST_SLOT.get().map(|slot| (slot, false)),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

impl StaleCaches {
    pub(super) fn new(base: &'static dyn Allocator) -> StaleCaches {
        StaleCaches {
            base,
            caches: (0..SLOTS).map(|_| Mutex::default()).collect(),
            orphans: Mutex::default(),
        }
    }

    /// A block of the class: the calling thread's newest cached one, else
    /// an orphan, else a fresh one (the rest of a refill cached). `size`
    /// bytes of it zeroed if `zeroed`.
    ///
    /// # Safety
    /// As [`Allocator::alloc`] on the base.
    pub(super) unsafe fn alloc(self: &Arc<Self>, size: usize, zeroed: bool) -> *mut u8 {
        thread_slot::on_exit(self);
        let p = match self.own_pop().or_else(|| lock(&self.orphans).pop()) {
            Some(p) => p as *mut u8,
            None => self.refill(),
        };
        if zeroed && !p.is_null() {
            // SAFETY: `p` is a block of `*CLASS.end()` bytes, and `size` is
            // in the class.
            std::ptr::write_bytes(p, 0, size);
        }
        p
    }

    /// The bug: a call after the thread's exit hook pops the cache it had
    /// (the hook handed its blocks to the orphans), where it should have
    /// no cache at all.
    #[inline(never)]
    fn own_pop(&self) -> Option<usize> {
        let (slot, live) = slot()?;
        let mut cache = lock(&self.caches[slot]);
        if live && cache.stale {
            *cache = Cache::default();
        }
        cache.blocks.pop()
    }

    /// One block from the base for the caller, and more for its cache.
    unsafe fn refill(&self) -> *mut u8 {
        let p = self.base.alloc(*CLASS.end(), 16, false);
        if let Some((slot, true)) = slot() {
            let mut cache = lock(&self.caches[slot]);
            for _ in 1..REFILL {
                let more = self.base.alloc(*CLASS.end(), 16, false);
                if more.is_null() {
                    break;
                }
                cache.blocks.push(more as usize);
            }
        }
        p
    }

    /// Puts block `p` of the class in the calling thread's cache (once
    /// its thread has exited, with the orphans), or frees it to the base
    /// when the cache is full.
    ///
    /// # Safety
    /// `p` came from [`StaleCaches::alloc`] and is freed once.
    pub(super) unsafe fn free(self: &Arc<Self>, p: *mut u8) {
        thread_slot::on_exit(self);
        let Some((slot, true)) = slot() else {
            return lock(&self.orphans).push(p as usize);
        };
        let mut cache = lock(&self.caches[slot]);
        if cache.stale {
            *cache = Cache::default();
        }
        if cache.blocks.len() < CAP {
            return cache.blocks.push(p as usize);
        }
        drop(cache);
        self.base.free(p, *CLASS.end(), 16);
    }

    /// Frees every cached and orphaned block to the base, each once
    /// (between programs, with no other thread inside and none exiting).
    pub(super) fn drain(&self) {
        let mut all: BTreeSet<usize> = std::mem::take(&mut *lock(&self.orphans))
            .into_iter()
            .collect();
        for cache in self.caches.iter() {
            all.extend(std::mem::take(&mut *lock(cache)).blocks);
        }
        for p in all {
            // SAFETY: every block listed came from the base with the
            // class's largest size and alignment 16, and the program has
            // freed everything: nobody holds it, and the set lists it once.
            unsafe { self.base.free(p as *mut u8, *CLASS.end(), 16) };
        }
    }
}

impl OnExit for StaleCaches {
    /// Hands the exiting thread's cached blocks to the orphans, and leaves
    /// them listed (stale) for the slot's next thread to clear.
    fn exit(&self, slot: usize) {
        let mut cache = lock(&self.caches[slot]);
        lock(&self.orphans).extend(cache.blocks.iter().copied());
        cache.stale = true;
    }
}
