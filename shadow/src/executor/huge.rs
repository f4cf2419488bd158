//! Huge requests, between [`crate::edges::MAX_BLOCK`] and the impossible
//! sizes ([`Executor::huge`]): a count per program and, under ASan, a
//! time budget per process; only three pages of a huge block are
//! touched. A program's first huge block is kept across its later ops
//! (its pages checked again before its next call and at the program's
//! end), and its second huge request reallocates it instead, with its
//! alignment: huge grows and shrinks (mremap's paths) and aligned
//! reallocs of large over-aligned blocks. A plain realloc of a normal
//! block to a huge size makes it the kept block, and the program's end
//! shrinks half the kept blocks to a normal size before it frees them.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::{Executor, On, Outcome, Request};
use crate::model::Block;
use crate::pattern::{self, Mismatch};
use crate::poison;
use crate::sanitizer;
use crate::violation::{Site, Violation};

/// Most huge requests (over [`crate::edges::MAX_BLOCK`]) one program
/// makes: the block it keeps, and a realloc of it.
const MAX_HUGE: usize = 2;
/// The head, the tail and one window of a huge block are touched: one
/// page each.
pub(super) const PAGE: usize = 4096;
/// Largest zeroed huge request: an allocator that zeroes by hand (Rust's
/// default `alloc_zeroed` does) writes this much at most, a few dozen
/// milliseconds, and maps no more than a program's own blocks may.
const ZEROED_HUGE_MAX: usize = 256 << 20;
/// Largest copy a realloc of the kept huge block may make (the smaller of
/// its two sizes): an allocator may copy every byte, which makes them
/// resident. A second huge request past it is a fresh block, freed at
/// once.
const HUGE_COPY_MAX: usize = 128 << 20;
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
pub(super) fn spend(clock: Instant) {
    let took = clock.elapsed().as_nanos() as u64;
    huge_clock().1.fetch_add(took, Ordering::Relaxed);
}

fn huge_clock() -> &'static (Instant, AtomicU64) {
    static CLOCK: OnceLock<(Instant, AtomicU64)> = OnceLock::new();
    CLOCK.get_or_init(|| (Instant::now(), AtomicU64::new(0)))
}

/// The huge requests a program has made, held to [`MAX_HUGE`] and to the
/// process's time budget under ASan, and the huge block it keeps.
#[derive(Default)]
pub(super) struct HugeBudget {
    /// Huge requests made so far.
    requests: usize,
    /// The program's huge block, live until its realloc or the program's
    /// end (outside the shadow: its bytes are no program's budget); its
    /// `extent` is the bytes its pages were laid over.
    pub(super) kept: Option<Block>,
}

impl HugeBudget {
    /// Whether a huge request of `size` bytes (`zeroed`) may run now;
    /// counts it when it may.
    pub(super) fn admit(&mut self, size: usize, zeroed: bool) -> bool {
        let asan = poison::active();
        let unaffordable = asan && (size > HUGE_UNDER_ASAN || !huge_budget_left());
        if (zeroed && size > ZEROED_HUGE_MAX) || unaffordable || self.requests >= MAX_HUGE {
            return false;
        }
        self.requests += 1;
        true
    }
}

impl Executor {
    /// A request between [`crate::edges::MAX_BLOCK`] and the impossible
    /// sizes: it may fail cleanly; if it succeeds, the block is aligned,
    /// has at least `size` usable bytes, overlaps no live block, and its
    /// head, its tail and a page the seed picks read zero (a zeroed
    /// request), then take the pattern and read it back. Only those pages
    /// are touched. The program's first huge block of the main thread, in
    /// no heap, is kept; the next such plain request reallocates it
    /// ([`Executor::huge_realloc`]); any other is freed at once. Zeroed
    /// huge requests over [`ZEROED_HUGE_MAX`] are skipped: an allocator
    /// may zero gigabytes by hand, which no run can afford.
    pub(super) fn huge(&mut self, r: Request, on: On) -> Outcome {
        let (size, align, zeroed, heap) = (r.size, r.align, r.zeroed, r.heap);
        if !self.huge.admit(size, zeroed) {
            return Outcome::Skipped;
        }
        let clock = Instant::now();
        // Drawn whatever the answer, so the two sides of a differential
        // run stay in step when only one serves the request.
        let seed = self.seeds.next();
        let keeps = heap.is_none() && matches!(on, On::Main);
        let affordable = |kept: &Block| kept.size.min(size) <= HUGE_COPY_MAX;
        if let (Some(kept), true, false) = (self.huge.kept.filter(affordable), keeps, zeroed) {
            let outcome = self.huge_realloc(kept, size);
            spend(clock);
            return outcome;
        }
        let p = self.alloc_call(r, on);
        if p == 0 {
            spend(clock);
            return Outcome::Failed;
        }
        let mut block = Block {
            ptr: p,
            size,
            align,
            usable: size,
            extent: 0,
            seed,
            heap,
            written: None,
        };
        if self.checked {
            // Freed unchecked by `Drop` if a violation ends the program.
            self.untracked.hold(block);
            block.extent = self.touch_huge(&block, zeroed);
            self.untracked.let_go();
        }
        match keeps && self.huge.kept.is_none() {
            true => self.huge.kept = Some(block),
            false => self.free_call(block, on),
        }
        spend(clock);
        Outcome::Done
    }

