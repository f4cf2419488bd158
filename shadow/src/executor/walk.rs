//! The allocator's own walk of the blocks it holds in use
//! ([`Allocator::blocks_in_use`]: a declared allocator's `walk`), held to
//! the program's blocks twice:
//!
//! - after every op, each live block of the default heap lies inside a
//!   block the walk lists (`unlisted-block`): a block the allocator
//!   handed out and counts free, or dropped from its books, is one it may
//!   hand out again;
//! - once the program has freed everything, the walk lists no block it
//!   did not list when the program started, threads or not (a thread's
//!   cache is not in use): one the program gave back and the allocator
//!   kept (`kept-block`), a lost free on an allocator with no count.
//!
//! A program that keeps a block it can never free is not held to the
//! second.

use super::calls::CallGuard;
use crate::allocator::Allocator;
use crate::model::Block;
use crate::violation::Violation;

pub(super) struct WalkProbe {
    alloc: &'static dyn Allocator,
    /// The allocator has a walk and the program is checked.
    walks: bool,
    /// The blocks its walk listed in use when the program started (checked
    /// runs only, and not once the program keeps a block for good).
    at_start: Option<Vec<(usize, usize)>>,
}

impl WalkProbe {
    /// A probe of `alloc`, which walks it now when the program is `checked`.
    pub(super) fn new(alloc: &'static dyn Allocator, guard: &CallGuard, checked: bool) -> Self {
        let at_start = checked
            .then(|| guard.asked(|| alloc.blocks_in_use()))
            .flatten();
        WalkProbe {
            alloc,
            walks: at_start.is_some(),
            at_start,
        }
    }

    /// The program keeps a block it will never free: its end is not held.
    pub(super) fn keeps_unfreed(&mut self) {
        self.at_start = None;
    }

    /// After an op's calls, with no other thread in the allocator: a live
    /// block of the default heap that no listed block holds is an
    /// `unlisted-block`, keyed by the calls since the op began (the walk
    /// itself is off their path).
    pub(super) fn check_listed(&self, guard: &CallGuard, live: &[Block]) {
        if !self.walks || live.is_empty() {
            return;
        }
        let Some(mut listed) = guard.probed(|| self.alloc.blocks_in_use()) else {
            return;
        };
        listed.sort_unstable();
        for b in live.iter().filter(|b| b.heap.is_none()) {
            // The last listed block starting at or before the block holds it, if any does.
            let at = listed.partition_point(|&(start, _)| start <= b.ptr);
            let holder = at.checked_sub(1).map(|i| listed[i]);
            if holder.is_some_and(|(start, size)| b.ptr + b.size <= start + size) {
                continue;
            }
            guard.fail(Violation::UnlistedBlock {
                ptr: b.ptr,
                size: b.size,
                listed: listed.len(),
            });
        }
    }

    /// At the end of a program that freed everything: a block the walk
    /// lists in use that it did not list at the start is a `kept-block`.
    pub(super) fn check_kept(&self, guard: &CallGuard) {
        let Some(before) = &self.at_start else {
            return;
        };
        let Some(after) = guard.asked(|| self.alloc.blocks_in_use()) else {
            return;
        };
        let kept: Vec<&(usize, usize)> = after.iter().filter(|b| !before.contains(b)).collect();
        if let Some(&&(ptr, size)) = kept.first() {
            guard.flag(Violation::KeptBlock {
                ptr,
                size,
                blocks: kept.len(),
            });
        }
    }
}
