//! `CacheTrustsHeader`: a cache of the zoo's own in front of a base that
//! keeps nothing beside its blocks (jemalloc), for one class. Each block
//! carries its length in a header word before it, and a freed block is
//! handed out again for any request up to that length (first fit), as a
//! size-tagged free list does. The bug: the header is trusted as read, so
//! an overflow from the block before it, which grows the length, makes the
//! block handed out over its neighbour (ArcHeap's overlapping chunks).
//! Links are protected (a write into a freed block is stopped).
//!
//! `CacheGuardsHeader`'s cache is the same with a guard word before each
//! header, where an overflow from the block before lands first, checked
//! when the block is freed (the overflow is stopped); the length after it
//! is still trusted, so a write to the header alone is not.

use std::ops::RangeInclusive;
use std::sync::{Mutex, MutexGuard};

use shadow::allocator::Allocator;

use super::{Bug, Zoo};

/// The class, requests of 1 KiB + 1 to 8 KiB: the base's slabs lay its
/// blocks side by side.
pub(super) const TRUSTS_HEADER: RangeInclusive<usize> = 1025..=8192;
/// Bytes of the header before each block (its first word is the block's
/// length), and before it in a guarded cache, of the guard (its first
/// word), 16 so a block stays 16-aligned.
const HEADER: usize = 16;
const GUARD: usize = 16;
/// Blocks the cache holds; a free past it goes to the base.
const CAP: usize = 64;
/// What a link is mixed with.
const SECRET: usize = 0x3c3c_8765_4321_c3c3;

/// The cache: the newest cached block (0: none) and how many are cached;
/// whether a guard word precedes each header.
pub(super) struct HeaderCache {
    list: Mutex<(usize, usize)>,
    guarded: bool,
}

/// The length a block's header says.
///
/// # Safety
/// `p` is a block the cache handed out (live or cached).
unsafe fn length(p: usize) -> usize {
    // SAFETY: `alloc` wrote the header (this fn's contract).
    unsafe { *((p - HEADER) as *const usize) }
}

fn link(at: usize, next: usize) -> usize {
    next ^ (at >> 12) ^ SECRET
}

/// The guard word of the block at `p`.
fn guard(p: usize) -> usize {
    p.rotate_left(17) ^ SECRET
}

impl HeaderCache {
    pub(super) fn new(guarded: bool) -> HeaderCache {
        HeaderCache {
            list: Mutex::new((0, 0)),
            guarded,
        }
    }

    /// Bytes the cache keeps before each block of the base's.
    fn before(&self) -> usize {
        HEADER + if self.guarded { GUARD } else { 0 }
    }

    fn lock(&self) -> MutexGuard<'_, (usize, usize)> {
        self.list.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the cache serves requests of `size` and `align`.
    pub(super) fn serves(size: usize, align: usize) -> bool {
        align <= 16 && TRUSTS_HEADER.contains(&size)
    }

    /// The first cached block whose header says at least `size`, or a new
    /// one from `base` whose header says all the base gave past it.
    ///
    /// # Safety
    /// `base` is the allocator the cache's blocks came from.
    pub(super) unsafe fn alloc(&self, base: &dyn Allocator, size: usize, zeroed: bool) -> *mut u8 {
        let mut list = self.lock();
        let (mut before, mut at) = (0, list.0);
        while at != 0 {
            // SAFETY: `at` is a cached block, whose first word `free` wrote.
            let next = link(at, unsafe { *(at as *const usize) });
            // SAFETY: `at` is a block the cache handed out.
            if unsafe { length(at) } >= size {
                match before {
                    0 => list.0 = next,
                    // SAFETY: `before` is a cached block (its first word is its link).
                    _ => unsafe { *(before as *mut usize) = link(before, next) },
                }
                list.1 -= 1;
                drop(list);
                if zeroed {
                    // SAFETY: `at` is a cached block of the length its header says, no
                    // one's now.
                    unsafe { std::ptr::write_bytes(at as *mut u8, 0, length(at)) };
                }
                return at as *mut u8;
            }
            (before, at) = (at, next);
        }
        drop(list);
        let before = self.before();
        // SAFETY: align 16 is a power of two within every allocator's max_align.
        let block = unsafe { base.alloc(size + before, 16, zeroed) };
        if block.is_null() {
            return block;
        }
        // SAFETY: `block` is the base's, of `size + before` bytes at least:
        // the guard (if any) and the header are its first words.
        unsafe {
            let room = base.usable_size(block, size + before, 16);
            let p = block.add(before);
            *(p.sub(HEADER) as *mut usize) = room - before;
            if self.guarded {
                *(block as *mut usize) = guard(p as usize);
            }
            p
        }
    }

