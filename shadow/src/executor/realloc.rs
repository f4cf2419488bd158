//! A block resized by realloc under the shadow: the call its op names,
//! made on its thread or in its heap, then what came back checked: a
//! failure, a free, or a block adopted in the old one's place.

use super::{Executor, On, Origin, Outcome, ReallocCall};
use crate::allocator::{Extras, ReallocToZero, ZeroedFrom};
use crate::edges::{IMPOSSIBLE_FROM, MAX_BLOCK};
use crate::model::Block;
use crate::op::NewSize;
use crate::sanitizer;
use crate::violation::{Site, Violation};

/// A realloc of live block `i` (`b`, as the shadow holds it) to `new`
/// bytes, with the realloc `call` names, whose size 0 does what
/// `semantics` says.
#[derive(Clone, Copy)]
struct Resize {
    i: usize,
    b: Block,
    new: usize,
    call: ReallocCall,
    semantics: ReallocToZero,
}

impl Resize {
    /// Whether the new size is one no request can have.
    fn impossible(&self) -> bool {
        self.new >= IMPOSSIBLE_FROM
    }
}

impl Executor {
    /// Resizes block `i` with the realloc `call` names; a call the
    /// allocator does not have, or a size its contract leaves undefined,
    /// is skipped. A plain realloc to a huge size makes the block the
    /// program's kept huge block ([`Executor::realloc_to_huge`]).
    pub(super) fn realloc_block(
        &mut self,
        i: usize,
        to: NewSize,
        on: On,
        call: ReallocCall,
    ) -> Outcome {
        let b = self.shadow.blocks()[i];
        let new = to.resolve(b.size);
        let semantics = match call {
            ReallocCall::Plain => self.alloc.realloc_to_zero(),
            _ => ReallocToZero::Undefined,
        };
        let r = Resize {
            i,
            b,
            new,
            call,
            semantics,
        };
        let impossible = r.impossible();
        let plain_main = call == ReallocCall::Plain && b.heap.is_none() && matches!(on, On::Main);
        if new > MAX_BLOCK && !impossible && plain_main && self.huge.kept.is_none() {
            return self.realloc_to_huge(i, new);
        }
        let extras = self.alloc.extras();
        if (new == 0 && semantics == ReallocToZero::Undefined)
            || (!impossible && !self.shadow.fits_resize(new))
            || (call == ReallocCall::Unaligned && b.heap.is_some())
            || (call != ReallocCall::Plain && b.heap.is_none() && extras.is_none())
        {
            return Outcome::Skipped;
        }
        if self.checked {
            self.guard.verify(&b, "before realloc");
        }
        let Some(q) = self.resize_call(r, on, extras) else {
            return Outcome::Skipped;
        };
        if q == 0 || impossible {
            return self.realloc_gave_no_block(r, q);
        }
        self.adopt_realloced(r, q)
    }

