//! The allocator's own count of bytes in use
//! ([`Allocator::bytes_in_use`]: jemalloc's `stats.allocated` less its
//! threads' caches), held to
//! where it was when a program started once the program has freed
//! everything. A remote free the allocator lost shows there, on an
//! allocator whose blocks nothing can walk.
//!
//! A program that keeps a block it can never free (an impossible
//! request's) is not checked, nor one during which a worker thread
//! started, or after which the allocator serves more or fewer threads
//! (jemalloc counts each thread's cache too, and a thread's state comes
//! and goes with it). A worker's exit alone moves neither: where the
//! allocator's thread count does not follow it (a declared count holds
//! no thread's state), a loss at a thread's exit is seen here.
//!
//! An allocator's walk of its blocks is held in `walk.rs`.

use super::calls::CallGuard;
use crate::allocator::{Allocator, InUse};
use crate::violation::Violation;

pub(super) struct KeptProbe {
    alloc: &'static dyn Allocator,
    /// The count when the program started (checked runs only), and the
    /// worker threads started by then.
    at_start: Option<(InUse, u64)>,
}

impl KeptProbe {
    /// A probe of `alloc`, which reads it now when the program is `checked`.
    pub(super) fn new(alloc: &'static dyn Allocator, guard: &CallGuard, checked: bool) -> Self {
        if !checked {
            return KeptProbe {
                alloc,
                at_start: None,
            };
        }
        KeptProbe {
            alloc,
            at_start: guard
                .asked(|| alloc.bytes_in_use())
                .map(|n| (n, crate::workers::spawned())),
        }
    }

    /// The program keeps a block it will never free: not checked.
    pub(super) fn keeps_unfreed(&mut self) {
        self.at_start = None;
    }

    /// At the end of a program that freed everything: bytes the allocator
    /// still counts in use past its start are a `kept-bytes`.
    pub(super) fn check(&self, guard: &CallGuard) {
        let Some((start, spawned)) = self.at_start else {
            return;
        };
        let Some(end) = guard.asked(|| self.alloc.bytes_in_use()) else {
            return;
        };
        let same_threads = end.threads == start.threads && crate::workers::spawned() == spawned;
        if same_threads && end.bytes > start.bytes {
            guard.flag(Violation::KeptBytes {
                before: start.bytes,
                after: end.bytes,
            });
        }
    }
}
