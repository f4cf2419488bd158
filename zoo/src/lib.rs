//! The planted-bug zoo: a correct allocator (`system`) with known bugs
//! injected, each behind a condition the fuzzer has to find (a size class,
//! an alignment, an order of ops). `zoo:<bug>` selects one bug,
//! `zoo:<bug>+<bug>` several, `zoo:<bug>@<base>` plants it in another
//! allocator than `system` (`zoo:usable-oversize@mimalloc-debug`; a bug
//! only a fixed region shows, `capacity-leak`, is planted in `arena`
//! unless the name says otherwise). If the service misses one of these,
//! the service is broken.
//!
//! The zoo is the allocator under test, so it is a crate of its own: the
//! fuzz builds give it sanitizer coverage and leave the harness (`shadow`)
//! without (`fuzz_targets/rustc-wrapper`). A program that runs `zoo:`
//! names calls [`register`] first.

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};

use shadow::allocator::{Allocator, Arena, EmulatedHeaps, Extras, Heaps, InUse, ReallocToZero};

mod alloc_inner;
mod bug;
mod exit_reclaim;
mod extras;
mod front_cache;
mod header_cache;
mod heaps;
mod hook;
mod huge_realloc;
mod name;
mod os_layer;
mod planted;
mod racy_list;
mod remote_free;
mod slack_footer;
mod slow_leak;
mod spec;
mod splinters;
mod stale_cache;
mod thread_slot;
mod threaded_kinds;
mod watch_free;

pub use bug::Bug;
pub use name::{register, split_spec};
pub use spec::{default_base, parse_bugs};

use exit_reclaim::ExitCaches;
use front_cache::FrontCaches;
use heaps::ZooHeaps;
use hook::ZooHook;
use racy_list::RacyList;
use remote_free::RemoteFrees;
use slow_leak::{Hoard, SlowLeak, HOARDED};
use splinters::Splinters;
use stale_cache::StaleCaches;

const DOUBLE_ISSUE: RangeInclusive<usize> = 33..=48;
const STALE_LINK: RangeInclusive<usize> = 65..=96;
const USABLE_OVERSIZE: RangeInclusive<usize> = 97..=128;
const XTHREAD: RangeInclusive<usize> = 129..=256;
const DIRTY_ZEROED: RangeInclusive<usize> = 200..=256;
const HUGE_SUCCESS: RangeInclusive<usize> = isize::MAX as usize - 65535..=isize::MAX as usize;
const PANIC_CLASS: RangeInclusive<usize> = 2049..=3072;
const TINY_REALLOC: RangeInclusive<usize> = 9..=16;
const RACY: RangeInclusive<usize> = 257..=1024;
const LATENT: RangeInclusive<usize> = 3073..=3584;
const WILD_WRITE: RangeInclusive<usize> = 3585..=4000;
const LARGE_HOLE_MIN: usize = 64 << 10;
const LARGE_DIRTY_MIN: usize = 128 << 10;
/// More than half the bytes a program may hold: a second block this large
/// in one program needs the first freed.
const LARGE_REUSE_MIN: usize = (32 << 20) + 1;
const FULL_PAGE: RangeInclusive<usize> = 17..=256;
/// Live blocks of `FULL_PAGE` at which `FullPageReissue` fires.
const FULL_PAGE_BLOCKS: usize = 512;
const SIZED_FREE: RangeInclusive<usize> = 17..=8192;
const CAPACITY_LEAK: RangeInclusive<usize> = 2049..=4096;
/// Bytes `CapacityLeak` loses per shrink it hits.
const LOST_TAIL: usize = 64;

/// `LatentCorruption`'s state, which outlives a program: that is the bug.
const CLEAN: u8 = 0;
const FLUSH_QUEUED: u8 = 1;
const CORRUPT: u8 = 2;

