//! `os-fail`: the allocator's OS layer refuses every request for memory
//! during the next ops ([`Extras::fail_os`]). What the allocator cannot
//! serve from what it holds then fails, as it may: a null in the window
//! is fair. A failure path must leave everything else as it was: when the
//! window closes, every live block reads as it did, and from then on a
//! request is served again (a null is a violation, as ever). A program
//! that freed everything is held to its start by `kept-bytes` (memory a
//! failure path kept), where the allocator counts its bytes in use.
//!
//! [`Extras::fail_os`]: crate::allocator::Extras::fail_os

use super::{Executor, Outcome};
use crate::allocator::Allocator;
use crate::op::Op;

/// The window: ops left in it, 0 when the OS layer serves. Dropped open
/// (a program that ended at a violation), it closes.
pub(super) struct OsWindow {
    alloc: &'static dyn Allocator,
    left: usize,
}

impl OsWindow {
    pub(super) fn new(alloc: &'static dyn Allocator) -> OsWindow {
        OsWindow { alloc, left: 0 }
    }

    fn open(&self) -> bool {
        self.left > 0
    }

    /// The OS layer serves again.
    fn close(&mut self) {
        if let Some(extras) = self.alloc.extras() {
            extras.fail_os(false);
        }
        self.left = 0;
    }
}

impl Drop for OsWindow {
    fn drop(&mut self) {
        if self.open() {
            self.close();
        }
    }
}

impl Executor {
    /// Opens the window for the next `ops` ops; skipped where the
    /// allocator has no OS layer to fail.
    pub(super) fn os_fail(&mut self, ops: usize) -> Outcome {
        let Some(extras) = self.alloc.extras() else {
            return Outcome::Skipped;
        };
        if !self.guard.asked(|| extras.fail_os(true)) {
            return Outcome::Skipped;
        }
        self.os.left = ops;
        Outcome::Done
    }

    /// After each op: the window closes after its last.
    pub(super) fn count_os_window(&mut self, op: &Op) {
        if !self.os.open() || matches!(op, Op::OsFail { .. }) {
            return;
        }
        self.os.left -= 1;
        if !self.os.open() {
            self.close_os_window();
        }
    }

    /// At the program's end: closes a window still open.
    pub(super) fn end_os_window(&mut self) {
        if self.os.open() {
            self.close_os_window();
        }
    }

    /// Closes the window, and reads every live block.
    fn close_os_window(&mut self) {
        self.guard.asked(|| self.os.close());
        if self.checked {
            for b in self.shadow.blocks() {
                self.guard
                    .verify_after_call(b, "after the OS layer refused");
            }
        }
    }

    /// Whether the window is open.
    pub(super) fn os_refusing(&self) -> bool {
        self.os.open()
    }

    /// Whether a request the allocator refused (null) may be refused: in
    /// the window, or where a fixed region could not serve it.
    pub(super) fn refused_fairly(&self, size: usize, align: usize) -> bool {
        self.os_refusing() || self.arena.refused_fairly(&self.guard, size, align)
    }
}
