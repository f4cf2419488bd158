//! `HugeCrossShort`'s and `HugeReallocMisaligns`' realloc paths, the
//! ones past 64 MiB (`shadow::edges::MAX_BLOCK`).

use super::{Bug, Zoo};

impl Zoo {
    /// A realloc's paths past 64 MiB: `HugeCrossShort`'s across it, and
    /// `HugeReallocMisaligns`' (a huge block aligned past a page, moved
    /// to a huge size at an address a page past an aligned one).
    #[inline(never)]
    pub(super) unsafe fn huge_realloc(
        &self,
        p: *mut u8,
        old: usize,
        align: usize,
        new_size: usize,
    ) -> Option<*mut u8> {
        let huge = shadow::edges::MAX_BLOCK;
        if self.has(Bug::HugeCrossShort) && (old > huge) != (new_size > huge) {
            // SAFETY: `p` is a live block of the zoo with `old` and `align` (`realloc`'s
            // contract).
            return Some(unsafe { self.huge_cross(p, old, align, new_size) });
        }
        if !(self.has(Bug::HugeReallocMisaligns) && align > 4096 && old > huge && new_size > huge) {
            return None;
        }
        // SAFETY: `align` is the one `p` was allocated with (`realloc`'s contract), a valid one.
        let q = unsafe { self.shifted(new_size, align, 4096, false) };
        if !q.is_null() {
            // SAFETY: `p` holds `old` live bytes (`realloc`'s contract), `q` is a new block
            // of `new_size`.
            unsafe { std::ptr::copy_nonoverlapping(p, q, old.min(new_size)) };
            // SAFETY: `p` is a live block of the zoo with `old` and `align` (`realloc`'s
            // contract), freed once, here.
            unsafe { shadow::allocator::Allocator::free(self, p, old, align) };
        }
        Some(q)
    }

    /// `HugeCrossShort`: moves a block across 64 MiB, copying a page
    /// less than the smaller of its sizes.
    #[inline(never)]
    unsafe fn huge_cross(&self, p: *mut u8, old: usize, align: usize, new_size: usize) -> *mut u8 {
        // SAFETY: `align` is the one `p` was allocated with (`realloc`'s contract), a valid one.
        let q = unsafe { self.alloc_computed(new_size, align, false) };
        if !q.is_null() {
            // SAFETY: `p` holds `old` live bytes (`realloc`'s contract), `q` is a new block
            // of `new_size`; the copy is shorter than both (the short copy is the bug).
            unsafe { std::ptr::copy_nonoverlapping(p, q, old.min(new_size).saturating_sub(4096)) };
            // SAFETY: `p` is a live block of the zoo with `old` and `align` (`realloc`'s
            // contract), freed once, here.
            unsafe { shadow::allocator::Allocator::free(self, p, old, align) };
        }
        q
    }
}
