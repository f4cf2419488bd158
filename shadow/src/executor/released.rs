//! Pages given back under a live block. An allocator may return pages
//! lazily (`MADV_FREE`): such a page keeps its bytes until the kernel
//! needs the memory, then reads zero. A page under a live block released
//! so reads right in every check until the machine runs short of memory,
//! hours into a user's run. So after a purge, and at the end of a program
//! that purged, the harness asks the kernel to reclaim every page under a
//! live block at once (`MADV_PAGEOUT`: a lazily released page is dropped;
//! any other stays, or with swap goes out and comes back unchanged) and
//! reads every live block again: one that reads wrong is `released-live`.
//!
//! The kept huge block is not asked: most of it was never touched.

use super::checks::contents;
use super::Executor;
use crate::resident::page_size;
use crate::violation::Violation;

impl Executor {
    /// Has the kernel reclaim the pages under every live block, then
    /// checks each block's pattern: one changed is a
    /// [`Violation::ReleasedLive`] found `when` (`by_call`: right after the
    /// calls that released it).
    pub(super) fn check_released(&self, when: &'static str, by_call: bool) {
        let page = page_size();
        let mut pages: Vec<(usize, usize)> = self
            .shadow
            .blocks()
            .iter()
            .map(|b| (b.ptr / page * page, b.end().next_multiple_of(page)))
            .collect();
        pages.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(pages.len());
        for (from, to) in pages {
            match merged.last_mut() {
                Some(last) if from <= last.1 => last.1 = last.1.max(to),
                _ => merged.push((from, to)),
            }
        }
        for (from, to) in merged {
            reclaim(from, to);
        }
        for b in self.shadow.blocks() {
            // SAFETY: `b` is a live block of the shadow.
            if let Some(mismatch) = unsafe { contents(b) } {
                self.guard.fail(Violation::ReleasedLive {
                    ptr: b.ptr,
                    size: b.size,
                    mismatch,
                    when,
                    by_call,
                });
            }
        }
    }
}

/// Asks the kernel to reclaim the pages of `[from, to)` now. Where it
/// cannot (a kernel before 5.4, a range with holes), the pages stay as
/// they were and the check after it finds nothing.
fn reclaim(from: usize, to: usize) {
    // SAFETY: `MADV_PAGEOUT` changes no byte the process can read, except in
    // pages given back with `MADV_FREE`, which the kernel may drop at any time
    // anyway: it only moves pages out of memory (to swap, or nowhere for a
    // lazily freed one). The range is page-aligned; unmapped parts fail the
    // call, harmlessly.
    unsafe { libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_PAGEOUT) };
}