#[derive(Default)]
struct State {
    /// Blocks handed out at an offset from the base block: returned -> base.
    shifted: HashMap<usize, usize>,
    /// DoubleIssue: freed blocks of the class, newest last. Alloc hands out
    /// the newest without popping it; blocks go back to `base` at reset.
    cached_48: Vec<usize>,
    /// StaleLink: head of the in-block free list and the last block pushed.
    list_head: usize,
    last_pushed: usize,
    /// DirtyZeroed: a block of the class has been freed (memory recycled).
    freed_256: bool,
    /// XthreadWrongFree: live blocks -> (owner thread, size, align), and each
    /// thread's newest live block.
    owners: HashMap<usize, (u64, usize, usize)>,
    newest: HashMap<u64, usize>,
    /// FullPageReissue, CrowdedReissue: live blocks of the classes, and the newest one
    /// with its size.
    live_small: usize,
    newest_small: (usize, usize),
    /// SizedFreeMisclass: blocks a sized free filed, newest last.
    sized_cached: Vec<usize>,
    /// PurgeDropsLive, PurgeLazyFreesLive: the newest live block of 4 KiB
    /// or more.
    last_large: Option<(usize, usize)>,
    /// RegrowStale, RezallocMovedSlack: blocks with room past their
    /// request -> their room.
    rooms: HashMap<usize, usize>,
    /// LargeReuseDirty: a freed block of more than 32 MiB, and its size.
    large_freed: Option<(usize, usize)>,
}

/// A correct allocator with planted bugs.
pub struct Zoo {
    name: String,
    bugs: Vec<Bug>,
    base: &'static dyn Allocator,
    heaps: ZooHeaps,
    state: Mutex<State>,
    racy: RacyList,
    /// `LostRemoteFree`'s owners and remote lists.
    remote: RemoteFrees,
    /// `ExitReclaimRace`'s per-thread caches (shared with the threads'
    /// exit hooks).
    exits: Arc<ExitCaches>,
    /// `ExitStaleCache`'s per-thread caches (shared likewise).
    stale: Arc<StaleCaches>,
    /// `LatentCorruption`: `CLEAN`, `FLUSH_QUEUED` or `CORRUPT`.
    latent: AtomicU8,
    /// `SlowLeak`'s counter and the blocks it keeps (`LateRemoteLeak`'s).
    slow_leak: SlowLeak,
    /// `HoardedFrees`' bytes.
    hoard: Hoard,
    /// `LateRemoteLeak`: frees made on another thread than the block's.
    remote_frees: AtomicU64,
    /// `SplitNeverMerged`'s region.
    splinters: Splinters,
    /// The thread that made the zoo (`XthreadZeroedLink` spares it).
    home: u64,
    hook: ZooHook,
    /// The caches of `CacheMissesDoubleFree`, `CacheRawLinks`,
    /// `CacheTrustsSpan`, `CacheTrustsHeader` and `CacheGuardsHeader`.
    front: FrontCaches,
}

impl Zoo {
    /// `bugs` planted in `base`, known as `name`.
    pub fn new(name: &str, bugs: &str, base: &'static dyn Allocator) -> Result<Zoo, String> {
        let bugs = parse_bugs(bugs)?;
        let heaps = ZooHeaps {
            inner: EmulatedHeaps::new(base),
            base,
            bugs: bugs.clone(),
        };
        Ok(Zoo {
            name: name.to_string(),
            hook: ZooHook::new(bugs.contains(&Bug::HookReentryReissue)),
            bugs,
            base,
            heaps,
            state: Mutex::new(State::default()),
            racy: RacyList::new(),
            remote: RemoteFrees::new(),
            exits: Arc::new(ExitCaches::new(base)),
            stale: Arc::new(StaleCaches::new(base)),
            latent: AtomicU8::new(CLEAN),
            slow_leak: SlowLeak::new(),
            hoard: Hoard::new(),
            remote_frees: AtomicU64::new(0),
            splinters: Splinters::new(),
            home: thread_slot::token(),
            front: FrontCaches::new(),
        })
    }

    /// Counts a call for `SlowLeak`, if planted.
    fn count_call(&self) {
        if self.has(Bug::SlowLeak) {
            self.slow_leak.call();
        }
    }

