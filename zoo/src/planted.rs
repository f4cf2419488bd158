//! The planted bugs' own code. Each bug runs a function of its own, never
//! inlined, as two bugs of a real allocator sit in two places: the path a
//! violation keys on (`shadow::coverage`) names it, so two bugs of one kind
//! are two groups, and one bug reached through any call is one.

use std::ops::RangeInclusive;
use std::sync::atomic::Ordering;

use super::{
    Bug, Zoo, CLEAN, CORRUPT, DOUBLE_ISSUE, FULL_PAGE, FULL_PAGE_BLOCKS, PANIC_CLASS, RACY,
    WILD_WRITE, XTHREAD,
};

/// An offset of a `len`-byte block, with a few hundred bytes after it,
/// that the fixed windows checks used before (the head, the tail and 32 64-byte
/// windows at multiples of `len / 33`) never looked at: only windows at
/// seed-chosen places, or a whole-block check, see a bug planted there.
fn between_fixed_windows(len: usize) -> usize {
    16 * ((len / 33) & !7) + 128
}

thread_local! {
    /// Set while realloc or calloc allocates through `alloc`
    /// ([`Zoo::alloc_computed`]).
    pub(super) static COMPUTED_BIN: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// `XthreadZeroedLink`: the sizes.
const ZEROED_LINK: RangeInclusive<usize> = 6145..=8192;

/// `LargeInteriorSpan`: the sizes, and the page its span is counted in.
const LARGE_INTERIOR: RangeInclusive<usize> = (4 << 20) + 1..=64 << 20;
const SPAN_PAGE: usize = 64 << 10;

/// `DroppedRemoteFree`: the sizes.
const DROPPED_REMOTE: RangeInclusive<usize> = 12289..=16384;
/// `LateRemoteLeak`: the sizes, the remote frees before it starts, and
/// how often it keeps memory after.
const REMOTE_LEAK: RangeInclusive<usize> = 1..=1024;
const REMOTE_LEAK_AFTER: u64 = 1_000_000;
const REMOTE_LEAK_EVERY: u64 = 8;

/// `ForkHeldLock`: the sizes, and the lock no fork handler takes.
const FORK_LOCKED: RangeInclusive<usize> = 16385..=20480;
static FORK_LOCK: std::sync::Mutex<()> = std::sync::Mutex::new(());

/// `InteriorClass`: the sizes, and how far past a multiple of 16 they are.
const INTERIOR: RangeInclusive<usize> = 257..=4095;
const INTERIOR_OFFSETS: RangeInclusive<usize> = 2..=14;

impl Zoo {
    /// The size-class lookup `PanicClass`, `WildWrite` and
    /// `LatentCorruption` break.
    pub(super) fn class_of(&self, size: usize) {
        if self.has(Bug::PanicClass) && PANIC_CLASS.contains(&size) {
            static CLASSES: [u8; 40] = [0; 40];
            let _ = std::hint::black_box(CLASSES[(size - 2049) / 128 + 40]);
        }
        if self.has(Bug::WildWrite) && WILD_WRITE.contains(&size) {
            // The range's class was never set up: its free-list head is
            // null, and counting the request writes through it.
            let counts: *mut u64 = std::hint::black_box(std::ptr::null_mut());
            // SAFETY: not sound, on purpose: the planted `WildWrite` bug writes through a
            // null pointer (hidden by `black_box`) so the process faults where the fuzzer
            // must find it; it relies on the write faulting (SIGSEGV), which UB does not
            // promise.
            unsafe { counts.add(size / 64).write_volatile(1) };
        }
        if size <= 64
            && self.has(Bug::LatentCorruption)
            && self
                .latent
                .compare_exchange(CORRUPT, CLEAN, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            panic!("zoo: the size-class table is corrupt");
        }
    }

    #[inline(never)]
    pub(super) unsafe fn align_ignored(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        // SAFETY: `align` is a power of two within max_align (`alloc`'s contract, passed on).
        unsafe { self.shifted(size, align, 16, zeroed) }
    }

    #[inline(never)]
    pub(super) unsafe fn small_underalign(&self, size: usize, zeroed: bool) -> *mut u8 {
        // SAFETY: align 16 is a power of two within every allocator's max_align.
        unsafe { self.shifted(size, 16, 8, zeroed) }
    }

    #[inline(never)]
    pub(super) unsafe fn size_eq_align(&self, size: usize, zeroed: bool) -> *mut u8 {
        // SAFETY: the request's own align, 4096: a power of two within max_align (`alloc`'s
        // contract).
        unsafe { self.shifted(size, 4096, 2048, zeroed) }
    }

    /// Whether 65..=4096-byte blocks get room past their request
    /// (`RegrowStale`, `RezallocMovedSlack`).
    pub(super) fn has_rooms(&self) -> bool {
        self.has(Bug::RegrowStale) || self.has(Bug::RezallocMovedSlack)
    }

    /// `RegrowStale`, `RezallocMovedSlack`: a block with room up to a
    /// multiple of 64 bytes.
    #[inline(never)]
    pub(super) unsafe fn with_room(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        let room = size.next_multiple_of(64);
        // `RezallocMovedSlack`: a zeroed request zeroes only what was
        // asked for (mimalloc#63's first shape), the rest of the room as
        // the base left it.
        let p = match zeroed && self.has(Bug::RezallocMovedSlack) {
            true => {
                // SAFETY: `align` is a power of two within max_align (`alloc`'s contract).
                let p = unsafe { self.base.alloc(room, align, false) };
                if !p.is_null() {
                    // SAFETY: `p` is a new block of `room >= size` bytes.
                    unsafe { std::ptr::write_bytes(p, 0, size) };
                }
                p
            }
            // SAFETY: `align` is a power of two within max_align (`alloc`'s contract).
            false => unsafe { self.base.alloc(room, align, zeroed) },
        };
        if !p.is_null() {
            self.state().rooms.insert(p as usize, room);
        }
        p
    }

    /// `InteriorClass`: whether malloc's bin lookup rounds `size` down
    /// (a malloc's; realloc and calloc take the computed bin).
    pub(super) fn is_interior(&self, size: usize, align: usize, zeroed: bool) -> bool {
        !zeroed
            && align <= 16
            && self.has(Bug::InteriorClass)
            && INTERIOR.contains(&size)
            && INTERIOR_OFFSETS.contains(&(size % 16))
            && !COMPUTED_BIN.get()
    }

    /// `InteriorClass`: the class below `size`, as a bin lookup that
    /// rounds down gives it.
    #[inline(never)]
    pub(super) unsafe fn interior_class(&self, size: usize, align: usize) -> *mut u8 {
        // SAFETY: `align` is a power of two within max_align (`alloc`'s contract).
        unsafe { self.base.alloc(size & !15, align, false) }
    }

    /// `SizedFreeMisclass`: the block a sized free filed last, whatever
    /// class it came from, zeroed up to what it really holds.
    #[inline(never)]
    pub(super) unsafe fn sized_filed(&self, size: usize, zeroed: bool) -> Option<*mut u8> {
        let p = self.state().sized_cached.pop()? as *mut u8;
        if zeroed {
            // SAFETY: a sized free filed `p`, a block of the base's it never gave back; zeroes
            // no more than the base says it holds (assumes `usable_size` ignores the 0 and 16).
            unsafe { std::ptr::write_bytes(p, 0, size.min(self.base.usable_size(p, 0, 16))) };
        }
        Some(p)
    }

    /// `RacyFreeList`: a block off the racy list, or a fresh one.
    #[inline(never)]
    pub(super) unsafe fn racy_pop(&self, size: usize, zeroed: bool) -> *mut u8 {
        let p = match self.racy.pop() {
            Some(p) => p as *mut u8,
            // SAFETY: align 16 is a power of two within every allocator's max_align.
            None => unsafe { self.base.alloc(*RACY.end(), 16, false) },
        };
        if zeroed && !p.is_null() {
            // SAFETY: `p` is a block of `*RACY.end()` bytes, and `size` is in the class.
            unsafe { std::ptr::write_bytes(p, 0, size) };
        }
        p
    }

    /// `HugeZeroedFooter`: a fresh zeroed huge block, with its size in a
    /// footer over its last 8 bytes.
    #[inline(never)]
    pub(super) unsafe fn huge_zeroed_footer(&self, size: usize, align: usize) -> *mut u8 {
        // SAFETY: `align` is a power of two within max_align (`alloc`'s contract).
        let p = unsafe { self.base.alloc(size, align, true) };
        if !p.is_null() {
            // SAFETY: `p` is a block of `size` bytes, past `MAX_BLOCK`: its last 8 are in it.
            unsafe { p.add(size - 8).cast::<u64>().write_unaligned(size as u64) };
        }
        p
    }

    /// `LargeReuseDirty`: keeps freed block `p` (`size` bytes) when none
    /// is kept; true when it did.
    #[inline(never)]
    pub(super) fn keep_large(&self, p: *mut u8, size: usize) -> bool {
        let mut st = self.state();
        let keep = st.large_freed.is_none();
        if keep {
            st.large_freed = Some((p as usize, size));
        }
        keep
    }

    /// `LargeReuseDirty`: the kept block, for a zeroed request of `size`
    /// bytes that fits it, handed back as it was left, not zeroed.
    #[inline(never)]
    pub(super) fn large_reuse(&self, size: usize) -> Option<*mut u8> {
        let mut st = self.state();
        let (p, _) = st.large_freed.filter(|&(_, kept)| size <= kept)?;
        st.large_freed = None;
        Some(p as *mut u8)
    }

    /// The cached block is handed out but stays cached.
    #[inline(never)]
    pub(super) unsafe fn double_issue(&self, size: usize, zeroed: bool) -> *mut u8 {
        let cached = self.state().cached_48.last().copied();
        let p = match cached {
            Some(p) => p as *mut u8,
            // SAFETY: align 16 is a power of two within every allocator's max_align.
            None => unsafe { self.base.alloc(*DOUBLE_ISSUE.end(), 16, false) },
        };
        if zeroed && !p.is_null() {
            // SAFETY: `p` is a block of `*DOUBLE_ISSUE.end()` bytes the zoo keeps from the
            // base, and `size` is in the class.
            unsafe { std::ptr::write_bytes(p, 0, size) };
        }
        p
    }

    #[inline(never)]
    pub(super) unsafe fn large_dirty_zeroed(&self, size: usize, align: usize) -> *mut u8 {
        // SAFETY: `align` is a power of two within max_align (`alloc`'s contract).
        let p = unsafe { self.base.alloc(size, align, true) };
        if !p.is_null() {
            // SAFETY: `p` is a block of `size >= LARGE_DIRTY_MIN` bytes, which hold the 64 at
            // `between_fixed_windows(size)` (dirtying them is the planted bug).
            unsafe { std::ptr::write_bytes(p.add(between_fixed_windows(size)), 0xa5, 64) };
        }
        p
    }

    #[inline(never)]
    pub(super) unsafe fn dirty_zeroed(&self, size: usize, align: usize) -> *mut u8 {
        // SAFETY: `align` is a power of two within max_align (`alloc`'s contract).
        unsafe { self.base.alloc(size, align, false) }
    }

    /// Whether a new `size`-byte block is `LargeInteriorSpan`'s: a
    /// plain request's (not calloc's product nor a realloc's target, which
    /// the computed bin serves), off the edges. Inlined, so only the bug's
    /// own function is on the path of the calls it does not touch.
    #[inline(always)]
    pub(super) fn is_large_interior(&self, size: usize) -> bool {
        let off_edge = !matches!(size % SPAN_PAGE, 0 | 1) && size % SPAN_PAGE != SPAN_PAGE - 1;
        self.has(Bug::LargeInteriorSpan)
            && !COMPUTED_BIN.get()
            && LARGE_INTERIOR.contains(&size)
            && off_edge
    }

    /// `LargeInteriorSpan`: the block's usable size is whole 64 KiB
    /// pages, truncated.
    #[inline(never)]
    pub(super) fn large_interior_span(&self, p: *mut u8, size: usize) {
        let span = size / SPAN_PAGE * SPAN_PAGE;
        self.state().rooms.insert(p as usize, span);
    }

    /// Whether a free is one `DroppedRemoteFree` drops: its size, made on
    /// another thread than the zoo's. The block stays the base's for good.
    /// Inlined: a free it spares has no function of it on its path.
    #[inline(always)]
    pub(super) fn drops_remote_free(&self, size: usize, align: usize) -> bool {
        self.has(Bug::DroppedRemoteFree)
            && align <= 16
            && DROPPED_REMOTE.contains(&size)
            && super::thread_slot::token() != self.home
    }

    /// Whether a zeroed request is `XthreadZeroedLink`'s: its size, made
    /// on another thread than the zoo's.
    pub(super) fn is_zeroed_link(&self, size: usize, align: usize) -> bool {
        self.has(Bug::XthreadZeroedLink)
            && align <= 16
            && ZEROED_LINK.contains(&size)
            && super::thread_slot::token() != self.home
    }

    /// A zeroed block whose first word still holds the link to the next
    /// free block of its list.
    #[inline(never)]
    pub(super) unsafe fn xthread_zeroed_link(&self, size: usize, align: usize) -> *mut u8 {
        // SAFETY: `align` is a power of two within max_align (`alloc`'s contract).
        let p = unsafe { self.base.alloc(size, align, false) };
        if !p.is_null() {
            // SAFETY: `p` is a new block of `size` bytes, more than a word (`ZEROED_LINK`); the
            // link left in its first word is the planted bug, not unsound.
            unsafe {
                std::ptr::write_bytes(p, 0, size);
                (p as *mut usize).write_unaligned(p as usize + size);
            }
        }
        p
    }

    /// Grows a block of 64 KiB or more leaving a hole in the copy.
    #[inline(never)]
    pub(super) unsafe fn large_realloc_hole(
        &self,
        p: *mut u8,
        old: usize,
        align: usize,
        new_size: usize,
    ) -> *mut u8 {
        // SAFETY: `p` is a live block with `old` and `align` (`realloc`'s contract); assumes
        // it is the base's, not one the zoo shifted or keeps.
        let q = unsafe { self.base.realloc(p, old, align, new_size) };
        if !q.is_null() {
            // SAFETY: `q` holds `new_size > old >= LARGE_HOLE_MIN` bytes, which hold the 256 at
            // `between_fixed_windows(old)` (zeroing them is the planted bug).
            unsafe { std::ptr::write_bytes(q.add(between_fixed_windows(old)), 0, 256) };
        }
        q
    }

    /// How much of a block growing from `old` bytes the short copies copy.
    #[inline(never)]
    pub(super) fn short_realloc_copy(&self, old: usize) -> usize {
        old.saturating_sub(8)
    }

    /// (Four bytes short, not eight: a body equal to another function's
    /// would be merged with it, and the two bugs would share one name.)
    #[inline(never)]
    pub(super) fn misaligned_realloc_short(&self, old: usize) -> usize {
        old.saturating_sub(4)
    }

    #[inline(never)]
    pub(super) fn tiny_realloc_short(&self, old: usize) -> usize {
        old - 1
    }
}

/// The planted bugs' own bookkeeping, and which blocks they keep.
impl Zoo {
    /// Whether `LostRemoteFree` keeps a block of `size` and `align`.
    pub(super) fn is_lost_remote(&self, size: usize, align: usize) -> bool {
        align <= 16 && self.has(Bug::LostRemoteFree) && super::remote_free::CLASS.contains(&size)
    }

    /// Whether `p` is one of `ExitStaleCache`'s blocks.
    pub(super) fn is_stale_block(&self, p: *mut u8) -> bool {
        self.has(Bug::ExitStaleCache) && self.stale.holds(p)
    }

    /// Whether `ExitReclaimRace` keeps a block of `size` and `align`.
    pub(super) fn is_exit_reclaim(&self, size: usize, align: usize) -> bool {
        align <= 16 && self.has(Bug::ExitReclaimRace) && super::exit_reclaim::CLASS.contains(&size)
    }

    /// `StaleLink`: the head of the in-block free list, popped.
    pub(super) unsafe fn pop_stale_list(&self) -> Option<*mut u8> {
        let mut st = self.state();
        let b = st.list_head;
        if b == 0 {
            return None;
        }
        // SAFETY: `b` is a block of `*STALE_LINK.end()` bytes, 16-aligned, which the zoo
        // keeps from the base until reset; `push_stale_list` wrote its first word.
        st.list_head = unsafe { *(b as *const usize) };
        // The bug: `last_pushed` still names `b`, now live again.
        Some(b as *mut u8)
    }

    /// `StaleLink`: pushes `b`, and links the previous push to it.
    pub(super) unsafe fn push_stale_list(&self, b: *mut u8) {
        let mut st = self.state();
        // SAFETY: `b` is a block of the class freed by the program (`free`'s contract), one
        // of at least 65 bytes taken with align 16: its first word is writable.
        unsafe { *(b as *mut usize) = st.list_head };
        if st.last_pushed != 0 {
            // Back-link into the previous push: a stale pointer if that block
            // has been handed out since.
            // SAFETY: `last_pushed` is such a block too, which the zoo keeps from the base
            // until reset; a write into it while live again is the planted bug.
            unsafe { *((st.last_pushed + 8) as *mut usize) = b as usize };
        }
        st.list_head = b as usize;
        st.last_pushed = b as usize;
    }

    /// `XthreadWrongFree`, `LateRemoteLeak`: notes `p`'s owner, and that
    /// it is the thread's newest.
    pub(super) fn track_owner(&self, p: *mut u8, size: usize, align: usize) {
        let late = self.has(Bug::LateRemoteLeak) && REMOTE_LEAK.contains(&size);
        if (self.has(Bug::XthreadWrongFree) || late) && !p.is_null() {
            let me = super::thread_slot::token();
            let mut st = self.state();
            st.owners.insert(p as usize, (me, size, align));
            st.newest.insert(me, p as usize);
        }
    }

    pub(super) fn is_racy(&self, size: usize, align: usize) -> bool {
        align <= 16 && self.has(Bug::RacyFreeList) && RACY.contains(&size)
    }

    /// `ForkHeldLock`: a block of its class.
    pub(super) fn is_fork_locked(&self, size: usize, align: usize) -> bool {
        align <= 16 && self.has(Bug::ForkHeldLock) && FORK_LOCKED.contains(&size)
    }

    /// `ForkHeldLock`: runs `call` (the base's alloc or free) under the
    /// zoo's lock, held a few microseconds more, as a slow path would.
    #[inline(never)]
    pub(super) fn fork_locked<R>(&self, call: impl FnOnce() -> R) -> R {
        let _held = FORK_LOCK.lock().unwrap_or_else(|e| e.into_inner());
        let r = call();
        let until = std::time::Instant::now() + std::time::Duration::from_micros(20);
        while std::time::Instant::now() < until {
            std::hint::spin_loop();
        }
        r
    }

    /// `SplitNeverMerged`: a block of its class asked on a worker thread
    /// (not the one that made the zoo).
    pub(super) fn is_splintered(&self, size: usize, align: usize) -> bool {
        align <= 16
            && self.has(Bug::SplitNeverMerged)
            && super::splinters::CLASS.contains(&size)
            && super::thread_slot::token() != self.home
    }

    /// `LateRemoteLeak`: counts a free of `p` on another thread than its
    /// owner's; past [`REMOTE_LEAK_AFTER`] of them, every
    /// [`REMOTE_LEAK_EVERY`]th keeps memory for good.
    pub(super) fn count_remote_free(&self, p: *mut u8) {
        if !self.has(Bug::LateRemoteLeak) {
            return;
        }
        let owner = self.state().owners.remove(&(p as usize));
        if owner.is_none_or(|(o, _, _)| o == super::thread_slot::token()) {
            return;
        }
        let n = self
            .remote_frees
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            + 1;
        if n > REMOTE_LEAK_AFTER && n.is_multiple_of(REMOTE_LEAK_EVERY) {
            self.slow_leak.keep();
        }
    }

    /// `XthreadWrongFree`: true when the bug took over this free.
    pub(super) unsafe fn wrong_free(&self, p: *mut u8, size: usize) -> bool {
        if !self.has(Bug::XthreadWrongFree) {
            return false;
        }
        let me = super::thread_slot::token();
        let mut st = self.state();
        let Some((owner, _, _)) = st.owners.remove(&(p as usize)) else {
            return false;
        };
        if owner == me || !XTHREAD.contains(&size) {
            return false;
        }
        // `p` is lost; the freeing thread's newest live block is freed instead.
        let victim = st.newest.get(&me).copied().filter(|w| *w != p as usize);
        let Some((w, (_, wsize, walign))) =
            victim.and_then(|w| st.owners.remove(&w).map(|o| (w, o)))
        else {
            return false;
        };
        drop(st);
        // SAFETY: not sound, on purpose: `XthreadWrongFree` frees `w`, the thread's newest
        // live block of the base (with its size and align), which its owner still holds.
        unsafe { self.base.free(w as *mut u8, wsize, walign) };
        true
    }
}

/// `CrowdedReissue`: the sizes, and the live blocks of them at which it
/// fires: more than an op program can hold (256 blocks, 8192 in bulk, 32
/// per worker in a race).
const CROWDED: RangeInclusive<usize> = 17..=64;
const CROWDED_BLOCKS: usize = 10_000;

impl Zoo {
    /// The live blocks of its class at which a reissue bug
    /// (`FullPageReissue`, `CrowdedReissue`) hands out the newest one
    /// again for this request, if one is planted for it.
    #[inline(always)]
    pub(super) fn reissue_at(&self, size: usize, align: usize) -> Option<usize> {
        if align > 16 {
            return None;
        }
        if self.has(Bug::FullPageReissue) && FULL_PAGE.contains(&size) {
            return Some(FULL_PAGE_BLOCKS);
        }
        if self.has(Bug::CrowdedReissue) && CROWDED.contains(&size) {
            return Some(CROWDED_BLOCKS);
        }
        None
    }

    /// Counts a new block for the reissue bugs and the purge bugs.
    pub(super) fn track_class(&self, p: *mut u8, size: usize, align: usize) {
        let full_page = self.reissue_at(size, align).is_some();
        let purges = self.has(Bug::PurgeDropsLive) || self.has(Bug::PurgeLazyFreesLive);
        let large = purges && size >= 4096;
        if !(full_page || large) {
            return;
        }
        let mut st = self.state();
        if full_page && st.newest_small.0 != p as usize {
            st.live_small += 1;
            st.newest_small = (p as usize, size);
        }
        if large {
            st.last_large = Some((p as usize, size));
        }
    }

    /// Forgets a block `track_class` counted, and takes it off the sized
    /// free cache.
    pub(super) fn untrack_class(&self, p: *mut u8, size: usize, align: usize) {
        let mut st = self.state();
        if self.reissue_at(size, align).is_some() {
            st.live_small = st.live_small.saturating_sub(1);
            if st.newest_small.0 == p as usize {
                st.newest_small = (0, 0);
            }
        }
        if st.last_large.is_some_and(|(q, _)| q == p as usize) {
            st.last_large = None;
        }
        st.rooms.remove(&(p as usize));
        st.sized_cached.retain(|&q| q != p as usize);
    }
}
