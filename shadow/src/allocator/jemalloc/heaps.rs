//! jemalloc's heap API: a heap is an explicit arena with an explicit
//! tcache (`tcache.create`) in front of it, and its blocks are `*allocx`
//! calls that name both.
//!
//! - **Arenas are pooled, not destroyed.** `arena.<i>.destroy` would free
//!   the index for `arenas.create` to recycle, but with `retain` (jemalloc's
//!   default on 64-bit Linux) it never unmaps the arena's metadata: 2 MiB
//!   of address space and a mapping leak per arena (`base_unmap` only
//!   purges), so a heap_api fuzz process hits `vm.max_map_count` after
//!   some 9,000 programs and allocations start failing. An arena a heap is
//!   done with is `arena.<i>.reset` (every block in it discarded) and
//!   `arena.<i>.purge`d instead, and the next heap takes it from the pool;
//!   `arenas.create` runs only when the pool is empty, so the indices in
//!   use (below 4095) never exceed the most arenas a program held at once.
//! - **destroy** is `tcache.destroy` (which flushes the cache into the
//!   arena) then the reset.
//! - **delete** must leave the blocks valid, but jemalloc cannot move
//!   blocks to another arena: the tcache is destroyed and the arena stays
//!   as an *orphan* until [`Book::sweep`] (from `Allocator::reset`, once
//!   the program has freed everything) resets it. An arena whose heap holds
//!   no blocks goes back to the pool at once.
//! - **An orphan's blocks are freed without a tcache.** They are default
//!   blocks now, freed and realloced by the plain calls on any thread. A
//!   thread's automatic tcache that cached one would hand it out again
//!   after the reset discarded it (or, at thread exit, flush it into an
//!   arena that no longer has it: jemalloc requires every tcache that
//!   touched an arena to be flushed before `arena.<i>.reset`, which the
//!   main thread cannot do for workers). So while any orphan exists, the
//!   plain free and realloc look the pointer up (`arenas.lookup`) and pass
//!   `MALLOCX_TCACHE_NONE` for an orphan's block.

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};

use tikv_jemalloc_sys as je;

use super::ctl;
use crate::allocator::HeapId;

/// Arena indices fit `MALLOCX_ARENA`'s 12 bits (`MALLOCX_ARENA_LIMIT` is 4095).
const ARENAS: usize = 1 << 12;

/// A heap: its arena and its tcache, packed into one [`HeapId`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Heap {
    pub arena: u32,
    pub tcache: u32,
}

impl Heap {
    pub fn id(self) -> HeapId {
        ((self.arena as usize) << 32) | self.tcache as usize
    }

    pub fn of(id: HeapId) -> Heap {
        Heap {
            arena: (id >> 32) as u32,
            tcache: id as u32,
        }
    }

    /// The `*allocx` flags that allocate in this heap.
    pub fn flags(self) -> c_int {
        je::MALLOCX_ARENA(self.arena as usize) | self.tcache_flag()
    }

    /// The flags that free through this heap's tcache (the arena a block
    /// goes back to is the one that holds it; `dallocx` takes no arena).
    pub fn tcache_flag(self) -> c_int {
        je::MALLOCX_TCACHE(self.tcache as usize)
    }
}

/// What the adapter knows about explicit arenas: the pool of reset ones,
/// and per index how many blocks the heap API holds live in each and which
/// are orphans.
pub struct Book {
    pool: Mutex<Vec<u32>>,
    live: Box<[AtomicUsize]>,
    orphaned: Box<[AtomicBool]>,
    /// The orphans, for the sweep.
    orphans: Mutex<Vec<u32>>,
    /// How many arenas are orphans: the plain free path looks pointers up
    /// only while this is nonzero.
    orphan_count: AtomicUsize,
}

impl Book {
    pub fn new() -> Book {
        Book {
            pool: Mutex::new(Vec::new()),
            live: (0..ARENAS).map(|_| AtomicUsize::new(0)).collect(),
            orphaned: (0..ARENAS).map(|_| AtomicBool::new(false)).collect(),
            orphans: Mutex::new(Vec::new()),
            orphan_count: AtomicUsize::new(0),
        }
    }

    /// A heap on a pooled arena (or, with the pool empty, a new one) and a
    /// new tcache, or `None` (and the arena back in the pool) when jemalloc
    /// refuses either.
    pub fn create(&self) -> Option<Heap> {
        let pooled = lock(&self.pool).pop();
        let arena = pooled.or_else(|| ctl::read_unsigned("arenas.create"))?;
        match ctl::read_unsigned("tcache.create") {
            Some(tcache) => Some(Heap { arena, tcache }),
            None => {
                self.retire(arena);
                None
            }
        }
    }

    /// Discards every block in `arena`, returns its pages, and pools it.
    /// The caller has flushed every tcache that holds its blocks.
    fn retire(&self, arena: u32) {
        ctl::arena_verb(arena, "reset");
        ctl::arena_verb(arena, "purge");
        self.live[arena as usize].store(0, Relaxed);
        lock(&self.pool).push(arena);
    }

    pub fn allocated(&self, heap: Heap) {
        self.live[heap.arena as usize].fetch_add(1, Relaxed);
    }

    pub fn freed(&self, heap: Heap) {
        // Saturating: a caller that broke the contract must not make an
        // arena look as if it held blocks forever.
        let _ = self.live[heap.arena as usize].fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1));
    }

    /// Ends `heap`, keeping its blocks: the tcache goes, the arena stays
    /// (as an orphan) while it holds blocks.
    pub fn delete(&self, heap: Heap) {
        ctl::write_unsigned("tcache.destroy", heap.tcache);
        if self.live[heap.arena as usize].load(Relaxed) == 0 {
            self.retire(heap.arena);
        } else if !self.orphaned[heap.arena as usize].swap(true, Relaxed) {
            lock(&self.orphans).push(heap.arena);
            self.orphan_count.fetch_add(1, Relaxed);
        }
    }

    /// Ends `heap` and every block in it.
    pub fn destroy(&self, heap: Heap) {
        ctl::write_unsigned("tcache.destroy", heap.tcache);
        self.retire(heap.arena);
    }

    /// The extra free flags for `ptr`: `MALLOCX_TCACHE_NONE` when an
    /// orphan holds it (see the module docs), else none.
    pub fn free_flags(&self, ptr: usize) -> c_int {
        if self.orphan_count.load(Relaxed) == 0 {
            return 0;
        }
        match ctl::arena_of(ptr) {
            Some(a)
                if self
                    .orphaned
                    .get(a as usize)
                    .is_some_and(|o| o.load(Relaxed)) =>
            {
                je::MALLOCX_TCACHE_NONE
            }
            _ => 0,
        }
    }

    /// Resets every orphan into the pool. Only when no block of one is in
    /// use any more: the executor calls `reset` after a program
    /// freed everything (or, past a tolerated violation, released it).
    pub fn sweep(&self) {
        if self.orphan_count.load(Relaxed) == 0 {
            return;
        }
        let orphans = std::mem::take(&mut *lock(&self.orphans));
        for arena in orphans {
            self.orphaned[arena as usize].store(false, Relaxed);
            self.orphan_count.fetch_sub(1, Relaxed);
            self.retire(arena);
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}
