//! The zoo's extras, built on its own alloc / realloc / free (so the
//! blocks other bugs manage stay the zoo's), with their planted bugs.

use std::ops::RangeInclusive;

use super::{Bug, Zoo, SIZED_FREE};
use shadow::allocator::{
    Allocator, Extras, GoodSize, Hook, InPlace, PurgeDelay, Resize, ZeroedFrom,
};

const REZALLOC_DIRTY_MIN: usize = 1024;
pub(super) const REGROW_STALE: RangeInclusive<usize> = 65..=4096;
const EXPAND_OVERCLAIMS: RangeInclusive<usize> = 65..=4096;
const PLAIN_REALLOC_MISALIGNS_MIN: usize = 64;
const REALLOC_NULL_FAILS: RangeInclusive<usize> = 1..=64;
const GOOD_SIZE_LIES: RangeInclusive<usize> = 100..=200;
const PAGE: usize = 4096;

impl Extras for Zoo {
    /// A realloc, then zeros every byte past the old request (the
    /// strongest reading of a zeroed realloc: the zoo keeps it).
    unsafe fn realloc_zeroed(&self, p: *mut u8, r: Resize) -> Option<*mut u8> {
        let (old, align, new_size) = (r.old, r.align, r.to);
        if self.has_rooms() {
            // SAFETY: `p` is a live block of the zoo (this fn's contract).
            if let Some(q) = unsafe { self.regrow_stale(p, new_size) } {
                return Some(q);
            }
        }
        if self.has(Bug::RezallocMovedSlack) {
            // SAFETY: `p` is a live block of the zoo with `old` and `align` (this fn's contract).
            if let Some(q) = unsafe { self.rezalloc_moved_slack(p, r) } {
                return Some(q);
            }
        }
        // SAFETY: `p` is a live block of the zoo with `old` and `align` (this fn's contract).
        let q = unsafe { self.realloc(p, old, align, new_size) };
        if !q.is_null() && new_size > old {
            // SAFETY: `q` is a block of `new_size` bytes, so `[old, new_size)` lies in it.
            unsafe { std::ptr::write_bytes(q.add(old), 0, new_size - old) };
            if self.has(Bug::RezallocDirty) && new_size >= REZALLOC_DIRTY_MIN {
                let dirty = (new_size - old).min(16);
                // SAFETY: `q`'s last `dirty` bytes, as `dirty <= new_size - old` (dirtying them
                // is the planted bug, not unsound).
                unsafe { std::ptr::write_bytes(q.add(new_size - dirty), 0xa5, dirty) };
            }
        }
        Some(q)
    }

    /// The zoo's promise: every byte past the old request; with
    /// `RezallocMovedSlack` planted, mimalloc's.
    fn zeroed_from(&self) -> ZeroedFrom {
        match self.has(Bug::RezallocMovedSlack) {
            true => ZeroedFrom::Written,
            false => ZeroedFrom::Request,
        }
    }

    /// `mi_expand`'s contract: within the usable size, or unchanged.
    unsafe fn resize_in_place(&self, p: *mut u8, r: Resize, _extra: usize) -> Option<InPlace> {
        let (old, align, new_size) = (r.old, r.align, r.to);
        // A block the zoo keeps by its size class stays in that class, as
        // a size-class allocator's does: resized out of it, its free would
        // go to the base while the class still holds it.
        if self.is_own(p, old, align) != self.is_own(p, new_size, align) {
            return Some(InPlace::Unchanged);
        }
        // SAFETY: `p` is a live block of the zoo with `old` and `align` (this fn's contract).
        let usable = unsafe { self.usable_size(p, old, align) };
        let limit = match self.has(Bug::ExpandOverclaims) && EXPAND_OVERCLAIMS.contains(&old) {
            true => 2 * usable,
            false => usable,
        };
        Some(match new_size <= limit {
            true => InPlace::Resized {
                ptr: p as usize,
                owned: new_size,
            },
            false => InPlace::Unchanged,
        })
    }

    unsafe fn free_sized(&self, p: *mut u8, size: usize, align: usize) -> bool {
        if align <= 16 && self.has(Bug::SizedFreeMisclass) && SIZED_FREE.contains(&size) {
            self.untrack_class(p, size, align);
            // The bug: one list for the whole range, whatever the size.
            self.state().sized_cached.push(p as usize);
            return true;
        }
        // SAFETY: `p` is a live block of the zoo with `size` and `align` (this fn's contract).
        unsafe { self.free(p, size, align) };
        true
    }

    /// A fresh block with malloc's alignment, the contents copied over.
    unsafe fn realloc_plain(&self, p: *mut u8, r: Resize) -> Option<*mut u8> {
        let (old, align, new_size) = (r.old, r.align, r.to);
        let q = match self.has(Bug::PlainReallocMisaligns) && align >= PLAIN_REALLOC_MISALIGNS_MIN {
            // SAFETY: align 16 is a power of two within every allocator's max_align.
            true => unsafe { self.shifted(new_size, 16, 8, false) },
            // SAFETY: align 1 is a power of two within every allocator's max_align.
            false => unsafe { self.alloc_computed(new_size, 1, false) },
        };
        if !q.is_null() {
            // SAFETY: `p` holds `old` bytes (this fn's contract), `q` is a new block of
            // `new_size`; only a planted reissue bug hands out `p` itself as `q`.
            unsafe { std::ptr::copy_nonoverlapping(p, q, old.min(new_size)) };
            // SAFETY: `p` is a live block of the zoo with `old` and `align` (this fn's
            // contract), freed once, here.
            unsafe { self.free(p, old, align) };
        }
        Some(q)
    }

