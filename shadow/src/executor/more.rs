//! The ops beyond alloc / realloc / free: calloc, the allocator's optional
//! calls ([`crate::allocator::Extras`]), bulk ops that fill pages and
//! slabs. Each op is skipped where the allocator lacks its call (huge
//! requests: [`super::huge`]).

use super::{Executor, On, Origin, Outcome, Request};
use crate::allocator::{Extras, GoodSize, InPlace, PurgeDelay};
use crate::edges::IMPOSSIBLE_FROM;
use crate::model::{Block, ShadowHeap};
use crate::op::{BulkOrder, NewSize};
use crate::sanitizer;
use crate::violation::{Site, Violation};

/// Most bytes one bulk allocation asks for: enough to fill a page or a
/// slab of any small or medium class several times over (mimalloc's small
/// pages are 64 KiB, its medium ones 512 KiB), while a bulk of large
/// blocks stays a few mappings.
const BULK_BYTES: usize = 1 << 20;

/// The alignment C's `malloc(size)` promises: 16 on x86-64, 8 for blocks
/// of 8 bytes or less (see [`crate::allocator::malloc_serves`]); no more
/// than the allocator's largest, which an embedded heap declares smaller
/// (umm_malloc's blocks are 4-aligned: `max_align = 4`).
fn malloc_align(size: usize, max_align: usize) -> usize {
    let promised = if size > 8 { 16 } else { 8 };
    promised.min(max_align)
}

impl Executor {
    /// [`malloc_align`] of this allocator.
    pub(super) fn malloc_align(&self, size: usize) -> usize {
        malloc_align(size, self.alloc.max_align())
    }

