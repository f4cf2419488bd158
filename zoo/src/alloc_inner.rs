//! `alloc` past the hook and the class lookup: which planted bug, if any,
//! serves a request, else the base; and the computed bin realloc and
//! calloc allocate through.

use shadow::allocator::Allocator;

use super::planted::COMPUTED_BIN;
use super::{
    extras, Bug, Zoo, DIRTY_ZEROED, DOUBLE_ISSUE, HUGE_SUCCESS, LARGE_DIRTY_MIN, LARGE_REUSE_MIN,
    SIZED_FREE, STALE_LINK,
};

impl Zoo {
    /// `alloc` past its fast path, by the computed bin: what realloc and
    /// calloc call. (Through `alloc` itself, so a bug in the code they
    /// share keys on one path whichever call reached it.)
    pub(super) unsafe fn alloc_computed(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        COMPUTED_BIN.set(true);
        // SAFETY: the caller passes a power of two within max_align (as `alloc`'s contract).
        let p = unsafe { self.alloc(size, align, zeroed) };
        COMPUTED_BIN.set(false);
        p
    }

    /// `alloc` past the hook and the class lookup: the block of the first
    /// planted bug that serves the request, else the base's. `align` is a
    /// power of two within max_align (`alloc`'s contract).
    pub(super) unsafe fn alloc_inner(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        if self.has(Bug::HugeSuccess) && HUGE_SUCCESS.contains(&size) {
            // SAFETY: `align` is a power of two within max_align (`alloc`'s contract, passed on).
            return unsafe { self.base.alloc(64, align, false) };
        }
        if self.has(Bug::HugeTruncate)
            && size > u32::MAX as usize
            && size < shadow::edges::IMPOSSIBLE_FROM
        {
            // SAFETY: `align` is a power of two within max_align (`alloc`'s contract, passed on).
            return unsafe { self.base.alloc(size as u32 as usize, align, zeroed) };
        }
        // SAFETY: `align` is a power of two within max_align (`alloc`'s contract, passed on).
        if let Some(p) = unsafe { self.misserved(size, align, zeroed) } {
            return p;
        }
        // SAFETY: `align` is a power of two within max_align (`alloc`'s contract, passed on).
        if let Some(p) = unsafe { self.thread_list_block(size, align, zeroed) } {
            return p;
        }
        if self.is_fork_locked(size, align) {
            // SAFETY: `align` is a power of two within max_align (`alloc`'s contract, passed on).
            return self.fork_locked(|| unsafe { self.base.alloc(size, align, zeroed) });
        }
        // SAFETY: `align` is a power of two within max_align (`alloc`'s contract, passed on).
        if let Some(p) = unsafe { self.front_block(size, align, zeroed) } {
            return p;
        }
        if align <= 16 && self.has(Bug::StaleLink) && STALE_LINK.contains(&size) {
            // SAFETY: `pop_stale_list` asks nothing of the caller: it pops blocks `free` pushed.
            let p = match unsafe { self.pop_stale_list() } {
                Some(p) => p,
                // SAFETY: align 16 is a power of two within every allocator's max_align.
                None => unsafe { self.base.alloc(*STALE_LINK.end(), 16, false) },
            };
            if zeroed && !p.is_null() {
                // SAFETY: `p` is a block of `*STALE_LINK.end()` bytes, and `size` is in the class.
                unsafe { std::ptr::write_bytes(p, 0, size) };
            }
            return p;
        }
        // SAFETY: `align` is a power of two within max_align (`alloc`'s contract, passed on).
        if let Some(p) = unsafe { self.served_dirty(size, align, zeroed) } {
            return p;
        }
        if self.is_footed(size, align) {
            // SAFETY: `align` is a power of two within max_align (`alloc`'s contract, passed on).
            return unsafe { self.footed(size, align, zeroed) };
        }
        if align <= 16 && self.has_rooms() && extras::REGROW_STALE.contains(&size) {
            // SAFETY: `align` is a power of two within max_align (`alloc`'s contract, passed on).
            return unsafe { self.with_room(size, align, zeroed) };
        }
        // SAFETY: `align` is a power of two within max_align (`alloc`'s contract, passed on).
        unsafe { self.base.alloc(size, align, zeroed) }
    }

