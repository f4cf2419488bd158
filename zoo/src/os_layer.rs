//! The zoo's OS layer ([`shadow::allocator::Extras::fail_os`]), emulated
//! over any base: a request of [`MAPPED`] bytes or more is mapped in two
//! steps, a reservation (a block of the base) and a commit, and the
//! commit fails while the layer refuses. `OsFailLeaks` keeps the
//! reservation on that failure path, where the correct zoo gives it back:
//! planted in jemalloc, whose own count of bytes in use then stays up
//! after the program has freed everything (`kept-bytes`).

use std::ops::RangeFrom;
use std::sync::atomic::{AtomicBool, Ordering};

use super::{Bug, Zoo};

/// Requests the layer maps (as glibc's `mmap` threshold).
const MAPPED: RangeFrom<usize> = 256 << 10..;

/// Set: the layer refuses. One per process, as an OS layer is.
static REFUSING: AtomicBool = AtomicBool::new(false);

pub(super) fn refuse(refuse: bool) {
    REFUSING.store(refuse, Ordering::Release);
}

impl Zoo {
    /// Null when the layer refused to map a request of `size` bytes;
    /// `None` when it served, or was not asked.
    pub(super) fn os_refused(&self, size: usize, align: usize) -> Option<*mut u8> {
        if !MAPPED.contains(&size) || !REFUSING.load(Ordering::Acquire) {
            return None;
        }
        // SAFETY: a fresh request of the base, freed below with its size and alignment, or
        // leaked (the planted bug).
        let reserved = unsafe { self.base.alloc(size, align, false) };
        if !reserved.is_null() && !self.has(Bug::OsFailLeaks) {
            // SAFETY: as above: freed once, here.
            unsafe { self.base.free(reserved, size, align) };
        }
        Some(std::ptr::null_mut())
    }
}