    /// A fresh block's usable size must be what the allocator's good-size
    /// call promises for its request, where it promises one: exactly, or
    /// an estimate no smaller than the request ([`GoodSize`]).
    pub(super) fn check_good_size(&self, b: &Block) {
        let Some(extras) = self.alloc.extras() else {
            return;
        };
        let broken = match self.guard.queried(|| extras.good_size(b.size, b.align)) {
            Some(GoodSize::Exact(good)) => (good != b.usable).then_some(good),
            Some(GoodSize::AtLeastAsked(good)) => (good < b.size).then_some(good),
            None => None,
        };
        if let Some(good) = broken {
            self.guard.flag(Violation::GoodSize {
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
        let mut outcome = Outcome::Skipped;
        for _ in 0..count {
            match self.alloc_within(Request::plain(size, align), On::Main, ShadowHeap::fits_bulk) {
                Outcome::Live(_) => outcome = Outcome::Done,
                other => {
                    if outcome == Outcome::Skipped {
                        outcome = other;
                    }
                    break;
                }
            }
        }
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
                self.guard.verify(&self.shadow.blocks()[i], "before free");
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
            self.guard.verify(&b, "before an in-place resize");
        }
        self.guard
            .set_site(Site::new("resize-in-place", b.size, b.align));
        let p = b.ptr as *mut u8;
        // SAFETY: `b` is live in the shadow (verified above), passed with its tracked size
        // and alignment; a heap block's heap `h` is live.
        let result = self.guard.guarded(|| unsafe {
            match (b.heap, extras) {
                (Some(h), _) => self
                    .heaps
                    .api()
                    .resize_in_place_in(h, p, b.resized(new), extra),
                (None, Some(x)) => x.resize_in_place(p, b.resized(new), extra),
                (None, None) => unreachable!("skipped above"),
            }
        });
        match result {
            None => Outcome::Skipped,
            Some(InPlace::Unchanged) => {
                if self.checked {
                    self.usable_unchanged(&b, "changed by an in-place resize that failed");
                    self.guard
                        .verify_after_call(&b, "after a failed in-place resize");
                }
                Outcome::Failed
            }
            Some(InPlace::Resized { ptr, owned }) => {
                if self.checked {
                    self.resized_in_place(&b, new, ptr, owned);
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

    /// Asks live block `b`'s usable size and flags one other than it came
    /// with; `why` the call that changed it.
    pub(super) fn usable_unchanged(&self, b: &Block, why: &'static str) {
        let p = b.ptr as *mut u8;
        // SAFETY: `b` is live (a failed call left it as it was), passed with its tracked
        // size and alignment.
        let usable = self
            .guard
            .queried(|| unsafe { self.alloc.usable_size(p, b.size, b.align) });
        self.same_usable(b, usable, why);
    }

    /// Flags `usable`, an answer about live block `b`, when it is not the
    /// usable size the block came with.
    pub(super) fn same_usable(&self, b: &Block, usable: usize, why: &'static str) {
        if usable != b.usable {
            self.guard.flag(Violation::UsableSize {
                ptr: b.ptr,
                size: b.size,
                usable,
                why,
            });
        }
    }

    /// Fails an in-place resize of `b` to `new` bytes that says it left
    /// the block at `ptr` holding `owned`, when it moved it or gave fewer.
    pub(super) fn resized_in_place(&self, b: &Block, new: usize, ptr: usize, owned: usize) {
        if ptr != b.ptr || owned < new {
            self.guard.fail(Violation::Realloc {
                ptr: b.ptr,
                new_size: new,
                why: if ptr != b.ptr {
                    "an in-place resize moved the block"
                } else {
                    "an in-place resize gave fewer bytes than asked"
                },
            });
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
            self.guard.verify(&b, "before free");
        }
        self.guard
            .set_site(Site::new("free-sized", b.size, b.align));
        let p = b.ptr as *mut u8;
        let freed = crate::sanitizer::given(b.ptr, || {
            // SAFETY: `b` is live in the shadow (verified above), passed with its tracked size
            // and alignment; it leaves the shadow once freed.
            self.guard.guarded(|| unsafe {
                match (b.heap, extras) {
                    (Some(h), _) => self.heaps.api().free_sized_in(h, p, b.size, b.align),
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

    /// `calloc(count, size)`: a zeroed block of `count * size` bytes, or
    /// a clean failure when the product overflows.
    pub(super) fn calloc(&mut self, count: usize, size: usize) -> Outcome {
        let total = count.checked_mul(size);
        let impossible = total.is_none_or(|n| n >= IMPOSSIBLE_FROM);
        if !impossible && !self.shadow.fits(total.unwrap_or(0)) {
            return Outcome::Skipped;
        }
        self.guard
            .set_site(Site::new("calloc", total.unwrap_or(usize::MAX), 1));
        let must_fail = match total {
            None => self.must_fail(Violation::CallocOverflow {
                count,
                size,
                ptr: 0,
            }),
            Some(n) => self.impossible(n, 1),
        };
        let p = sanitizer::must_fail(must_fail, || {
            sanitizer::making(|| {
                // SAFETY: no block is passed, and calloc's alignment is 1; any `count` and
                // `size` may be asked (an overflow is the allocator's to refuse).
                self.guard
                    .guarded(|| unsafe { self.alloc.calloc(count, size) })
            })
        }) as usize;
        match (total, p) {
            (None, 0) | (Some(0), 0) => Outcome::Failed,
            (None, p) if self.checked => {
                self.guard.flag(Violation::CallocOverflow {
                    count,
                    size,
                    ptr: p,
                });
                // The block is the allocator's, of the size the product
                // wrapped to: given back at once, as a program's failed
                // calloc holds nothing. Kept, each such block would stay
                // for the process's life, and a fixed region would fill
                // over its programs until each one met a heap that the
                // ones before it had shaped.
                // SAFETY: `p` was just returned by this allocator's calloc
                // and is not in the shadow; it is freed once, at calloc's
                // alignment, with the size its overflowing product wrapped to.
                self.guard.guarded(|| unsafe {
                    self.alloc.free(p as *mut u8, count.wrapping_mul(size), 1)
                });
                Outcome::Failed
            }
            (Some(n), p) if impossible && p != 0 && self.checked => {
                self.never_freed(p);
                self.guard.flag(Violation::ImpossibleSuccess {
                    size: n,
                    align: 1,
                    ptr: p,
                });
                Outcome::Failed
            }
            (Some(n), 0) if !impossible && self.checked => {
                if !self.refused_fairly(n, 1) {
                    self.guard.flag(Violation::Null { size: n, align: 1 });
                }
                Outcome::Failed
            }
            (Some(n), p) if !impossible && p != 0 => {
                self.adopt(p, n, 1, None, Origin::Fresh { zeroed: true })
            }
            _ => Outcome::Failed,
        }
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
        let align = self.malloc_align(size);
        self.guard.set_site(Site::new("realloc-null", size, align));
        let must_fail = self.impossible(size, align);
        match sanitizer::must_fail(must_fail, || {
            // SAFETY: no block is passed: `realloc(NULL, size)` is a fresh request.
            sanitizer::making(|| self.guard.guarded(|| unsafe { extras.realloc_null(size) }))
        }) {
            Some(p) => self.adopt_fresh(p as usize, Request::plain(size, align)),
            None => Outcome::Skipped,
        }
    }

    /// `free(NULL)` must do nothing: a crash or a panic is a finding.
    pub(super) fn free_null(&mut self) -> Outcome {
        let Some(extras) = self.alloc.extras() else {
            return Outcome::Skipped;
        };
        self.guard.set_site(Site::bare("free-null"));
        // SAFETY: no block is passed: `free(NULL)` must do nothing.
        match self.guard.guarded(|| unsafe { extras.free_null() }) {
            true => Outcome::Done,
            false => Outcome::Skipped,
        }
    }

    /// After a forced purge with no delay: the whole free pages the
    /// allocator counts resident must be none ([`Violation::PurgeKept`]).
    fn check_purged(&self, extras: &dyn Extras) {
        let live: Vec<(usize, usize)> = self
            .shadow
            .blocks()
            .iter()
            .map(|b| (b.ptr, b.size))
            .collect();
        let kept = self.guard.guarded(|| extras.free_pages_kept(&live));
        if let Some(bytes) = kept.filter(|&b| b > 0) {
            self.guard.flag(Violation::PurgeKept { bytes });
        }
    }

    /// Sets the purge delay and purges; every live block must be intact,
    /// its pages too once the kernel reclaims what was released lazily.
    pub(super) fn purge(&mut self, delay: PurgeDelay, force: bool) -> Outcome {
        let Some(extras) = self.alloc.extras() else {
            return Outcome::Skipped;
        };
        self.guard.set_site(Site::bare("purge"));
        // No worker thread may end while the purge is made and counted: a
        // thread's exit gives its cache back as free pages (a test process
        // runs other programs' workers beside this one).
        self.workers.pool();
        if !self.guard.guarded(|| extras.purge(delay, force)) {
            return Outcome::Skipped;
        }
        if self.checked {
            for b in self.shadow.blocks() {
                self.guard.verify_after_call(b, "after a purge");
            }
            self.check_released("after a purge", true);
            if delay == PurgeDelay::Immediate && force {
                self.check_purged(extras);
            }
        }
        self.purged = true;
        Outcome::Done
    }
}
