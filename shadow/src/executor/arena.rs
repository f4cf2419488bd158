//! Allocators over a fixed region ([`crate::allocator::Allocator::arena`]):
//! when a null is legitimate, and the capacity check at a program's end.
//!
//! Both ask the allocator itself what it can serve, by a size search over
//! its own alloc and free (at most log2 of the region's size probes, each
//! block freed at once), rather than trust a count of free bytes: a
//! segregated-fit allocator (TLSF) refuses requests a little smaller than
//! its largest free block, and fragmentation makes live bytes plus the
//! request a bound that any full arena passes.
//!
//! - A refused request of `n` bytes is legitimate when no block of `n`
//!   bytes or more, with its alignment, is served right after (or `n` is
//!   larger than the region). The probes go up from `n` and stop at the
//!   first block served: a failed request changes nothing, but a block
//!   served and freed may (an allocator that merges free blocks lazily, on
//!   a later free, makes room by the probe's own free). Right after is the same moment for a call on
//!   the main thread or a worker; a race section's refusal is judged only
//!   when the section freed nothing, since a free in it may have made room
//!   after the refusal (allocating never makes room).
//! - Once a program has freed everything, the largest block served, and
//!   the allocator's own count of free bytes where it keeps one, must be
//!   what they were when the program started. Each program is measured
//!   against its own start, so a replay in a fresh process sees what the
//!   fuzz process saw, and a loss a tolerated finding left behind is not
//!   charged to the programs after it. A program that keeps a block it
//!   can never free (what an impossible request returned, already a
//!   finding) is not checked: its loss is that block. An overflowing
//!   calloc's block is freed at once, at the size its product wrapped to.

use super::calls::CallGuard;
use crate::allocator::Allocator;
use crate::violation::Violation;

/// What an arena allocator can serve, measured when a program starts and
/// once it has freed everything.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Capacity {
    /// The largest block it serves, of a plain request's alignment
    /// ([`super::plain_align`]: an embedded heap that serves 8-aligned
    /// blocks only would refuse every 16-aligned probe, and its capacity
    /// would read 0 at the start and the end alike).
    largest: usize,
    /// Its own count of free bytes, if it keeps one.
    free: Option<usize>,
}

/// Arena probing: asks an allocator over a fixed region what it can
/// serve (each probe a call through the guard, at the op's site), and
/// holds what it could when the program started.
pub(super) struct ArenaProbe {
    alloc: &'static dyn Allocator,
    /// What the allocator could serve when the program started (checked
    /// runs only), held against its end.
    at_start: Option<Capacity>,
}

impl ArenaProbe {
    /// A probe of `alloc`, which measures it now when the program is
    /// `checked`.
    pub(super) fn new(alloc: &'static dyn Allocator, guard: &CallGuard, checked: bool) -> Self {
        let mut probe = ArenaProbe {
            alloc,
            at_start: None,
        };
        if checked {
            probe.at_start = probe.capacity(guard);
        }
        probe
    }

    /// The program keeps a block it will never free ([`crate::sanitizer::never_freed`]):
    /// its capacity at the end is not held against its start.
    pub(super) fn keeps_unfreed(&mut self) {
        self.at_start = None;
    }