    /// Blocks `SlowLeak` has kept so far.
    #[doc(hidden)]
    pub fn kept_blocks(&self) -> usize {
        self.slow_leak.kept()
    }

    fn has(&self, bug: Bug) -> bool {
        self.bugs.contains(&bug)
    }

    fn state(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands out `base + offset` of a block allocated with `size + offset`.
    unsafe fn shifted(&self, size: usize, align: usize, offset: usize, zeroed: bool) -> *mut u8 {
        // A size the offset would wrap is refused, as the base refuses it:
        // the planted bug is the misalignment, not a second one.
        let Some(whole) = size.checked_add(offset) else {
            return std::ptr::null_mut();
        };
        // SAFETY: the caller passes a power of two within max_align (as `alloc`'s contract).
        let base = unsafe { self.base.alloc(whole, align, zeroed) };
        if base.is_null() {
            return base;
        }
        // SAFETY: `base` is a block of `size + offset` bytes: `offset` lies in it.
        let p = unsafe { base.add(offset) };
        self.state().shifted.insert(p as usize, base as usize);
        p
    }

    /// The block the zoo manages itself (shifted or cached), if `p` is one.
    fn is_own(&self, p: *mut u8, size: usize, align: usize) -> bool {
        (align <= 16 && self.has(Bug::DoubleIssue) && DOUBLE_ISSUE.contains(&size))
            || (align <= 16 && self.has(Bug::StaleLink) && STALE_LINK.contains(&size))
            || self.is_racy(size, align)
            || self.is_lost_remote(size, align)
            || self.is_exit_reclaim(size, align)
            || self.is_stale_block(p)
            || self.is_shifted(p)
            || self.splinters.holds(p)
            || self.front(size, align).is_some()
            || self.header_cache(size, align).is_some()
    }

    fn is_shifted(&self, p: *mut u8) -> bool {
        self.state().shifted.contains_key(&(p as usize))
    }
}

impl Allocator for Zoo {
    fn name(&self) -> &str {
        &self.name
    }

    fn memory_figures(&self) -> Vec<(&'static str, u64)> {
        self.base.memory_figures()
    }

    fn bytes_in_use(&self) -> Option<InUse> {
        self.base.bytes_in_use()
    }

    unsafe fn alloc(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        self.count_call();
        let intercepted = self.hook.alloc(size, align, zeroed);
        if let Some(p) = intercepted.or_else(|| self.os_refused(size, align)) {
            return p;
        }
        self.class_of(size);
        let p = match self.is_interior(size, align, zeroed) {
            // SAFETY: `align` is a power of two within max_align (this fn's contract).
            true => unsafe { self.interior_class(size, align) },
            // SAFETY: `align` is a power of two within max_align (this fn's contract).
            false => unsafe { self.alloc_inner(size, align, zeroed) },
        };
        let p = match self.has(Bug::NarrowProvenance) && !p.is_null() && size > 0 {
            true => narrowed(p),
            false => p,
        };
        self.track_owner(p, size, align);
        if !p.is_null() {
            self.track_class(p, size, align);
            if self.is_large_interior(size) {
                self.large_interior_span(p, size);
            }
        }
        p
    }

    unsafe fn calloc(&self, count: usize, size: usize) -> *mut u8 {
        match count.checked_mul(size) {
            // SAFETY: align 1 is a power of two within every allocator's max_align.
            Some(n) => unsafe { self.alloc_computed(n, 1, true) },
            None if self.has(Bug::CallocWrap) && count.wrapping_mul(size) <= 1 << 20 => {
                // SAFETY: align 1 is valid; the wrapped size is the planted bug, not unsound.
                unsafe { self.base.alloc(count.wrapping_mul(size), 1, true) }
            }
            None => std::ptr::null_mut(),
        }
    }