    /// The block of the planted bugs that serve a request by its size and
    /// alignment wrong: a block of another class, a misaligned one, or one
    /// handed out again while live; `None` when none serves it. `align` is
    /// a power of two within max_align. Inlined, as each of these helpers:
    /// no function of their own on `alloc`'s path.
    #[inline(always)]
    unsafe fn misserved(&self, size: usize, align: usize, zeroed: bool) -> Option<*mut u8> {
        if let Some(at) = self.reissue_at(size, align) {
            let st = self.state();
            if st.live_small >= at && st.newest_small.1 == size {
                return Some(st.newest_small.0 as *mut u8);
            }
        }
        if align <= 16 && self.has(Bug::SizedFreeMisclass) && SIZED_FREE.contains(&size) {
            // SAFETY: `sized_filed` asks nothing of the caller: it reuses blocks it filed.
            if let Some(p) = unsafe { self.sized_filed(size, zeroed) } {
                return Some(p);
            }
        }
        if self.has(Bug::AlignIgnored) && align >= 32 && size < shadow::edges::IMPOSSIBLE_FROM {
            // SAFETY: `align` is a power of two within max_align (`alloc`'s contract, passed on).
            return Some(unsafe { self.align_ignored(size, align, zeroed) });
        }
        if self.has(Bug::SmallUnderalign) && size <= 64 && align == 16 {
            // SAFETY: `small_underalign` asks nothing of the caller: it allocates with align 16.
            return Some(unsafe { self.small_underalign(size, zeroed) });
        }
        if self.has(Bug::SizeEqAlign) && size == 4096 && align == 4096 {
            // SAFETY: `size_eq_align` allocates with align 4096, this request's own, a valid one
            // (`alloc`'s contract).
            return Some(unsafe { self.size_eq_align(size, zeroed) });
        }
        if align <= 16 && self.has(Bug::DoubleIssue) && DOUBLE_ISSUE.contains(&size) {
            // SAFETY: `double_issue` asks nothing of the caller: it allocates with align 16.
            return Some(unsafe { self.double_issue(size, zeroed) });
        }
        None
    }

    /// The block of the planted bugs in the lists and caches threads share
    /// or leave behind: the racy free list, the remote frees' lists and
    /// the exit caches; `None` when none serves the request. `align` is a
    /// power of two within max_align.
    #[inline(always)]
    unsafe fn thread_list_block(&self, size: usize, align: usize, zeroed: bool) -> Option<*mut u8> {
        if self.is_racy(size, align) {
            // SAFETY: `racy_pop` asks nothing of the caller: it allocates with align 16.
            return Some(unsafe { self.racy_pop(size, zeroed) });
        }
        if self.is_lost_remote(size, align) {
            // SAFETY: `remote.alloc` asks what `base.alloc` does, and allocates with align 16.
            return Some(unsafe { self.remote.alloc(self.base, size, zeroed) });
        }
        if self.is_exit_reclaim(size, align) {
            // SAFETY: `exits.alloc` asks what `base.alloc` does, and allocates with align 16.
            return Some(unsafe { self.exits.alloc(size, zeroed) });
        }
        if align <= 16 && self.has(Bug::ExitStaleCache) {
            // SAFETY: `stale.alloc` asks what `base.alloc` does, and allocates with align 16.
            if let Some(p) = unsafe { self.stale.alloc(size, zeroed) } {
                return Some(p);
            }
        }
        None
    }

    /// The block of the planted bugs that carve or cache blocks in front of
    /// the base: the splintered region and the front caches; `None` when
    /// none serves the request. `align` is a power of two within max_align.
    #[inline(always)]
    unsafe fn front_block(&self, size: usize, align: usize, zeroed: bool) -> Option<*mut u8> {
        if self.is_splintered(size, align) {
            // SAFETY: `splinters.alloc` asks nothing of the caller: it carves its own region.
            let p = unsafe { self.splinters.alloc(size, zeroed) };
            if !p.is_null() {
                return Some(p);
            }
        }
        if let Some(cache) = self.front(size, align) {
            // SAFETY: the cache's blocks come from `self.base`.
            return Some(unsafe { cache.alloc(self.base, zeroed) });
        }
        if let Some(cache) = self.header_cache(size, align) {
            // SAFETY: the cache's blocks come from `self.base`.
            return Some(unsafe { cache.alloc(self.base, size, zeroed) });
        }
        None
    }

    /// The block of the planted bugs that serve a `zeroed` request with
    /// bytes they did not zero: a link left in it, a footer, a reused or
    /// recycled block; `None` when none serves the request. `align` is a
    /// power of two within max_align.
    #[inline(always)]
    unsafe fn served_dirty(&self, size: usize, align: usize, zeroed: bool) -> Option<*mut u8> {
        if zeroed && self.is_zeroed_link(size, align) {
            // SAFETY: `align` is a power of two within max_align (`alloc`'s contract, passed on).
            return Some(unsafe { self.xthread_zeroed_link(size, align) });
        }
        if zeroed && self.has(Bug::HugeZeroedFooter) && size > shadow::edges::MAX_BLOCK {
            // SAFETY: `align` is a power of two within max_align (`alloc`'s contract, passed on).
            return Some(unsafe { self.huge_zeroed_footer(size, align) });
        }
        if zeroed && self.has(Bug::LargeReuseDirty) && size >= LARGE_REUSE_MIN {
            if let Some(p) = self.large_reuse(size) {
                return Some(p);
            }
        }
        if zeroed && self.has(Bug::LargeDirtyZeroed) && size >= LARGE_DIRTY_MIN {
            // SAFETY: `align` is a power of two within max_align (`alloc`'s contract, passed on).
            return Some(unsafe { self.large_dirty_zeroed(size, align) });
        }
        if zeroed
            && align <= 16
            && self.has(Bug::DirtyZeroed)
            && DIRTY_ZEROED.contains(&size)
            && self.state().freed_256
        {
            // SAFETY: `align` is a power of two within max_align (`alloc`'s contract, passed on).
            return Some(unsafe { self.dirty_zeroed(size, align) });
        }
        None
    }
}
