//! `ExitStaleCache`'s per-thread caches. A thread's first call gives it a
//! cache of a few blocks (a thread heap's first page); its exit hook hands
//! them to the other threads (the orphans, which serve any small request)
//! and marks the cache stale, to be cleared by the next thread that takes
//! its slot. A call the exiting thread makes after its hook (from a later
//! destructor, as a program's own late destructors call `malloc`) still
//! goes by the cache it had, as an allocator whose thread-local heap
//! pointer outlives its thread-exit handler does, and pops a block the
//! orphans hold too.

use std::cell::Cell;
use std::collections::HashSet;
use std::ops::RangeInclusive;
use std::sync::{Arc, Mutex, MutexGuard};

use shadow::allocator::Allocator;

use super::thread_slot::{self, OnExit, SLOTS};

/// Every block's size; the class a live thread's cache serves.
const BLOCK: usize = 24576;
const CLASS: RangeInclusive<usize> = 20481..=BLOCK;
/// Blocks a thread's first call takes from the base for its cache, and
/// the most a cache holds.
const FILL: usize = 4;
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
    filled: bool,
    /// Its thread has exited and handed its blocks to the orphans.
    stale: bool,
}

/// Every slot's cache, the orphans, and the base the blocks come from.
pub(super) struct StaleCaches {
    base: &'static dyn Allocator,
    caches: Box<[Mutex<Cache>]>,
    orphans: Mutex<Vec<usize>>,
    /// Every block taken from the base, until the next drain.
    taken: Mutex<HashSet<usize>>,
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
            taken: Mutex::default(),
        }
    }

    /// Whether `p` is one of the blocks this cache took from the base.
    pub(super) fn holds(&self, p: *mut u8) -> bool {
        lock(&self.taken).contains(&(p as usize))
    }

    /// A block for a request of `size` (at most 16-aligned): a live
    /// thread's own cached one for the class, else an orphan for any size
    /// up to the class's, else a fresh one for the class; `None` leaves
    /// the request to the base. `size` bytes of it zeroed if `zeroed`.
    ///
    /// # Safety
    /// As [`Allocator::alloc`] on the base.
    pub(super) unsafe fn alloc(self: &Arc<Self>, size: usize, zeroed: bool) -> Option<*mut u8> {
        if size > BLOCK {
            return None;
        }
        // SAFETY: `fill` only takes fresh blocks from the base (`take`), which asks align 16.
        unsafe { self.fill() };
        let p = match self.own_pop(size).or_else(|| lock(&self.orphans).pop()) {
            Some(p) => p as *mut u8,
            // SAFETY: `take` asks the base for align 16, a power of two within any max_align.
            None if CLASS.contains(&size) => unsafe { self.take() },
            None => return None,
        };
        if zeroed && !p.is_null() {
            // SAFETY: `p` is a block of `BLOCK` bytes, and `size` is at
            // most that.
            unsafe { std::ptr::write_bytes(p, 0, size) };
        }
        Some(p)
    }

    /// The bug: a call after the thread's exit hook pops the cache it had
    /// (the hook handed its blocks to the orphans), for any size, where it
    /// should have no cache at all.
    #[inline(never)]
    fn own_pop(&self, size: usize) -> Option<usize> {
        match slot()? {
            (slot, false) => lock(&self.caches[slot]).blocks.pop(),
            (slot, true) if CLASS.contains(&size) => lock(&self.caches[slot]).blocks.pop(),
            _ => None,
        }
    }

    /// Gives a live thread that has none its cache (a stale one cleared
    /// first), and its exit hook.
    unsafe fn fill(self: &Arc<Self>) {
        let Some((slot, true)) = slot() else {
            return;
        };
        thread_slot::on_exit(self);
        let mut cache = lock(&self.caches[slot]);
        if cache.stale {
            *cache = Cache::default();
        }
        if !cache.filled {
            cache.filled = true;
            for _ in 0..FILL {
                // SAFETY: `take` asks the base for align 16, a power of two within any max_align.
                let p = unsafe { self.take() };
                if !p.is_null() {
                    cache.blocks.push(p as usize);
                }
            }
        }
    }

    /// A fresh block from the base.
    unsafe fn take(&self) -> *mut u8 {
        // SAFETY: align 16 is a power of two within every allocator's max_align.
        let p = unsafe { self.base.alloc(BLOCK, 16, false) };
        if !p.is_null() {
            lock(&self.taken).insert(p as usize);
        }
        p
    }

    /// Takes back block `p` ([`StaleCaches::holds`]): into the calling
    /// thread's cache, with the orphans once its thread has exited, or to
    /// the base when the cache is full. A block listed already is not
    /// listed twice.
    ///
    /// # Safety
    /// `p` is a block [`StaleCaches::alloc`] handed out.
    pub(super) unsafe fn free(&self, p: *mut u8) {
        let p = p as usize;
        // A cache before the orphans, as the exit hook locks them.
        let Some((slot, true)) = slot() else {
            let mut orphans = lock(&self.orphans);
            if !orphans.contains(&p) {
                orphans.push(p);
            }
            return;
        };
        let mut cache = lock(&self.caches[slot]);
        if cache.blocks.contains(&p) || lock(&self.orphans).contains(&p) {
            return;
        }
        if cache.blocks.len() < CAP {
            return cache.blocks.push(p);
        }
        drop(cache);
        lock(&self.taken).remove(&p);
        // SAFETY: `p` came from `alloc` (this fn's contract), so from the base through `take`,
        // with `BLOCK` bytes and align 16; unlisted above, it is freed once.
        unsafe { self.base.free(p as *mut u8, BLOCK, 16) };
    }

    /// Frees every block taken to the base, each once (between programs,
    /// with no other thread inside and none exiting).
    pub(super) fn drain(&self) {
        lock(&self.orphans).clear();
        for cache in self.caches.iter() {
            *lock(cache) = Cache::default();
        }
        let taken = std::mem::take(&mut *lock(&self.taken));
        for p in taken {
            // SAFETY: every block taken came from the base with `BLOCK`
            // bytes and alignment 16, and the program has freed
            // everything: nobody holds it, and the set lists it once.
            unsafe { self.base.free(p as *mut u8, BLOCK, 16) };
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
