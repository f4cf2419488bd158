//! A block's life under the shadow: allocated (its address, alignment and
//! contents checked as it is adopted), verified, freed, reallocated
//! ([`super::realloc`]), its usable size probed; and the whole heap
//! validated now and then.

use super::{Executor, On, Origin, Outcome};
use crate::allocator::HeapId;
use crate::edges::{IMPOSSIBLE_FROM, MAX_BLOCK};
use crate::guard;
use crate::model::{Block, ShadowHeap};
use crate::pattern;
use crate::sanitizer;
use crate::violation::{Report, Site, Violation};

/// A request for a fresh block: its size and alignment, whether it is
/// zeroed, and the heap it is asked in (`None`: no heap).
#[derive(Clone, Copy, Debug)]
pub(super) struct Request {
    pub size: usize,
    pub align: usize,
    pub zeroed: bool,
    pub heap: Option<HeapId>,
}

impl Request {
    pub(super) fn new(size: usize, align: usize, zeroed: bool, heap: Option<HeapId>) -> Request {
        Request {
            size,
            align,
            zeroed,
            heap,
        }
    }

    /// A plain request: not zeroed, in no heap.
    pub(super) fn plain(size: usize, align: usize) -> Request {
        Request::new(size, align, false, None)
    }
}

impl Executor {
    /// Keeps block `p` unfreed for good: one the harness cannot say what
    /// it is (an impossible request's). Neither
    /// LeakSanitizer nor the checks of what the allocator holds at the
    /// program's end (capacity, bytes in use) count it a second time.
    pub(super) fn never_freed(&mut self, p: usize) {
        sanitizer::never_freed(p);
        self.arena.keeps_unfreed();
        self.kept.keeps_unfreed();
        self.walk.keeps_unfreed();
    }

    pub(super) fn alloc_block(&mut self, r: Request, on: On) -> Outcome {
        self.alloc_within(r, on, ShadowHeap::fits)
    }

    /// [`Executor::alloc_block`], skipped unless the shadow `fits` one
    /// more block of `size` (a bulk allocation's caps are higher).
    pub(super) fn alloc_within(
        &mut self,
        r: Request,
        on: On,
        fits: fn(&ShadowHeap, usize) -> bool,
    ) -> Outcome {
        let (size, align) = (r.size, r.align);
        let impossible = size >= IMPOSSIBLE_FROM;
        if size > MAX_BLOCK && !impossible && align <= self.alloc.max_align() {
            return self.huge(r, on);
        }
        let room = fits(&self.shadow, size);
        if align > self.alloc.max_align() || (!impossible && !room) {
            return Outcome::Skipped;
        }
        let p = self.alloc_call(r, on);
        self.adopt_fresh(p, r)
    }

    /// Asks the allocator for a block (in the request's heap, if it names
    /// one, on `on`).
    pub(super) fn alloc_call(&mut self, r: Request, on: On) -> usize {
        let (size, align, zeroed, heap) = (r.size, r.align, r.zeroed, r.heap);
        let api = match (heap.is_some() && self.heaps.are_own(), zeroed) {
            (true, false) => "heap-alloc",
            (true, true) => "heap-alloc-zeroed",
            (false, false) => "alloc",
            (false, true) => "alloc-zeroed",
        };
        self.guard.set_site(Site::new(api, size, align));
        let must_fail = self.impossible(size, align);
        sanitizer::making(|| match heap {
            None => self.workers.call(&self.guard, self.alloc, on, move |a| {
                // SAFETY: no block is passed; `align <= max_align()` (`alloc_block` skips larger)
                // and is a power of two, as ops draw it (`edges::size_align`).
                sanitizer::must_fail(must_fail, || unsafe {
                    a.alloc(size, align, zeroed) as usize
                })
            }),
            Some(h) => sanitizer::must_fail(must_fail, || {
                // SAFETY: as above for `align`; `h` comes from `heap_ids`, so the heap is live.
                self.guard.guarded(|| unsafe {
                    self.heaps.api().alloc_in(h, size, align, zeroed) as usize
                })
            }),
        })
    }