    unsafe fn realloc(&self, p: *mut u8, old: usize, align: usize, new_size: usize) -> *mut u8 {
        self.count_call();
        self.class_of(new_size);
        if self.has(Bug::CapacityLeak) && CAPACITY_LEAK.contains(&old) && new_size < old / 2 {
            // The bug: the split-off tail's last bytes never go back to
            // the free lists (a block of the base nobody will free).
            // SAFETY: align 16 is a power of two within every allocator's max_align.
            let _lost = unsafe { self.base.alloc(LOST_TAIL, 16, false) };
        }
        let grows_large = self.has(Bug::ShortReallocCopy) && old >= 256 && new_size > old;
        let shrinks_large = self.has(Bug::LeakOnShrink) && old >= 1024 && new_size < old / 2;
        let grows_tiny =
            self.has(Bug::TinyReallocShort) && TINY_REALLOC.contains(&old) && new_size > old;
        let grows_misaligned =
            self.has(Bug::MisalignedReallocShort) && new_size > old && self.is_shifted(p);
        if self.has(Bug::LargeReallocHole) && old >= LARGE_HOLE_MIN && new_size > old {
            // SAFETY: `p` is a live block of the zoo with `old` and `align` (this fn's contract).
            return unsafe { self.large_realloc_hole(p, old, align, new_size) };
        }
        // SAFETY: `p` is a live block of the zoo with `old` and `align` (this fn's contract).
        if let Some(q) = unsafe { self.huge_realloc(p, old, align, new_size) } {
            return q;
        }
        if !(grows_large
            || grows_tiny
            || grows_misaligned
            || shrinks_large
            || self.is_own(p, old, align)
            || self.is_own(p, new_size, align))
        {
            if self.has(Bug::HugeSuccess) && HUGE_SUCCESS.contains(&new_size) {
                // The new block comes from alloc, whose size check is the
                // one missing: one bug, reached from each entry point.
                // SAFETY: `align` is the one `p` was allocated with (this fn's contract), a
                // valid one.
                return unsafe { self.alloc_computed(new_size, align, false) };
            }
            // SAFETY: `p` is a live block with `old` and `align` (this fn's contract), and
            // not one the zoo keeps itself (`is_own`): the base's.
            let q = unsafe { self.base.realloc(p, old, align, new_size) };
            // A realloc to zero that frees returns null: `p` is gone too.
            let freed = new_size == 0 && self.base.realloc_to_zero() == ReallocToZero::Frees;
            if !q.is_null() || freed {
                self.state().owners.remove(&(p as usize));
                self.untrack_class(p, old, align);
            }
            if !q.is_null() {
                self.track_owner(q, new_size, align);
                self.track_class(q, new_size, align);
            }
            return q;
        }
        // SAFETY: `align` is the one `p` was allocated with (this fn's contract), a valid one.
        let q = unsafe { self.alloc_computed(new_size, align, false) };
        if q.is_null() || q == p {
            // `q == p`: DoubleIssue handed the live block itself back.
            return q;
        }
        let copy = if grows_large {
            self.short_realloc_copy(old)
        } else if grows_misaligned {
            self.misaligned_realloc_short(old)
        } else if grows_tiny {
            self.tiny_realloc_short(old)
        } else {
            old.min(new_size)
        };
        // SAFETY: `p` holds `old` live bytes (this fn's contract), `q` is a new block of
        // `new_size`, not `p`, and `copy` is at most the smaller.
        unsafe { std::ptr::copy_nonoverlapping(p, q, copy) };
        if !shrinks_large {
            // SAFETY: `p` is a live block of the zoo with `old` and `align` (this fn's
            // contract), freed once, here.
            unsafe { self.free(p, old, align) };
        }
        q
    }

    fn realloc_to_zero(&self) -> ReallocToZero {
        self.base.realloc_to_zero()
    }