    /// The bytes of `p`, as its header says.
    ///
    /// # Safety
    /// `p` is a live block the cache handed out.
    pub(super) unsafe fn usable(&self, p: *mut u8) -> usize {
        // SAFETY: this fn's contract.
        unsafe { length(p as usize) }
    }

    /// Caches `p` under the length its header says (the bug: unchecked),
    /// or gives it to `base` when the cache is full. A guarded cache ends
    /// the process first when `p`'s guard word was overwritten.
    ///
    /// # Safety
    /// `base` is the allocator the cache's blocks came from; `p` is a
    /// block the cache handed out, freed once.
    pub(super) unsafe fn free(&self, base: &dyn Allocator, p: *mut u8) {
        if self.guarded {
            // SAFETY: a guarded cache's blocks have their guard word `HEADER + GUARD` bytes
            // before them, in the base's block (this fn's contract).
            let word = unsafe { *((p as usize - HEADER - GUARD) as *const usize) };
            if word != guard(p as usize) {
                std::process::abort();
            }
        }
        let mut list = self.lock();
        if list.1 == CAP {
            drop(list);
            // SAFETY: `p` sits `before` bytes into a block of the base (this fn's contract).
            return unsafe { self.give_back(base, p as usize) };
        }
        // SAFETY: `p` is a block of more than a word no one holds now.
        unsafe { *(p as *mut usize) = link(p as usize, list.0) };
        *list = (p as usize, list.1 + 1);
    }

    /// Gives every cached block back to `base`.
    ///
    /// # Safety
    /// `base` is the allocator the cache's blocks came from.
    pub(super) unsafe fn drain(&self, base: &dyn Allocator) {
        let mut list = self.lock();
        let mut at = list.0;
        *list = (0, 0);
        while at != 0 {
            // SAFETY: `at` is a cached block, whose first word `free` wrote,
            // given back once.
            unsafe {
                let next = link(at, *(at as *const usize));
                self.give_back(base, at);
                at = next;
            }
        }
    }
}

impl HeaderCache {
    /// Frees the base's block under `p`.
    ///
    /// # Safety
    /// `p` sits `before` bytes into a block of `base` the cache took.
    unsafe fn give_back(&self, base: &dyn Allocator, p: usize) {
        let before = self.before();
        // SAFETY: this fn's contract; the header holds the base's usable
        // size less `before`, a size within the block's class.
        unsafe { base.free((p - before) as *mut u8, length(p) + before, 16) }
    }
}

impl Zoo {
    /// `CacheTrustsHeader`'s or `CacheGuardsHeader`'s cache, when it
    /// serves `size` and `align`.
    pub(super) fn header_cache(&self, size: usize, align: usize) -> Option<&HeaderCache> {
        if !HeaderCache::serves(size, align) {
            return None;
        }
        let front = &self.front;
        [
            (Bug::CacheTrustsHeader, &front.trusts_header),
            (Bug::CacheGuardsHeader, &front.guards_header),
        ]
        .into_iter()
        .find(|(bug, _)| self.has(*bug))
        .map(|(_, cache)| cache)
    }
}