    /// Reallocates the kept huge block to `size` bytes with its own
    /// alignment: its pages are checked first (no call since wrote into
    /// them), the pages of it the new block keeps must still hold them,
    /// and the new block is checked as a fresh huge one and kept. A
    /// refusal leaves the old block kept.
    fn huge_realloc(&mut self, old: Block, size: usize) -> Outcome {
        self.guard
            .set_site(Site::new("realloc", old.size, old.align));
        if self.checked {
            self.check_huge_pages(&old, "before its realloc");
        }
        let q = self.realloc_call(&old, size);
        if q == 0 {
            return Outcome::Failed;
        }
        self.huge.kept = None;
        self.keep_realloc(&old, q, size, |s| s.check_kept_pages(&old, q, size));
        Outcome::Done
    }

    /// Keeps `old`'s realloc to `size` bytes at `q` as the program's huge
    /// block: `moved` checks what the realloc had to carry over, then the
    /// new block is checked as a fresh huge one.
    fn keep_realloc(&mut self, old: &Block, q: usize, size: usize, moved: impl FnOnce(&Self)) {
        let mut new = Block {
            ptr: q,
            size,
            usable: size,
            extent: 0,
            written: None,
            ..*old
        };
        if self.checked {
            self.untracked.hold(new);
            moved(self);
            new.extent = self.touch_huge(&new, false);
            self.untracked.let_go();
        }
        self.huge.kept = Some(new);
    }

    /// Reallocates block `b` (live, forgotten by the caller once this
    /// returns non-null) to `size` bytes with its alignment, at site
    /// `realloc`: the new address, or 0 for a refusal.
    fn realloc_call(&mut self, b: &Block, size: usize) -> usize {
        self.guard.set_site(Site::new("realloc", b.size, b.align));
        let p = b.ptr as *mut u8;
        sanitizer::given(b.ptr, || {
            // SAFETY: callers pass a live block with its tracked size and alignment, and
            // forget it once the realloc succeeded.
            self.guard
                .guarded(|| unsafe { self.alloc.realloc(p, b.size, b.align, size) })
        }) as usize
    }

    /// Ends the program unless the pages of huge block `old` that lie in
    /// the first `size` bytes of its realloc at `q` still hold them.
    fn check_kept_pages(&self, old: &Block, q: usize, size: usize) {
        let kept = huge_pages(old.extent, old.seed)
            .into_iter()
            .filter(|&(_, to)| to <= size)
            // SAFETY: each page lies in the first `size` bytes of the block the realloc
            // returned for `size` bytes.
            .find_map(|(from, to)| unsafe {
                pattern::check_range(q as *const u8, from, to, old.seed)
            });
        if let Some(mismatch) = kept {
            self.prefix_lost(old, q, size, mismatch);
        }
    }

    /// Ends the program: the realloc of `old` to `size` bytes at `q` lost
    /// what `mismatch` says.
    fn prefix_lost(&self, old: &Block, q: usize, size: usize, mismatch: Mismatch) -> ! {
        self.guard.fail(Violation::ReallocPrefix {
            old: old.ptr,
            new: q,
            old_size: old.size,
            new_size: size,
            mismatch,
        })
    }

    /// Reallocates normal block `i` to a huge `size` (a plain realloc on
    /// the main thread, of a block in no heap, while no huge block is
    /// kept): every byte of the block must have moved, and the new block
    /// is checked as a fresh huge one and kept. A refusal is fair and
    /// leaves the block as it was.
    pub(super) fn realloc_to_huge(&mut self, i: usize, size: usize) -> Outcome {
        let b = self.shadow.blocks()[i];
        if !self.huge.admit(size, false) {
            return Outcome::Skipped;
        }
        let clock = Instant::now();
        if self.checked {
            self.guard.verify(&b, "before realloc");
        }
        let q = self.realloc_call(&b, size);
        if q == 0 {
            if self.checked {
                self.guard.verify_after_call(&b, "after a failed realloc");
            }
            spend(clock);
            return Outcome::Failed;
        }
        let old = self.shadow.remove(i);
        if q != b.ptr {
            self.guard.given_back(&b, "realloc");
        }
        self.keep_realloc(&old, q, size, |s| {
            // SAFETY: reads the first `old.size` bytes of the new block, which has `size`
            // (larger) bytes.
            let moved = unsafe { pattern::check(q as *const u8, old.extent, old.size, old.seed) };
            if let Some(mismatch) = moved {
                s.prefix_lost(&old, q, size, mismatch);
            }
        });
        spend(clock);
        Outcome::Done
    }