    unsafe fn free(&self, p: *mut u8, size: usize, align: usize) {
        if self.has(Bug::HoardedFrees) && HOARDED.contains(&size) {
            self.hoard.keep(size);
        }
        // SAFETY: `p` is a live block of the zoo with `size` and `align` (this fn's contract).
        if unsafe { self.watch_free(p, size, align) } {
            return;
        }
        let shifted = self.state().shifted.remove(&(p as usize));
        if let Some(base) = shifted {
            // SAFETY: `base` is the block `shifted` took from the base for `p` (live, this fn's
            // contract), listed once; freed with `size`, not `size + offset`: assumes the base
            // ignores it.
            return unsafe { self.base.free(base as *mut u8, size, align) };
        }
        if self.splinters.holds(p) {
            return self.splinters.free(p);
        }
        if self.hook.keep(p, size, align) {
            return;
        }
        if self.is_fork_locked(size, align) {
            // SAFETY: `p` is a live block with `size` and `align` (this fn's contract), one
            // `alloc` took from the base for the fork-locked class.
            return self.fork_locked(|| unsafe { self.base.free(p, size, align) });
        }
        if self.has(Bug::LargeReuseDirty) && size >= LARGE_REUSE_MIN && self.keep_large(p, size) {
            return;
        }
        if let Some(cache) = self.header_cache(size, align) {
            // SAFETY: `p` is a block of the class (this fn's contract), which the cache gave.
            return unsafe { cache.free(self.base, p) };
        }
        if let Some(cache) = self.front(size, align) {
            // SAFETY: `p` is a block of the class (this fn's contract), which `alloc` took
            // from the base for the cache.
            if unsafe { cache.free(self.base, p) } {
                return;
            }
            // SAFETY: as above; the cache is full, so the base takes it back.
            return unsafe { self.base.free(p, *cache.class_end(), 16) };
        }
        if align <= 16 && self.has(Bug::DoubleIssue) && DOUBLE_ISSUE.contains(&size) {
            return self.file_double_issue(p);
        }
        if align <= 16 && self.has(Bug::StaleLink) && STALE_LINK.contains(&size) {
            // SAFETY: `p` is a live block of the class (this fn's contract), which `alloc`
            // takes from the base with `*STALE_LINK.end()` bytes and align 16.
            return unsafe { self.push_stale_list(p) };
        }
        if self.is_racy(size, align) && self.racy.push(p as usize) {
            return;
        }
        if self.is_racy(size, align) {
            // SAFETY: `p` is a live block of the class (this fn's contract), which `racy_pop`
            // takes from the base with `*RACY.end()` bytes and align 16.
            return unsafe { self.base.free(p, *RACY.end(), 16) };
        }
        if self.is_lost_remote(size, align) {
            // SAFETY: `p` is a live block of the class (this fn's contract), which
            // `remote.alloc` gave with `self.base`; freed once, here.
            return unsafe { self.remote.free(self.base, p) };
        }
        if self.is_exit_reclaim(size, align) {
            // SAFETY: `p` is a live block of the class (this fn's contract), which
            // `exits.alloc` gave; freed once, here.
            return unsafe { self.exits.free(p) };
        }
        if self.is_stale_block(p) {
            // SAFETY: `p` is live (this fn's contract) and one of `stale`'s blocks
            // (`is_stale_block`), which `stale.alloc` handed out.
            return unsafe { self.stale.free(p) };
        }
        if self.drops_remote_free(size, align) {
            return;
        }
        // SAFETY: `p` is a live block with `size` and `align` (this fn's contract), not one the
        // zoo keeps itself: the base's.
        unsafe { self.base.free(p, size, align) }
    }

    unsafe fn usable_size(&self, p: *mut u8, size: usize, align: usize) -> usize {
        if let Some(cache) = self.header_cache(size, align) {
            // SAFETY: `p` is a live block of the class (this fn's contract), which the cache gave.
            return unsafe { cache.usable(p) };
        }
        if self.is_own(p, size, align) {
            return size;
        }
        if let Some(&room) = self.state().rooms.get(&(p as usize)) {
            return room;
        }
        // SAFETY: `p` is a live block with `size` and `align` (this fn's contract), not one the
        // zoo keeps itself (`is_own`): the base's.
        let real = unsafe { self.base.usable_size(p, size, align) };
        if self.has(Bug::UsableOversize) && USABLE_OVERSIZE.contains(&size) {
            return real + 8;
        }
        real
    }

