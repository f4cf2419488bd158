//! The ops beyond alloc / realloc / free: the allocator's optional calls
//! ([`crate::allocator::Extras`]), bulk ops that fill pages and slabs, and
//! huge requests. Each op is skipped where the allocator lacks its call.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{Executor, On, Origin, Outcome};
use crate::allocator::{InPlace, PurgeDelay};
use crate::edges::IMPOSSIBLE_FROM;
use crate::model::Block;
use crate::op::{BulkOrder, NewSize};
use crate::pattern;
use crate::sanitizer;
use crate::violation::{Site, Violation};

/// Most bytes one bulk allocation asks for: enough to fill a page or a
/// slab of any small or medium class several times over (mimalloc's small
/// pages are 64 KiB, its medium ones 512 KiB), while a bulk of large
/// blocks stays a few mappings.
const BULK_BYTES: usize = 1 << 20;
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

/// Which realloc a resize calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum ReallocCall {
    /// [`crate::allocator::Allocator::realloc`] (or the heap's), which
    /// keeps the block's alignment.
    Plain,
    /// The zeroed realloc: bytes past the old usable size read zero.
    Zeroed,
    /// C's plain realloc of a block of any alignment.
    Unaligned,
}

/// The alignment C's `malloc(size)` promises: 16 on x86-64, 8 for blocks
/// of 8 bytes or less (see [`crate::allocator::malloc_serves`]).
pub(super) fn malloc_align(size: usize) -> usize {
    if size > 8 {
        16
    } else {
        8
    }
}

impl Executor {
    /// A fresh block's usable size must be what the allocator's good-size
    /// call promises for its request, where it promises one.
    pub(super) fn check_good_size(&self, b: &Block) {
        let Some(extras) = self.alloc.extras() else {
            return;
        };
        let good = self.queried(|| extras.good_size(b.size, b.align));
        if let Some(good) = good.filter(|&g| g != b.usable) {
            self.flag(Violation::GoodSize {
                ptr: b.ptr,
                size: b.size,
                good,
                usable: b.usable,
            });
        }
    }

    /// `count` blocks of one size and alignment, up to [`BULK_BYTES`]
    /// (an over-aligned block may take its alignment in memory, so that
    /// counts), until one fails or the program's caps are reached.
    pub(super) fn bulk_alloc(&mut self, size: usize, align: usize, count: usize) -> Outcome {
        let count = count.min(BULK_BYTES / size.max(align).max(1)).max(1);
        self.bulk = true;
        let mut outcome = Outcome::Skipped;
        for _ in 0..count {
            match self.alloc_block(size, align, false, None, On::Main) {
                Outcome::Live(_) => outcome = Outcome::Done,
                other => {
                    if outcome == Outcome::Skipped {
                        outcome = other;
                    }
                    break;
                }
            }
        }
        self.bulk = false;
        outcome
    }

    /// Frees up to `count` blocks from index `first` on, in `order`. Every
    /// block is checked first; then the frees run back to back.
    pub(super) fn bulk_free(&mut self, first: usize, count: usize, order: BulkOrder) -> Outcome {
        let n = self.shadow.len();
        let picked: Vec<usize> = match order {
            BulkOrder::Forward => (first..n).take(count).collect(),
            BulkOrder::Reverse => (first..n).take(count).rev().collect(),
            BulkOrder::Alternate => (first..n).step_by(2).take(count).collect(),
        };
        if self.checked {
            for &i in &picked {
                self.verify(&self.shadow.blocks()[i], "before free");
            }
        }
        for b in self.shadow.remove_many(&picked) {
            self.free_call(b, On::Main);
        }
        Outcome::Done
    }

    /// Resizes block `i` in place: either it stays where it is and holds
    /// what the call says (then it is checked as a realloc result), or it
    /// is unchanged, usable size and contents alike.
    pub(super) fn resize_in_place(&mut self, i: usize, to: NewSize, extra: usize) -> Outcome {
        let b = self.shadow.blocks()[i];
        let new = to.resolve(b.size);
        let extras = self.alloc.extras();
        // A zero-size block has no bytes to keep (ASan poisons it whatever
        // its usable size says), so only a real realloc may grow it.
        if (b.heap.is_none() && extras.is_none())
            || b.size == 0
            || new == 0
            || !self.shadow.fits_resize(new.saturating_add(extra))
        {
            return Outcome::Skipped;
        }
        if self.checked {
            self.verify(&b, "before an in-place resize");
        }
        self.site = Site::new("resize-in-place", b.size, b.align);
        let p = b.ptr as *mut u8;
        // SAFETY: `b` is live in the shadow (verified above), passed with its tracked size
        // and alignment; a heap block's heap `h` is live.
        let result = self.guarded(|| unsafe {
            match (b.heap, extras) {
                (Some(h), _) => self
                    .heaps()
                    .resize_in_place_in(h, p, b.size, b.align, new, extra),
                (None, Some(x)) => x.resize_in_place(p, b.size, b.align, new, extra),
                (None, None) => unreachable!("skipped above"),
            }
        });
        match result {
            None => Outcome::Skipped,
            Some(InPlace::Unchanged) => {
                if self.checked {
                    let usable =
                        // SAFETY: the failed resize left `b` as it was: live, with its
                        // tracked size and alignment.
                        self.queried(|| unsafe { self.alloc.usable_size(p, b.size, b.align) });
                    if usable != b.usable {
                        self.flag(Violation::UsableSize {
                            ptr: b.ptr,
                            size: b.size,
                            usable,
                            why: "changed by an in-place resize that failed",
                        });
                    }
                    self.verify_after_call(&b, "after a failed in-place resize");
                }
                Outcome::Failed
            }
            Some(InPlace::Resized { ptr, owned }) => {
                if self.checked && (ptr != b.ptr || owned < new) {
                    self.fail(Violation::Realloc {
                        ptr: b.ptr,
                        new_size: new,
                        why: if ptr != b.ptr {
                            "an in-place resize moved the block"
                        } else {
                            "an in-place resize gave fewer bytes than asked"
                        },
                    });
                }
                let old = self.shadow.remove(i);
                let origin = Origin::Realloc {
                    old,
                    zero_from: None,
                };
                self.adopt(b.ptr, owned, b.align, b.heap, origin)
            }
        }
    }

