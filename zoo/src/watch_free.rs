//! `free` before the block goes back: the call counted, and the planted
//! bugs that watch frees told of it; and the cache `DoubleIssue` files
//! freed blocks in.

use std::sync::atomic::Ordering;

use super::{Bug, Zoo, DIRTY_ZEROED, FLUSH_QUEUED, LATENT};

impl Zoo {
    /// `free`'s first stage: counts the call and tells the bugs that
    /// watch frees of the live block `p` (its `size` and `align`). Whether
    /// `XthreadWrongFree` freed another block in its place, which ends the
    /// free. Inlined, as `file_double_issue`: no function of their own on
    /// `free`'s path.
    #[inline(always)]
    pub(super) unsafe fn watch_free(&self, p: *mut u8, size: usize, align: usize) -> bool {
        self.count_call();
        // SAFETY: `p` is a live block of the zoo with `size` (this fn's contract).
        if unsafe { self.wrong_free(p, size) } {
            return true;
        }
        // SAFETY: `p` is a live block of the zoo (this fn's contract).
        unsafe { self.check_footer(p) };
        self.count_remote_free(p);
        self.untrack_class(p, size, align);
        if self.has(Bug::DirtyZeroed) && DIRTY_ZEROED.contains(&size) {
            self.state().freed_256 = true;
        }
        if self.has(Bug::LatentCorruption) && LATENT.contains(&size) {
            self.latent.store(FLUSH_QUEUED, Ordering::Relaxed);
        }
        false
    }

    /// `DoubleIssue`: files the freed block `p` in the class's cache, once.
    #[inline(always)]
    pub(super) fn file_double_issue(&self, p: *mut u8) {
        let mut st = self.state();
        if !st.cached_48.contains(&(p as usize)) {
            st.cached_48.push(p as usize);
        }
    }
}
