//! Huge requests: between [`crate::model::MAX_BLOCK`] and the impossible
//! sizes, each checked where the harness touches it and freed at once,
//! under a count per program and, under ASan, a time budget per process.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{Executor, On, Outcome};
use crate::allocator::HeapId;
use crate::model::Block;
use crate::pattern;
use crate::sanitizer;
use crate::violation::Violation;

/// Most huge requests (over [`crate::model::MAX_BLOCK`]) one program
/// makes; each is freed as soon as it is checked.
const MAX_HUGE: usize = 2;
/// The head, the tail and one window of a huge block are touched: one
/// page each.
const PAGE: usize = 4096;
/// Largest zeroed huge request: an allocator that zeroes by hand (Rust's
/// default `alloc_zeroed` does) writes this much at most, a few dozen
/// milliseconds, and maps no more than a program's own blocks may.
const ZEROED_HUGE_MAX: usize = 256 << 20;
/// Largest huge request under ASan: just past 2^32, where 32-bit
/// truncations show. An allocator built with ASan poisons a block's
/// shadow, an eighth of its size, so a 64 GiB block costs 8 GiB of
/// writes; the builds without ASan (the tests, honggfuzz) go up to 2^62.
const HUGE_UNDER_ASAN: usize = (1 << 32) + (1 << 16);

/// The time huge requests may take under ASan, where a served 4 GiB block
/// costs an instrumented allocator about a second of shadow writes: a
/// second, plus this share of the process's run time. A request that
/// would go over is skipped. Fresh processes (a replay) always have the
/// second; without ASan huge requests cost microseconds and always run.
const HUGE_SHARE: f64 = 0.02;

/// Whether a huge request may run now, under ASan's time budget.
fn huge_budget_left() -> bool {
    let (start, spent) = huge_clock();
    let spent = Duration::from_nanos(spent.load(Ordering::Relaxed));
    spent < Duration::from_secs(1) + start.elapsed().mul_f64(HUGE_SHARE)
}

/// Counts the time since `clock` against the budget.
fn spend(clock: Instant) {
    let took = clock.elapsed().as_nanos() as u64;
    huge_clock().1.fetch_add(took, Ordering::Relaxed);
}

fn huge_clock() -> &'static (Instant, AtomicU64) {
    static CLOCK: OnceLock<(Instant, AtomicU64)> = OnceLock::new();
    CLOCK.get_or_init(|| (Instant::now(), AtomicU64::new(0)))
}

/// The huge requests a program has made, held to [`MAX_HUGE`] and to the
/// process's time budget under ASan.
#[derive(Default)]
pub(super) struct HugeBudget {
    /// Huge requests made so far (each is freed at once).
    requests: usize,
}

impl HugeBudget {
    /// Whether a huge request of `size` bytes (`zeroed`) may run now;
    /// counts it when it may.
    fn admit(&mut self, size: usize, zeroed: bool) -> bool {
        let asan = sanitizer::active();
        let unaffordable = asan && (size > HUGE_UNDER_ASAN || !huge_budget_left());
        if (zeroed && size > ZEROED_HUGE_MAX) || unaffordable || self.requests >= MAX_HUGE {
            return false;
        }
        self.requests += 1;
        true
    }
}

impl Executor {
    /// A request between [`crate::model::MAX_BLOCK`] and the impossible
    /// sizes: it may fail cleanly; if it succeeds, the block is aligned,
    /// has at least `size` usable bytes, overlaps no live block, and its
    /// head, its tail and a page the seed picks read zero (a zeroed
    /// request), then take the pattern and read it back. Only those pages
    /// are touched; the block is freed at once. Zeroed huge requests over
    /// [`ZEROED_HUGE_MAX`] are skipped: an allocator may zero gigabytes by
    /// hand, which no run can afford.
    pub(super) fn huge(
        &mut self,
        size: usize,
        align: usize,
        zeroed: bool,
        heap: Option<HeapId>,
        on: On,
    ) -> Outcome {
        if !self.huge.admit(size, zeroed) {
            return Outcome::Skipped;
        }
        let clock = Instant::now();
        // Drawn whatever the answer, so the two sides of a differential
        // run stay in step when only one serves the request.
        let seed = self.seeds.next();
        let p = self.alloc_call(size, align, zeroed, heap, on);
        if p == 0 {
            spend(clock);
            return Outcome::Failed;
        }
        let block = Block {
            ptr: p,
            size,
            align,
            usable: size,
            extent: 0,
            seed,
            heap,
        };
        if self.checked {
            // Freed unchecked by `Drop` if a violation ends the program.
            self.untracked.hold(block);
            self.touch_huge(&block, zeroed);
            self.untracked.let_go();
        }
        self.free_call(block, on);
        spend(clock);
        Outcome::Done
    }

    fn touch_huge(&mut self, b: &Block, zeroed: bool) {
        if !b.ptr.is_multiple_of(b.align) {
            self.guard.flag(Violation::Alignment {
                ptr: b.ptr,
                size: b.size,
                align: b.align,
            });
        }
        let p = b.ptr as *mut u8;
        let claimed = sanitizer::given(b.ptr, || {
            // SAFETY: `p` is the huge block just returned for `b.size` and
            // `b.align`, not freed yet.
            self.guard
                .guarded(|| unsafe { self.alloc.usable_size(p, b.size, b.align) })
        });
        // Only the bytes both the request and the answer cover.
        let len = self
            .guard
            .checked_usable(b.ptr, b.size, claimed, Some(PAGE))
            .min(b.size);
        if let Some(other) = self.shadow.overlapping(b.ptr, b.ptr + len.max(1)) {
            self.guard.overlap(*b, other);
        }
        let head = (0, PAGE.min(len));
        let tail = (len.saturating_sub(PAGE).max(head.1), len);
        let room = tail.0 - head.1;
        let at = head.1 + (b.seed as usize % room.max(1)) / PAGE * PAGE;
        let window = (at, (at + PAGE).min(tail.0));
        let pages = [head, window, tail];
        if zeroed {
            let dirty = pages
                .iter()
                // SAFETY: every page lies in the block's first `len` bytes (`len` is
                // at most `b.size` and the usable size checked above).
                .find_map(|&(from, to)| unsafe { pattern::check_zero_range(p, from, to) });
            if let Some(mismatch) = dirty {
                self.guard.flag(Violation::Zeroed {
                    ptr: b.ptr,
                    size: b.size,
                    mismatch,
                });
            }
        }
        for (from, to) in pages {
            // SAFETY: as above, the pages lie in the block's first `len` bytes, and no live
            // block overlaps it (`overlap` does not return).
            unsafe { pattern::fill_range(p, from, to, b.seed) };
        }
        let changed = pages
            .iter()
            // SAFETY: as above, the pages lie in the block's first `len` bytes.
            .find_map(|&(from, to)| unsafe { pattern::check_range(p, from, to, b.seed) });
        if let Some(mismatch) = changed {
            // Two of its pages are one: the allocator mapped the block
            // over itself.
            self.guard.fail(Violation::Contents {
                ptr: b.ptr,
                size: b.size,
                mismatch,
                when: "after its pages were written",
                by_call: false,
            });
        }
    }
}