    /// Makes realloc `r` (on `on`, or in the block's heap; `extras`: the
    /// allocator's extra calls) and returns what it returned, `None` when
    /// the heap has no such call.
    fn resize_call(&mut self, r: Resize, on: On, extras: Option<&dyn Extras>) -> Option<usize> {
        let (b, new, call) = (r.b, r.new, r.call);
        let api = match (call, b.heap.is_some() && self.heaps.are_own(), new) {
            (ReallocCall::Zeroed, _, _) => "realloc-zeroed",
            (ReallocCall::Unaligned, _, _) => "realloc-plain",
            (_, _, 0) => "realloc-zero",
            (_, false, _) => "realloc",
            (_, true, _) => "heap-realloc",
        };
        self.guard.set_site(Site::new(api, b.size, b.align));
        let p = b.ptr as *mut u8;
        let must_fail = self.impossible(new, b.align);
        let on_worker = must_fail.clone();
        sanitizer::must_fail(must_fail, || {
            sanitizer::given(b.ptr, || {
                sanitizer::making(|| match (call, b.heap, extras) {
                    // SAFETY: `b` is live in the shadow (verified above), in heap `h`,
                    // which is live, and passed with its tracked size and alignment; it
                    // leaves the shadow after the call.
                    (ReallocCall::Plain, Some(h), _) => Some(self.guard.guarded(|| unsafe {
                        self.heaps.api().realloc_in(h, p, b.resized(new)) as usize
                    })),
                    (ReallocCall::Plain, None, _) => {
                        Some(self.workers.call(&self.guard, self.alloc, on, move |a| {
                            sanitizer::must_fail(on_worker, || {
                                // SAFETY: `b` is live in the shadow, passed with its tracked
                                // size and alignment.
                                sanitizer::given(b.ptr, || unsafe {
                                    a.realloc(b.ptr as *mut u8, b.size, b.align, new) as usize
                                })
                            })
                        }))
                    }
                    (ReallocCall::Zeroed, Some(h), _) => self
                        .guard
                        // SAFETY: `b` is live in the shadow and in heap `h` (live), with
                        // its tracked size and alignment.
                        .guarded(|| unsafe {
                            self.heaps.api().realloc_zeroed_in(h, p, b.resized(new))
                        })
                        .map(|q| q as usize),
                    (ReallocCall::Zeroed, None, Some(x)) => self
                        .guard
                        // SAFETY: `b` is a live default-heap block, with its tracked size
                        // and alignment.
                        .guarded(|| unsafe { x.realloc_zeroed(p, b.resized(new)) })
                        .map(|q| q as usize),
                    (ReallocCall::Unaligned, _, Some(x)) => self
                        .guard
                        // SAFETY: `b` is a live default-heap block (heap blocks are skipped
                        // above), with its tracked size and alignment.
                        .guarded(|| unsafe { x.realloc_plain(p, b.resized(new)) })
                        .map(|q| q as usize),
                    (_, _, None) => unreachable!("skipped above"),
                })
            })
        })
    }

    /// Checks what realloc `r` returned (`q`) when it left the program no
    /// block: null (a failure, which leaves the block as it was, or a
    /// realloc to 0 that freed it), or any answer to a request that had
    /// to fail.
    fn realloc_gave_no_block(&mut self, r: Resize, q: usize) -> Outcome {
        let (i, b, new, semantics) = (r.i, r.b, r.new, r.semantics);
        let impossible = r.impossible();
        if impossible && q != 0 && self.checked {
            // The old block may be gone into it, or kept: neither is
            // used again (nor freed, should the program end at the
            // violation), nor reported as a leak.
            self.never_freed(q);
            self.never_freed(b.ptr);
            self.shadow.remove(i);
            self.guard.flag(Violation::ImpossibleSuccess {
                size: new,
                align: b.align,
                ptr: q,
            });
            return Outcome::Failed;
        }
        // A realloc to 0 that allocates may fail as a request does.
        if new != 0 || (semantics == ReallocToZero::Allocates && self.os_refusing()) {
            // A failed realloc leaves the block as it was.
            if !impossible && self.checked && !self.refused_fairly(new, b.align) {
                self.guard.flag(Violation::Null {
                    size: new,
                    align: b.align,
                });
            }
            if self.checked {
                self.guard.verify_after_call(&b, "after a failed realloc");
            }
            return Outcome::Failed;
        }
        if semantics == ReallocToZero::Allocates && self.checked {
            self.guard.fail(Violation::Realloc {
                ptr: b.ptr,
                new_size: 0,
                why: "returned null, but this API returns a block",
            });
        }
        self.shadow.remove(i);
        Outcome::Done
    }

    /// Tracks `q`, the block realloc `r` returned, in place of the old
    /// one, with the alignment its call keeps and, after a zeroed
    /// realloc, where its bytes must read zero from.
    fn adopt_realloced(&mut self, r: Resize, q: usize) -> Outcome {
        let (b, new) = (r.b, r.new);
        let old = self.shadow.remove(r.i);
        if q != b.ptr {
            self.guard.given_back(&b, "realloc");
        }
        let (align, zero_from) = match r.call {
            ReallocCall::Plain => (b.align, None),
            ReallocCall::Zeroed => {
                let from = match self.alloc.extras().map(|x| x.zeroed_from()) {
                    Some(ZeroedFrom::Request) | None => b.size,
                    Some(ZeroedFrom::Written) => b.written.map_or(b.usable, |w| w.max(b.size)),
                    Some(ZeroedFrom::Usable { .. }) => b.usable,
                };
                (b.align, Some(from))
            }
            ReallocCall::Unaligned => (self.malloc_align(new), None),
        };
        self.adopt(q, new, align, b.heap, Origin::Realloc { old, zero_from })
    }
}