    /// What a call about to be made is if it succeeds, when its request
    /// has to fail (`violation`: an `impossible-success` or
    /// `calloc-overflow` with no block yet) and the checks are on: a
    /// sanitizer report inside the call is that finding
    /// ([`crate::sanitizer::must_fail`]), its path taken then.
    pub(super) fn must_fail(&self, violation: Violation) -> Option<Report> {
        self.checked
            .then(|| self.guard.report_with(violation, Vec::new()))
    }

    /// The `impossible-success` a request for `size` bytes would be, when
    /// it has to fail ([`Executor::must_fail`]).
    pub(super) fn impossible(&self, size: usize, align: usize) -> Option<Report> {
        (size >= IMPOSSIBLE_FROM)
            .then(|| {
                self.must_fail(Violation::ImpossibleSuccess {
                    size,
                    align,
                    ptr: 0,
                })
            })
            .flatten()
    }

    /// Checks what a request for a fresh block returned (`p`, or null)
    /// and tracks the block.
    pub(super) fn adopt_fresh(&mut self, p: usize, r: Request) -> Outcome {
        let (size, align, zeroed, heap) = (r.size, r.align, r.zeroed, r.heap);
        let impossible = size >= IMPOSSIBLE_FROM;
        if impossible {
            if p != 0 && self.checked {
                self.never_freed(p);
                self.guard.flag(Violation::ImpossibleSuccess {
                    size,
                    align,
                    ptr: p,
                });
            }
            return Outcome::Failed;
        }
        if p == 0 {
            if size != 0 && self.checked && !self.refused_fairly(size, align) {
                self.guard.flag(Violation::Null { size, align });
            }
            return Outcome::Failed;
        }
        self.adopt(p, size, align, heap, Origin::Fresh { zeroed })
    }

    /// Checks a block the allocator just handed out and starts tracking it.
    pub(super) fn adopt(
        &mut self,
        p: usize,
        size: usize,
        align: usize,
        heap: Option<HeapId>,
        origin: Origin,
    ) -> Outcome {
        let block = Block {
            heap,
            ..Block::fresh(p, size, align)
        };
        self.untracked.hold(block);
        if !self.checked {
            return Outcome::Live(self.shadow.insert(block, false).expect("unchecked insert"));
        }
        let block = self.measure(block, &origin);
        let index = self.track(block);
        if self.check_arrived(&block, size, origin) {
            let (base, reach) = (p as *mut u8, block.extent);
            // SAFETY: the `reach` bytes at `base` are the new block's, and the shadow just took it
            // without overlap (`overlap` does not return), so no live block is written.
            unsafe { pattern::fill(base, reach, block.seed) };
        }
        self.fresh_slack(index);
        Outcome::Live(index)
    }

    /// Checks the address and usable size of `block` (as
    /// [`Block::fresh`] makes it, in its heap), which came by `origin`;
    /// returns it as the program goes on with it, its usable size, extent,
    /// written end and seed set.
    fn measure(&mut self, mut block: Block, origin: &Origin) -> Block {
        let (p, size, align, heap) = (block.ptr, block.size, block.align, block.heap);
        // Taken before any check, which would handle it as it is.
        let made = sanitizer::take_made(p);
        // A block that stayed where it was (an in-place realloc or resize)
        // kept its alignment: a misaligned one was flagged when it came, by
        // the call that placed it.
        let stayed =
            matches!(origin, Origin::Realloc { old, .. } if old.ptr == p && old.align == align);
        if !stayed && !p.is_multiple_of(align) {
            self.guard
                .flag(self.guard.misaligned(p, size, align, self.shadow.blocks()));
        }
        block.usable = sanitizer::given(p, || {
            // SAFETY: `p` is the non-null block the allocator just returned for `size` and
            // `align`, not yet freed nor handed to another call.
            self.guard
                .queried(|| unsafe { self.alloc.usable_size(p as *mut u8, size, align) })
        });
        if let (Origin::Fresh { .. } | Origin::Batched { .. }, None) = (origin, heap) {
            self.check_good_size(&block);
        }
        let usable = self.guard.checked_usable(p, size, block.usable, None);
        // The program goes on with the block as it is: its first `usable`
        // bytes, never past what was asked for. A block cut short (flagged
        // `usable-size`) is held as if its size had been asked for, so no
        // later call is asked to copy or free bytes that are not there: a
        // realloc copying the size asked for out of it is that one bug,
        // not a second group.
        block.usable = usable;
        block.extent = size.min(usable);
        if (1..size).contains(&usable) {
            block.size = usable;
        }
        block.written = zeroed_family(origin, p, size, usable).map(|w| w.max(block.extent));
        if let Some(report) = made {
            self.guard.made_short(p, size, usable, &report);
        }
        block.seed = match origin {
            Origin::Raced { seed } | Origin::Batched { seed } => *seed,
            _ => self.seeds.next(),
        };
        block
    }