    /// Frees block `i` with the sized call, where the allocator has one.
    pub(super) fn free_sized(&mut self, i: usize) -> Outcome {
        let b = self.shadow.blocks()[i];
        let extras = self.alloc.extras();
        if b.heap.is_none() && extras.is_none() {
            return Outcome::Skipped;
        }
        if self.checked {
            self.verify(&b, "before free");
        }
        self.site = Site::new("free-sized", b.size, b.align);
        let p = b.ptr as *mut u8;
        let freed = crate::sanitizer::given(b.ptr, || {
            // SAFETY: `b` is live in the shadow (verified above), passed with its tracked size
            // and alignment; it leaves the shadow once freed.
            self.guarded(|| unsafe {
                match (b.heap, extras) {
                    (Some(h), _) => self.heaps().free_sized_in(h, p, b.size, b.align),
                    (None, Some(x)) => x.free_sized(p, b.size, b.align),
                    (None, None) => unreachable!("skipped above"),
                }
            })
        });
        if !freed {
            return Outcome::Skipped;
        }
        self.shadow.remove(i);
        Outcome::Done
    }

    /// `realloc(NULL, size)`: checked as `malloc(size)` would be.
    pub(super) fn realloc_null(&mut self, size: usize) -> Outcome {
        let Some(extras) = self.alloc.extras() else {
            return Outcome::Skipped;
        };
        let impossible = size >= IMPOSSIBLE_FROM;
        if !impossible && !self.shadow.fits(size) {
            return Outcome::Skipped;
        }
        let align = malloc_align(size);
        self.site = Site::new("realloc-null", size, align);
        let must_fail = self.impossible(size, align);
        match sanitizer::must_fail(must_fail, || {
            // SAFETY: no block is passed: `realloc(NULL, size)` is a fresh request.
            sanitizer::making(|| self.guarded(|| unsafe { extras.realloc_null(size) }))
        }) {
            Some(p) => self.adopt_fresh(p as usize, size, align, false, None),
            None => Outcome::Skipped,
        }
    }

    /// `free(NULL)` must do nothing: a crash or a panic is a finding.
    pub(super) fn free_null(&mut self) -> Outcome {
        let Some(extras) = self.alloc.extras() else {
            return Outcome::Skipped;
        };
        self.site = Site::bare("free-null");
        // SAFETY: no block is passed: `free(NULL)` must do nothing.
        match self.guarded(|| unsafe { extras.free_null() }) {
            true => Outcome::Done,
            false => Outcome::Skipped,
        }
    }

    /// Sets the purge delay and purges; every live block must be intact.
    pub(super) fn purge(&mut self, delay: PurgeDelay, force: bool) -> Outcome {
        let Some(extras) = self.alloc.extras() else {
            return Outcome::Skipped;
        };
        self.site = Site::bare("purge");
        if !self.guarded(|| extras.purge(delay, force)) {
            return Outcome::Skipped;
        }
        if self.checked {
            for b in self.shadow.blocks() {
                self.verify_after_call(b, "after a purge");
            }
        }
        Outcome::Done
    }

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
        heap: Option<crate::allocator::HeapId>,
        on: On,
    ) -> Outcome {
        let asan = crate::sanitizer::active();
        let unaffordable = asan && (size > HUGE_UNDER_ASAN || !huge_budget_left());
        if (zeroed && size > ZEROED_HUGE_MAX) || unaffordable || self.huge_requests >= MAX_HUGE {
            return Outcome::Skipped;
        }
        self.huge_requests += 1;
        let clock = Instant::now();
        // Drawn whatever the answer, so the two sides of a differential
        // run stay in step when only one serves the request.
        let seed = self.seed();
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
            self.pending = Some(block);
            self.touch_huge(&block, zeroed);
            self.pending = None;
        }
        self.free_call(block, on);
        spend(clock);
        Outcome::Done
    }

    fn touch_huge(&mut self, b: &Block, zeroed: bool) {
        if !b.ptr.is_multiple_of(b.align) {
            self.flag(Violation::Alignment {
                ptr: b.ptr,
                size: b.size,
                align: b.align,
            });
        }
        let p = b.ptr as *mut u8;
        let claimed = crate::sanitizer::given(b.ptr, || {
            // SAFETY: `p` is the huge block just returned for `b.size` and
            // `b.align`, not freed yet.
            self.guarded(|| unsafe { self.alloc.usable_size(p, b.size, b.align) })
        });
        // Only the bytes both the request and the answer cover.
        let len = self
            .checked_usable(b.ptr, b.size, claimed, Some(PAGE))
            .min(b.size);
        if let Some(other) = self.shadow.overlapping(b.ptr, b.ptr + len.max(1)) {
            self.overlap(*b, other);
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
                self.flag(Violation::Zeroed {
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
            self.fail(Violation::Contents {
                ptr: b.ptr,
                size: b.size,
                mismatch,
                when: "after its pages were written",
                by_call: false,
            });
        }
    }
}