    /// The largest block of `align` the allocator serves right now, no
    /// more than `limit`: a binary search that allocates each probe and
    /// frees it at once (a panic in either is a finding at the current
    /// site).
    fn largest_servable(&self, guard: &CallGuard, limit: usize, align: usize) -> usize {
        // `lo` is served (an empty block trivially), `hi` is not.
        let (mut lo, mut hi) = (0usize, limit.saturating_add(1));
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            // SAFETY: no block is passed; `align` is `plain_align` (from `capacity`, the
            // only caller), a power of two no larger than `max_align()`.
            let p = guard.guarded(|| unsafe { self.alloc.alloc(mid, align, false) });
            if p.is_null() {
                hi = mid;
            } else {
                // SAFETY: `p` was just returned, non-null, for `mid` bytes and `align`; freed once.
                guard.guarded(|| unsafe { self.alloc.free(p, mid, align) });
                lo = mid;
            }
            // The probe's calls are the allocator's too: a heap they
            // break is found here, not by the next program.
            guard.heap_check();
        }
        lo
    }

    /// Whether a refused request of `size` bytes with `align` is one the
    /// allocator may refuse: it declares a region, and cannot serve a
    /// block that large right now (see the module doc).
    pub(super) fn refused_fairly(&self, guard: &CallGuard, size: usize, align: usize) -> bool {
        let Some(arena) = guard.asked(|| self.alloc.arena()) else {
            return false;
        };
        // Not only `size` itself: an allocator that refuses one size while
        // it serves larger blocks is caught too. Probed at an alignment it
        // takes (a realloc of null asks for malloc's, which an allocator
        // without an aligned API may not).
        let align = align.min(self.alloc.max_align());
        size > arena.size || !at_least(size, arena.size).any(|n| self.serves(guard, n, align))
    }

    /// Whether a block of `size` bytes with `align` is served now (and then
    /// freed at once).
    fn serves(&self, guard: &CallGuard, size: usize, align: usize) -> bool {
        // SAFETY: no block is passed; `align` is a power of two (every op's is) no larger than
        // `max_align()` (`refused_fairly` caps it).
        let p = guard.guarded(|| unsafe { self.alloc.alloc(size, align, false) });
        if !p.is_null() {
            // SAFETY: `p` was just returned, non-null, for `size` bytes and `align`; freed once.
            guard.guarded(|| unsafe { self.alloc.free(p, size, align) });
        }
        !p.is_null()
    }

    /// What the allocator can serve now, if it declares a region.
    fn capacity(&self, guard: &CallGuard) -> Option<Capacity> {
        // The count is read before the probes, none of them live.
        let arena = guard.asked(|| self.alloc.arena())?;
        Some(Capacity {
            largest: self.largest_servable(guard, arena.size, super::plain_align(self.alloc)),
            free: arena.free,
        })
    }

    /// At the end of a program that freed everything: capacity lost since
    /// the start is a `capacity-leak`. The allocator's own count is
    /// compared first, as it sees any loss; the largest block served
    /// catches a loss the count misses (free blocks no longer merged).
    pub(super) fn check_capacity(&self, guard: &CallGuard) {
        let Some(start) = self.at_start else {
            return;
        };
        let Some(end) = self.capacity(guard) else {
            return;
        };
        let lost = match (start.free, end.free) {
            (Some(before), Some(after)) if after < before => Some(("free bytes", before, after)),
            _ if end.largest < start.largest => {
                Some(("largest block served", start.largest, end.largest))
            }
            _ => None,
        };
        if let Some((figure, before, after)) = lost {
            guard.flag(Violation::CapacityLeak {
                figure,
                before,
                after,
            });
        }
    }
}

/// Sizes from `size` up to `limit`: `size`, then `size` plus 8, 16, 32, ...
/// bytes, then `limit`. Few probes, close above `size` where an allocator's
/// rounding would refuse, and the whole region last.
fn at_least(size: usize, limit: usize) -> impl Iterator<Item = usize> {
    let steps = std::iter::successors(Some(0usize), |&s| {
        if s == 0 {
            Some(8)
        } else {
            s.checked_mul(2)
        }
    })
    .map(move |s| size.saturating_add(s))
    .take_while(move |&n| n < limit);
    steps.chain(std::iter::once(limit))
}

#[cfg(test)]
mod tests {
    use super::at_least;

    #[test]
    fn probe_sizes_go_up_from_the_request_to_the_region() {
        let sizes: Vec<usize> = at_least(100, 200).collect();
        assert_eq!(sizes, [100, 108, 116, 132, 164, 200]);
        assert_eq!(at_least(200, 200).collect::<Vec<_>>(), [200]);
    }
}
