//! A block's slack: the bytes past its request, inside the usable size
//! the allocator reports. The harness writes them (and checks them from
//! then on) on a usable-size probe and on one new block in
//! [`SLACK_SHARE`].

use super::{Executor, Outcome};
use crate::model::Block;
use crate::pattern;
use crate::sanitizer;
use crate::violation::Site;

/// One new block in this many gets its slack written when it comes
/// ([`Executor::fresh_slack`]).
const SLACK_SHARE: u64 = 4;

impl Executor {
    /// Asks for the usable size and writes all of it, but for a block of
    /// the zeroed family: its slack stays as the allocator zeroed it, for
    /// a later zeroed realloc to be held to (the zeroed realloc's
    /// precondition is a block written only within its requests).
    pub(super) fn probe_usable(&mut self, i: usize) -> Outcome {
        let b = self.shadow.blocks()[i];
        self.guard
            .set_site(Site::new("usable-size", b.size, b.align));
        let usable = sanitizer::given(b.ptr, || {
            // SAFETY: `b` is a live block of the shadow, passed with its tracked size
            // and alignment.
            self.guard
                .guarded(|| unsafe { self.alloc.usable_size(b.ptr as *mut u8, b.size, b.align) })
        });
        if !self.checked {
            return Outcome::Live(i);
        }
        self.guard.verify(&b, "before a usable-size probe");
        // Tolerated: write only what both answers promise.
        self.same_usable(&b, usable, "changed since allocation");
        self.write_slack(i, usable.min(b.usable));
        Outcome::Live(i)
    }

    /// Writes the slack of one new block in [`SLACK_SHARE`] (chosen by its
    /// seed, so a replay picks the same ones), as a usable-size probe
    /// does: an allocator that keeps anything of its own past the request
    /// but inside the usable size it reports is caught on any block, not
    /// only on one a probe names. A block with no slack is left as `adopt`
    /// just wrote it.
    pub(super) fn fresh_slack(&mut self, i: usize) {
        let b = self.shadow.blocks()[i];
        if b.seed.is_multiple_of(SLACK_SHARE) && b.usable > b.extent {
            self.write_slack(i, b.usable);
        }
    }

    /// [`fill_slack`] on live block `i`, which then holds what it wrote.
    fn write_slack(&mut self, i: usize, usable: usize) {
        let b = self.shadow.blocks()[i];
        // SAFETY: `b` is live and `usable` is no more than its usable size (capped by ASan's
        // reach in `adopt`), so its first `usable` bytes are ours.
        if let Some(extent) = unsafe { fill_slack(&b, usable) } {
            self.shadow.blocks_mut()[i].extent = extent;
        }
    }
}

/// Writes block `b`'s pattern over its first `usable` bytes, every byte
/// past its requested size included: the slack is where an oversized
/// usable size shows. Returns the block's new extent, or `None` for a
/// zero-size block (C leaves any access to it undefined, and ASan poisons
/// it whatever `malloc_usable_size` says) and one of the zeroed family (a
/// zeroed realloc is held to its slack reading zero), which are not
/// written.
///
/// # Safety
/// `b` is live and the caller's alone, and `usable` is no more than the
/// usable size it came with.
pub(super) unsafe fn fill_slack(b: &Block, usable: usize) -> Option<usize> {
    if b.size == 0 || b.written.is_some() {
        return None;
    }
    let base = b.ptr as *mut u8;
    // SAFETY: `b` is live and the caller's alone, and `usable` is within the
    // usable size it came with (this fn's contract): those bytes are writable.
    unsafe {
        pattern::fill(base, usable, b.seed);
        pattern::fill_range(base, b.size, usable, b.seed);
    }
    Some(usable)
}
