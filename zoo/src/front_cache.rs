//! `CacheMissesDoubleFree`, `CacheRawLinks`, `CacheTrustsSpan`: a cache
//! of the zoo's own in front of a hardened base (glibc), for one class
//! each. Freed blocks of
//! the class wait in it, linked through their first word, and are handed
//! out again before the base is asked, as a thread cache does. Each cache
//! keeps all but one of the base's promises ([`Allocator::stops`]): a free
//! of a block the base says is not in use stops the process, and
//!
//! - `CacheMissesDoubleFree`'s links are protected (the link's own
//!   address and a secret mixed in, as glibc's safe-linking does), but a
//!   block freed twice is cached twice, as glibc's tcache did before 2.29;
//! - `CacheRawLinks` walks its list for a block freed twice, but keeps its
//!   links as plain pointers, so a pointer written into a freed block is
//!   the next block it hands out;
//! - `CacheTrustsSpan` checks a freed pointer with the base only when it
//!   lies outside the span of the blocks it took from the base: inside,
//!   any 16-aligned pointer is taken for a block, so a free of a pointer
//!   inside a live block caches memory still in use.

use std::ops::RangeInclusive;
use std::sync::Mutex;

use shadow::allocator::Allocator;

use super::header_cache::HeaderCache;
use super::{Bug, Zoo};

/// The classes, each taken from the base as its largest size, 16-aligned.
/// Wide: an attack runs in a child, whose coverage the fuzzer never sees,
/// so only its size's draw finds a class (with 32-byte classes the gate
/// took up to 194 s to find one).
pub(super) const MISSES_DOUBLE_FREE: RangeInclusive<usize> = 16..=128;
pub(super) const RAW_LINKS: RangeInclusive<usize> = 129..=256;
pub(super) const TRUSTS_SPAN: RangeInclusive<usize> = 257..=1024;
/// Blocks a cache holds; a free past it goes to the base.
const CAP: usize = 64;
/// What a protected link is mixed with.
const SECRET: usize = 0x5a5a_1234_9876_a5a5;

/// The one promise a cache breaks.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Flaw {
    /// A block freed twice is cached twice (its links are protected).
    MissesDoubleFree,
    /// Links are plain pointers (a block freed twice is looked for).
    RawLinks,
    /// A pointer inside the span of its blocks is not checked with the
    /// base (links protected, a block freed twice looked for).
    TrustsSpan,
}

/// One class's cache.
pub(super) struct FrontCache {
    class: RangeInclusive<usize>,
    flaw: Flaw,
    list: Mutex<List>,
}

/// A cache's list and the span of the blocks it took from the base.
struct List {
    /// The newest cached block (0: none).
    head: usize,
    /// How many are cached.
    len: usize,
    /// The lowest block start and the highest block end taken from the
    /// base (an empty span before the first).
    low: usize,
    high: usize,
}

impl Default for List {
    fn default() -> List {
        List {
            head: 0,
            len: 0,
            low: usize::MAX,
            high: 0,
        }
    }
}

impl FrontCache {
    pub(super) fn new(class: RangeInclusive<usize>, flaw: Flaw) -> FrontCache {
        FrontCache {
            class,
            flaw,
            list: Mutex::new(List::default()),
        }
    }

    /// The class's largest size: what its blocks are taken from the base as.
    pub(super) fn class_end(&self) -> &usize {
        self.class.end()
    }

    /// Whether the cache serves requests of `size` and `align`.
    pub(super) fn serves(&self, size: usize, align: usize) -> bool {
        align <= 16 && self.class.contains(&size)
    }

    fn link(&self, at: usize, next: usize) -> usize {
        match self.flaw {
            Flaw::RawLinks => next,
            Flaw::MissesDoubleFree | Flaw::TrustsSpan => next ^ (at >> 12) ^ SECRET,
        }
    }

    /// A cached block, or a new one from `base`.
    ///
    /// # Safety
    /// `base` is the allocator the cache's blocks came from.
    pub(super) unsafe fn alloc(&self, base: &dyn Allocator, zeroed: bool) -> *mut u8 {
        let size = *self.class.end();
        let mut list = self.lock();
        let p = list.head;
        if p == 0 {
            drop(list);
            // SAFETY: align 16 is a power of two within every allocator's max_align.
            let p = unsafe { base.alloc(size, 16, zeroed) };
            if !p.is_null() {
                let mut list = self.lock();
                list.low = list.low.min(p as usize);
                list.high = list.high.max(p as usize + size);
            }
            return p;
        }
        // SAFETY: `p` is a cached block of the class (at least 128 bytes),
        // whose first word `free` wrote.
        list.head = self.link(p, unsafe { *(p as *const usize) });
        list.len = list.len.saturating_sub(1);
        drop(list);
        if zeroed {
            // SAFETY: `p` is a block of `*self.class.end()` bytes, no one else's now.
            unsafe { std::ptr::write_bytes(p as *mut u8, 0, *self.class.end()) };
        }
        p as *mut u8
    }