    /// Tracks `block`, which must overlap no live block, the kept huge
    /// block, nor a block the allocator's hook holds; returns its index in
    /// the shadow.
    fn track(&mut self, block: Block) -> usize {
        let p = block.ptr;
        let index = match self.shadow.insert(block, true) {
            Ok(i) => {
                self.untracked.let_go();
                i
            }
            Err(other) => self.guard.overlap(block, other),
        };
        if let Some(huge) = self.in_kept_huge(p, block.end() - p) {
            self.guard.overlap(block, huge);
        }
        if let Some(held) = self
            .hooked
            .then(|| super::hooked::holding(p, block.end()))
            .flatten()
        {
            self.guard.overlap(block, held);
        }
        index
    }

    /// Checks what the first `extent` bytes of `block`, just tracked and
    /// asked for `size` bytes, hold by where it came from (`origin`);
    /// returns whether it is still to be filled with its pattern (a raced
    /// or batched block holds it already).
    fn check_arrived(&self, block: &Block, size: usize, origin: Origin) -> bool {
        let (p, reach) = (block.ptr, block.extent);
        let base = p as *mut u8;
        match origin {
            Origin::Fresh { zeroed: true } => {
                // SAFETY: `base` is the block just returned for `size` bytes, and `reach <= size`
                // (also capped by ASan's reach in `checked_usable`): it reads `reach` bytes.
                if let Some(mismatch) = unsafe { pattern::check_zero(base, reach, 0, block.seed) } {
                    self.guard.flag(Violation::Zeroed {
                        ptr: p,
                        size,
                        mismatch,
                    });
                }
            }
            Origin::Fresh { zeroed: false } => {}
            Origin::Raced { seed } | Origin::Batched { seed } => {
                // Filled on the thread that got it, right after its call:
                // in a race section another thread that got the same
                // memory wrote over it; in a contention op's owner job, a
                // later call of the op wrote into it.
                let (when, by_call) = match origin {
                    Origin::Raced { .. } => ("during a race section", false),
                    _ => ("while its thread allocated the op's next blocks", true),
                };
                // SAFETY: as above: the `reach` bytes at `base` are the new block's.
                if let Some(mismatch) = unsafe { pattern::check(base, reach, reach, seed) } {
                    self.guard.fail(Violation::Contents {
                        ptr: p,
                        size,
                        mismatch,
                        when,
                        by_call,
                    });
                }
                return false;
            }
            Origin::Realloc { old, zero_from } => {
                self.check_realloc_contents(block, size, old, zero_from)
            }
        }
        true
    }

    /// Checks the first `extent` bytes of `block`, which a realloc of `old`
    /// to `size` bytes returned: they start with `old`'s bytes, and read
    /// zero from `zero_from` on (a zeroed realloc's).
    fn check_realloc_contents(
        &self,
        block: &Block,
        size: usize,
        old: Block,
        zero_from: Option<usize>,
    ) {
        let (p, reach) = (block.ptr, block.extent);
        let base = p as *mut u8;
        if let Some(mismatch) =
            // SAFETY: reads at most `old.size.min(reach)` bytes, within the new
            // block's `reach`.
            unsafe { pattern::check(base, old.extent, old.size.min(reach), old.seed) }
        {
            self.guard.fail(Violation::ReallocPrefix {
                old: old.ptr,
                new: p,
                old_size: old.size,
                new_size: size,
                mismatch,
            });
        }
        let dirty = zero_from
            // SAFETY: reads within the first `reach` bytes at `base`, the new block's.
            .and_then(|from| unsafe { pattern::check_zero(base, reach, from, block.seed) });
        if let Some(mismatch) = dirty {
            self.guard.flag(Violation::Zeroed {
                ptr: p,
                size,
                mismatch,
            });
        }
    }

