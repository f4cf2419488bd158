//! Pages given back under a live block. An allocator may return pages
//! lazily (`MADV_FREE`): such a page keeps its bytes until the kernel
//! needs the memory, then reads zero. A page under a live block released
//! so reads right in every check until the machine runs short of memory,
//! hours into a user's run. So after a purge, and at the end of a program
//! that purged, the harness asks the kernel to reclaim every page under a
//! live block at once (`MADV_PAGEOUT`: a lazily released page is dropped;
//! any other stays, or with swap goes out and comes back unchanged) and
//! reads every live block under a page that went (`mincore`, before and
//! after): one that reads wrong is `released-live`.
//!
//! The kept huge block is not asked: most of it was never touched.

use super::checks::contents;
use super::Executor;
use crate::edges::page_size;
use crate::violation::Violation;

impl Executor {
    /// Has the kernel reclaim the pages under every live block, then
    /// checks the pattern of each block under a page that went (resident
    /// before, not after: released lazily, or with swap paged out): one
    /// changed is a [`Violation::ReleasedLive`] found `when` (`by_call`:
    /// right after the calls that released it).
    pub(super) fn check_released(&self, when: &'static str, by_call: bool) {
        let page = page_size();
        let mut spans: Vec<(usize, usize)> = self
            .shadow
            .blocks()
            .iter()
            .map(|b| (b.ptr / page * page, b.end().next_multiple_of(page)))
            .collect();
        spans.sort_unstable();
        let mut merged: Vec<(usize, usize)> = Vec::with_capacity(spans.len());
        for (from, to) in spans {
            match merged.last_mut() {
                Some(last) if from <= last.1 => last.1 = last.1.max(to),
                _ => merged.push((from, to)),
            }
        }
        let mut gone = Vec::new();
        for (from, to) in merged {
            gone.extend(reclaim(from, to, page));
        }
        if gone.is_empty() {
            return;
        }
        for b in self.shadow.blocks() {
            if !gone.iter().any(|&p| p < b.end() && b.ptr < p + page) {
                continue;
            }
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

/// Asks the kernel to reclaim the pages of `[from, to)` now, and returns
/// those that were resident before and are not after. Where it cannot (a
/// kernel before 5.4), none go.
fn reclaim(from: usize, to: usize, page: usize) -> Vec<usize> {
    let before = resident(from, to, page);
    // SAFETY: `MADV_PAGEOUT` changes no byte the process can read, except in
    // pages given back with `MADV_FREE`, which the kernel may drop at any time
    // anyway: it only moves pages out of memory (to swap, or nowhere for a
    // lazily freed one). The range is page-aligned; unmapped parts fail the
    // call, harmlessly.
    unsafe { libc::madvise(from as *mut libc::c_void, to - from, libc::MADV_PAGEOUT) };
    let after = resident(from, to, page);
    let went =
        |(i, (b, a)): (usize, (&u8, &u8))| (b & 1 == 1 && a & 1 == 0).then_some(from + i * page);
    before
        .iter()
        .zip(&after)
        .enumerate()
        .filter_map(went)
        .collect()
}

/// One byte per page of `[from, to)`, bit 0 set where it is resident;
/// none set where the range does not read (a hole in it).
fn resident(from: usize, to: usize, page: usize) -> Vec<u8> {
    let mut pages = vec![0u8; (to - from) / page];
    // SAFETY: `pages` has one byte per page of the page-aligned range, as `mincore`
    // writes; it only reads the page tables.
    unsafe { libc::mincore(from as *mut libc::c_void, to - from, pages.as_mut_ptr()) };
    pages
}