    /// Caches `p`, a block of the class; `false` when the cache is full
    /// (the caller gives it to the base).
    ///
    /// # Safety
    /// `base` is the allocator the cache's blocks came from; `p` is a
    /// block of the class the program frees (or, in an attack's child, a
    /// pointer it claims is one).
    pub(super) unsafe fn free(&self, base: &dyn Allocator, p: *mut u8) -> bool {
        let size = *self.class.end();
        let trusted = self.flaw == Flaw::TrustsSpan && {
            let list = self.lock();
            (list.low..list.high).contains(&(p as usize)) && (p as usize).is_multiple_of(16)
        };
        // SAFETY: the base's own check of a pointer it is asked about (glibc's
        // reads the chunk's header, which reads zero for memory it never
        // handed out or inside a block).
        if !trusted && unsafe { base.usable_size(p, size, 16) } < size {
            std::process::abort();
        }
        let mut list = self.lock();
        if list.len == CAP {
            return false;
        }
        if self.flaw != Flaw::MissesDoubleFree && self.holds(list.head, p as usize) {
            std::process::abort();
        }
        // SAFETY: `p` is a block of at least 128 bytes no one holds now.
        unsafe { *(p as *mut usize) = self.link(p as usize, list.head) };
        list.head = p as usize;
        list.len += 1;
        true
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, List> {
        self.list.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether the list from `head` holds `p`.
    fn holds(&self, mut at: usize, p: usize) -> bool {
        while at != 0 {
            if at == p {
                return true;
            }
            // SAFETY: `at` is a cached block, whose first word `free` wrote.
            at = self.link(at, unsafe { *(at as *const usize) });
        }
        false
    }

    /// Gives every cached block back to `base`.
    ///
    /// # Safety
    /// `base` is the allocator the cache's blocks came from, and no block
    /// is in the cache twice.
    pub(super) unsafe fn drain(&self, base: &dyn Allocator) {
        let mut list = self.lock();
        let mut at = list.head;
        (list.head, list.len) = (0, 0);
        while at != 0 {
            // SAFETY: `at` is a cached block, whose first word `free` wrote,
            // given back once.
            unsafe {
                let next = self.link(at, *(at as *const usize));
                base.free(at as *mut u8, *self.class.end(), 16);
                at = next;
            }
        }
    }
}

/// The five bugs' caches.
pub(super) struct FrontCaches {
    misses_double_free: FrontCache,
    raw_links: FrontCache,
    trusts_span: FrontCache,
    pub(super) trusts_header: HeaderCache,
    pub(super) guards_header: HeaderCache,
}

impl FrontCaches {
    pub(super) fn new() -> FrontCaches {
        FrontCaches {
            misses_double_free: FrontCache::new(MISSES_DOUBLE_FREE, Flaw::MissesDoubleFree),
            raw_links: FrontCache::new(RAW_LINKS, Flaw::RawLinks),
            trusts_span: FrontCache::new(TRUSTS_SPAN, Flaw::TrustsSpan),
            trusts_header: HeaderCache::new(false),
            guards_header: HeaderCache::new(true),
        }
    }
}

impl Zoo {
    /// The planted cache that serves `size` and `align`, if any.
    pub(super) fn front(&self, size: usize, align: usize) -> Option<&FrontCache> {
        let caches = &self.front;
        [
            (Bug::CacheMissesDoubleFree, &caches.misses_double_free),
            (Bug::CacheRawLinks, &caches.raw_links),
            (Bug::CacheTrustsSpan, &caches.trusts_span),
        ]
        .into_iter()
        .find(|(bug, cache)| self.has(*bug) && cache.serves(size, align))
        .map(|(_, cache)| cache)
    }

    /// Gives every cache's blocks back to the base.
    ///
    /// # Safety
    /// The program has freed everything (no cached block is live), each
    /// block once.
    pub(super) unsafe fn drain_front(&self) {
        // SAFETY: the caches' blocks came from `self.base` (the caller's contract for the rest).
        unsafe {
            self.front.misses_double_free.drain(self.base);
            self.front.raw_links.drain(self.base);
            self.front.trusts_span.drain(self.base);
            self.front.trusts_header.drain(self.base);
            self.front.guards_header.drain(self.base);
        }
    }
}