    unsafe fn realloc_null(&self, size: usize) -> Option<*mut u8> {
        if self.has(Bug::ReallocNullFails) && REALLOC_NULL_FAILS.contains(&size) {
            return Some(std::ptr::null_mut());
        }
        // SAFETY: align 1 is a power of two within every allocator's max_align.
        Some(unsafe { self.alloc(size, 1, false) })
    }

    unsafe fn free_null(&self) -> bool {
        if self.has(Bug::FreeNullPanics) {
            panic!("zoo: free(NULL) dereferenced its header");
        }
        true
    }

    /// Promises nothing, unless the lie is planted.
    fn good_size(&self, size: usize, _align: usize) -> Option<GoodSize> {
        (self.has(Bug::GoodSizeLies) && GOOD_SIZE_LIES.contains(&size))
            .then(|| GoodSize::Exact(size.next_multiple_of(16)))
    }

    /// The base's purge, if it has one (glibc's `malloc_trim` for
    /// `system`, so a zoo's memory plateaus as its base's does), after
    /// the bug that drops a live block's pages or gives them back lazily,
    /// if planted.
    fn purge(&self, delay: PurgeDelay, force: bool) -> bool {
        let lazy = self.has(Bug::PurgeLazyFreesLive);
        if (lazy || self.has(Bug::PurgeDropsLive)) && delay == PurgeDelay::Immediate {
            // The state lock is held over the planted bug on purpose: it
            // keeps the block from being freed meanwhile.
            let st = self.state();
            if let Some((p, size)) = st.last_large {
                let first = p.next_multiple_of(PAGE);
                let end = (p + size) / PAGE * PAGE;
                if end > first && lazy {
                    // SAFETY: `[first, end)` is whole pages inside `last_large`, a live block
                    // the state lock keeps from being freed meanwhile; `MADV_FREE` on them is
                    // the planted bug: their bytes stay until the kernel reclaims them.
                    unsafe {
                        libc::madvise(first as *mut libc::c_void, end - first, libc::MADV_FREE)
                    };
                } else if end > first {
                    // SAFETY: `[first, end)` lies inside `last_large`, a live block of
                    // `size` bytes (zeroing it is the planted bug); the state lock, held in
                    // `st`, keeps its free from racing this. Assumes
                    // every free or move of the block clears `last_large`: the
                    // `LargeReallocHole` realloc and `wrong_free`'s victim free skip
                    // `untrack_class`.
                    unsafe { std::ptr::write_bytes(first as *mut u8, 0, end - first) };
                }
            }
        }
        if self.has(Bug::PurgeIgnoresDelay) && delay == PurgeDelay::Immediate {
            // The bug: the delay asked for is dropped, and the base decays
            // by its usual one instead of purging.
            return self
                .base
                .extras()
                .is_none_or(|e| e.purge(PurgeDelay::Millis(10_000), false));
        }
        self.base.extras().is_none_or(|e| e.purge(delay, force))
    }

    fn free_pages_kept(&self, live: &[(usize, usize)]) -> Option<usize> {
        self.base.extras()?.free_pages_kept(live)
    }

    /// Emulated: every allocation calls the hook first (`hook.rs`).
    /// The zoo's emulated OS layer ([`super::os_layer`]).
    fn fail_os(&self, refuse: bool) -> bool {
        super::os_layer::refuse(refuse);
        true
    }

    fn set_hook(&self, hook: Option<Hook>) -> bool {
        self.hook.set(hook);
        true
    }

    fn run_hook(&self) -> bool {
        self.hook.call(false);
        true
    }
}

impl Zoo {
    /// `RegrowStale`, `RezallocMovedSlack`: a zeroed realloc of block `p`
    /// to `new_size` within the room it got stays in place, zeroing from
    /// the room on: nothing.
    /// `None` for a block without room, or a size past it: a real
    /// realloc then.
    unsafe fn regrow_stale(&self, p: *mut u8, new_size: usize) -> Option<*mut u8> {
        let room = *self.state().rooms.get(&(p as usize))?;
        (new_size != 0 && new_size <= room).then_some(p)
    }

    /// `RezallocMovedSlack`: a zeroed realloc of block `p` past its room
    /// ([`Zoo::regrow_stale`] keeps it in place within it), to a size that
    /// gets room, moves it to a new one with room, zeroed as mimalloc's
    /// `_mi_heap_realloc_zero` zeroes it: from the old room's last word up
    /// to the new request, then the old room copied over. `None` for a
    /// block without room, or another size: a real realloc then.
    unsafe fn rezalloc_moved_slack(&self, p: *mut u8, r: Resize) -> Option<*mut u8> {
        let (old, align, new_size) = (r.old, r.align, r.to);
        let room = *self.state().rooms.get(&(p as usize))?;
        if new_size <= room || !REGROW_STALE.contains(&new_size) {
            return None;
        }
        // SAFETY: `align` is the one `p` was allocated with (`realloc_zeroed`'s contract), a
        // valid one.
        let q = unsafe { self.with_room(new_size, align, false) };
        if !q.is_null() {
            // SAFETY: `q` is a new block of at least `new_size` bytes, and
            // `room - 8 < new_size` (`new_size > room >= 64`); `p` is the
            // live block of `room` bytes the base gave it, not `q`.
            unsafe {
                std::ptr::write_bytes(q.add(room - 8), 0, new_size - (room - 8));
                std::ptr::copy_nonoverlapping(p, q, room);
            }
            // SAFETY: `p` is a live block of the zoo with `old` and `align` (`realloc_zeroed`'s
            // contract), freed once, here.
            unsafe { self.free(p, old, align) };
        }
        Some(q)
    }
}