    pub(super) fn free_block(&mut self, i: usize, on: On) -> Outcome {
        let b = self.shadow.blocks()[i];
        if self.checked {
            self.guard.verify(&b, "before free");
        }
        self.shadow.remove(i);
        self.free_call(b, on);
        Outcome::Done
    }

    /// Frees a block no longer tracked, through its heap if it has one.
    /// The free is marked as given the block on the thread that makes it
    /// ([`sanitizer::given`]), as every call given a block the harness
    /// holds is.
    pub(super) fn free_call(&mut self, b: Block, on: On) {
        match b.heap {
            Some(h) => {
                self.guard.set_site(Site::new(
                    self.heaps.api_name("heap-free", "free"),
                    b.size,
                    b.align,
                ));
                sanitizer::given(b.ptr, || {
                    // SAFETY: callers pass a block no longer tracked (so freed once), with
                    // its tracked size and alignment; `h` is live, as a deleted heap's
                    // blocks have `heap: None`.
                    self.guard.guarded(|| unsafe {
                        self.heaps
                            .api()
                            .free_in(h, b.ptr as *mut u8, b.size, b.align)
                    })
                })
            }
            None => {
                self.guard.set_site(Site::new("free", b.size, b.align));
                self.workers.call(&self.guard, self.alloc, on, move |a| {
                    // SAFETY: as above: `b` is a block of `a`, untracked now, with its
                    // tracked size and alignment.
                    sanitizer::given(b.ptr, || unsafe {
                        a.free(b.ptr as *mut u8, b.size, b.align)
                    });
                    0
                });
            }
        }
        self.guard.given_back(&b, "free");
    }

    /// Hands a block to a worker thread, which checks its contents there.
    pub(super) fn worker_check(&mut self, i: usize, worker: usize) -> Outcome {
        if !self.checked {
            return Outcome::Skipped;
        }
        let b = self.shadow.blocks()[i];
        self.guard.set_site(Site::new("check", b.size, b.align));
        let bad = self.workers.pool().run(worker, move || {
            // SAFETY: `b` is a live block of the shadow, and the main thread
            // waits for the worker's answer before it touches the block again.
            unsafe { super::checks::contents(&b) }.is_some()
        });
        if bad {
            self.guard.verify(&b, "when checked on another thread");
        }
        Outcome::Live(i)
    }

    pub(super) fn validate(&mut self) {
        self.guard.set_site(Site::bare("validate"));
        if let Err(detail) = self
            .guard
            .asked(|| self.alloc.validate(&self.shadow.live()))
        {
            self.guard.fail(Violation::Validator { detail });
        }
    }

    /// Frees a block on the main thread without checking it (a panic in
    /// the allocator is ignored: the program is already over).
    pub(super) fn release(&self, b: Block) {
        let free = || match b.heap {
            // SAFETY: `b` was taken out of the shadow by `Drop` (which never releases a block
            // overlapping a live one), so it is freed once; `h` is deleted only after.
            Some(h) => unsafe {
                self.heaps
                    .api()
                    .free_in(h, b.ptr as *mut u8, b.size, b.align)
            },
            // SAFETY: as above, `b` is a block of the allocator, freed once, with its tracked size
            // and alignment.
            None => unsafe { self.alloc.free(b.ptr as *mut u8, b.size, b.align) },
        };
        let _ = sanitizer::given(b.ptr, || guard::call(free));
    }
}

/// Whether a block of `size` bytes that came by `origin` to `p`, with
/// `usable` bytes, is of the zeroed family ([`ZeroedFrom::Written`]), and
/// if so, the end of what the program wrote in it before: allocated
/// zeroed (nothing yet), or a family block resized by a zeroed realloc
/// that grew it (the allocator zeroed what is new) or that kept it where
/// it was, in its usable size. A block moved by a shrink, or grown by any
/// other call, may hold stale bytes past its request.
fn zeroed_family(origin: &Origin, p: usize, size: usize, usable: usize) -> Option<usize> {
    match origin {
        // A zero-size block has no bytes to zero (C leaves them undefined).
        Origin::Fresh { zeroed: true } if size > 0 => Some(0),
        Origin::Realloc { old, zero_from } => {
            let stayed = old.ptr == p && usable <= old.usable;
            let grew_zeroed = zero_from.is_some() && size > old.size;
            old.written.filter(|_| stayed || grew_zeroed)
        }
        _ => None,
    }
}