    /// Reallocates the kept huge block `b` down to a normal size (one to
    /// four pages, as its seed picks) before the program's end frees it:
    /// the pages of it the new block keeps must still hold their pattern,
    /// and the new block must be aligned, usable for its size and apart
    /// from every live block. Returns the block to free (the old one
    /// when the realloc was refused, which is fair).
    fn shrink_kept_huge(&mut self, b: Block) -> Block {
        let size = PAGE * (1 + (b.seed >> 1) as usize % 4);
        // The caller frees what this returns, never `b` once this succeeded.
        let q = self.realloc_call(&b, size);
        if q == 0 {
            return b;
        }
        self.huge.kept = None;
        let new = Block {
            ptr: q,
            size,
            usable: size,
            extent: size,
            ..b
        };
        self.untracked.hold(new);
        self.check_kept_pages(&b, q, size);
        if !q.is_multiple_of(b.align) {
            self.guard.flag(
                self.guard
                    .misaligned(q, size, b.align, self.shadow.blocks()),
            );
        }
        let claimed = sanitizer::given(q, || {
            // SAFETY: `q` is the block the realloc just returned for `size` bytes.
            self.guard
                .guarded(|| unsafe { self.alloc.usable_size(q as *mut u8, size, b.align) })
        });
        self.guard.checked_usable(q, size, claimed, None);
        if let Some(other) = self.shadow.overlapping(q, q + size) {
            self.guard.overlap(new, other);
        }
        self.untracked.let_go();
        new
    }

    /// Checks the kept huge block's pages still hold their pattern.
    fn check_huge_pages(&self, b: &Block, when: &'static str) {
        let changed = huge_pages(b.extent, b.seed)
            .into_iter()
            // SAFETY: `b` is the kept huge block, live; its pages lie in its first `extent`
            // bytes, which `touch_huge` checked it holds.
            .find_map(|(from, to)| unsafe {
                pattern::check_range(b.ptr as *const u8, from, to, b.seed)
            });
        if let Some(mismatch) = changed {
            self.guard.fail(Violation::Contents {
                ptr: b.ptr,
                size: b.size,
                mismatch,
                when,
                by_call: false,
            });
        }
    }

    /// Checks and frees the kept huge block at the program's end.
    pub(super) fn free_kept_huge(&mut self) {
        let Some(b) = self.huge.kept else {
            return;
        };
        self.guard.set_site(Site::new("free", b.size, b.align));
        if self.checked {
            self.check_huge_pages(&b, "by the program's other calls");
        }
        // Half the programs, as the block's seed picks, shrink it to a
        // normal size first (the realloc from a huge size).
        let b = match self.checked && b.seed & 1 == 1 {
            true => self.shrink_kept_huge(b),
            false => b,
        };
        self.huge.kept = None;
        self.guard.set_site(Site::new("free", b.size, b.align));
        self.free_call(b, On::Main);
    }

    /// Whether `[p, p + len)` meets the kept huge block: a block handed
    /// out inside it is an overlap, as with any live block.
    pub(super) fn in_kept_huge(&self, p: usize, len: usize) -> Option<Block> {
        self.huge
            .kept
            .filter(|h| p < h.ptr + h.size && h.ptr < p + len.max(1))
    }

    /// Checks a new huge block and lays its pattern over its three
    /// pages; returns the bytes they were laid over.
    fn touch_huge(&mut self, b: &Block, zeroed: bool) -> usize {
        if !b.ptr.is_multiple_of(b.align) {
            self.guard.flag(
                self.guard
                    .misaligned(b.ptr, b.size, b.align, self.shadow.blocks()),
            );
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
        if let Some(other) = self.in_kept_huge(b.ptr, len) {
            self.guard.overlap(*b, other);
        }
        let pages = huge_pages(len, b.seed);
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
        len
    }
}

/// The pages of a huge block that are touched: its head, its tail and one
/// between that `seed` picks, within its first `len` bytes.
fn huge_pages(len: usize, seed: u64) -> [(usize, usize); 3] {
    let head = (0, PAGE.min(len));
    let tail = (len.saturating_sub(PAGE).max(head.1), len);
    let room = tail.0 - head.1;
    let at = head.1 + (seed as usize % room.max(1)) / PAGE * PAGE;
    let window = (at, (at + PAGE).min(tail.0));
    [head, window, tail]
}