    fn heaps(&self) -> Option<&dyn Heaps> {
        Some(&self.heaps)
    }

    fn extras(&self) -> Option<&dyn Extras> {
        Some(self)
    }

    /// Only `fork-held-lock` alone, over a base that is: the zoo's own
    /// locks take no fork handler, so any other bug's would hang a child.
    fn fork_safe(&self) -> bool {
        self.bugs == [Bug::ForkHeldLock] && self.base.fork_safe()
    }

    /// The base's: the front caches keep all of its promises but the one
    /// each breaks.
    fn stops(&self) -> &'static [shadow::allocator::Attack] {
        self.base.stops()
    }

    fn max_align(&self) -> usize {
        self.base.max_align()
    }

    /// The classes `LostRemoteFree` and `ExitReclaimRace` keep hand a
    /// remotely freed block out again within 4 more allocations (on the
    /// owner's thread or the freeing one's); others are the base's.
    fn remote_reuse(&self, size: usize, align: usize) -> Option<usize> {
        if self.is_lost_remote(size, align) || self.is_exit_reclaim(size, align) {
            return Some(4);
        }
        self.base.remote_reuse(size, align)
    }

    fn arena(&self) -> Option<Arena> {
        self.base.arena()
    }

    /// The base's own error reports (a debug mimalloc's overflow checks).
    fn take_error(&self) -> Option<String> {
        self.base.take_error()
    }

    /// The base gives back what it holds free; the zoo's own holdings stay.
    fn trim(&self) {
        self.base.trim()
    }

    fn reset(&self) {
        // The deferred flush runs, and writes past the class table.
        let _ = self.latent.compare_exchange(
            FLUSH_QUEUED,
            CORRUPT,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
        let mut st = self.state();
        let cached = std::mem::take(&mut st.cached_48);
        let sized = std::mem::take(&mut st.sized_cached);
        let mut link = std::mem::take(&mut st.list_head);
        let large = st.large_freed.take();
        *st = State::default();
        drop(st);
        self.exits.drain();
        self.stale.drain();
        // SAFETY: the program has freed everything; a cache holds each block once (a double
        // free, cached twice, is only ever made in an attack's child).
        unsafe { self.drain_front() };
        self.hook.drain(self.base);
        // SAFETY: the program has freed everything, so each block kept here is one the zoo took
        // from `base`, that nobody holds, listed once (the racy list is deduplicated, `cached_48`
        // checked on push); the stale list links through the blocks' first words. Assumes
        // `base.free` ignores `size` and align: sized-cache blocks go back as `SIZED_FREE.end()`
        // bytes and the large block with align 16, not as they were allocated.
        unsafe {
            for p in self.racy.drain() {
                self.base.free(p as *mut u8, *RACY.end(), 16);
            }
            self.remote.drain(self.base);
            for p in cached {
                self.base.free(p as *mut u8, *DOUBLE_ISSUE.end(), 16);
            }
            for p in sized {
                self.base.free(p as *mut u8, *SIZED_FREE.end(), 16);
            }
            if let Some((p, size)) = large {
                self.base.free(p as *mut u8, size, 16);
            }
            while link != 0 {
                let next = *(link as *const usize);
                self.base.free(link as *mut u8, *STALE_LINK.end(), 16);
                link = next;
            }
        }
    }
}

/// `NarrowProvenance`: `p` again, made from a reference to its first
/// byte. The address is the same, so a native run sees no difference;
/// under Rust's aliasing rules (Miri's Stacked Borrows) the pointer may
/// touch that one byte only, and the caller's first write past it is
/// undefined behaviour, where Miri names this line as the tag's maker.
fn narrowed(p: *mut u8) -> *mut u8 {
    // SAFETY: `p` is a fresh, non-null block of at least one byte, ours
    // alone; a reference to a `MaybeUninit` byte asks nothing of its value.
    let first: &mut std::mem::MaybeUninit<u8> = unsafe { &mut *p.cast() };
    (first as *mut std::mem::MaybeUninit<u8>).cast()
}
