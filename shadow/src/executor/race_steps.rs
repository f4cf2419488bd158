//! What a worker does in one step of a race section: the allocator call,
//! the claim of the bytes it was handed ([`super::claims`]), and the
//! pattern written or checked there. Every other check runs afterwards,
//! on the main thread ([`super::race_ops`]).

use super::child::ForkEnd;
use super::claims::Claims;
use super::race::{Done, Inside, Step, FORK_BLOCKS};
use super::slack::fill_slack;
use crate::allocator::{Allocator, Heaps, InPlace};
use crate::guard;
use crate::model::Block;
use crate::pattern;

/// Runs one step on the calling worker; a panic in the allocator is its
/// result.
pub(super) fn step(
    alloc: &'static dyn Allocator,
    heaps: &dyn Heaps,
    step: &Step,
    inside: &Inside,
    claims: &Claims,
) -> Done {
    let on = On {
        alloc,
        heaps,
        inside,
        claims,
    };
    // SAFETY: a step's block was live and left the shadow when queued, so only this step
    // uses it (its heap is live: a section runs before any heap op); a new block is
    // claimed without overlap before its bytes are written; `align <= max_align()`
    // (checked when queued), a power of two as drawn.
    let result = guard::call(|| unsafe {
        match *step {
            Step::Alloc {
                size,
                align,
                zeroed,
                seed,
            } => on.alloc(size, align, zeroed, seed),
            Step::Free { block, sized } => on.free(block, sized),
            Step::Realloc { block, new, seed } => on.realloc(block, new, seed),
            Step::Resize { block, new, extra } => on.resize(block, new, extra),
            Step::Usable { block } => on.usable(block),
            Step::Churn {
                size,
                align,
                count,
                seed,
            } => on.churn(size, align, count, seed),
            Step::Fork { size, align, seed } => on.fork(size, align, seed),
        }
    });
    result.unwrap_or_else(Done::Panicked)
}

/// What a worker's steps run on.
struct On<'a> {
    alloc: &'static dyn Allocator,
    heaps: &'a dyn Heaps,
    inside: &'a Inside,
    claims: &'a Claims,
}

/// # Safety (every method)
/// `alloc` is a sound allocator as far as the harness knows; a `block` is
/// live, this worker's alone, with its tracked size and alignment, and in
/// a live heap if in one; `align` is one the allocator serves.
impl On<'_> {
    unsafe fn alloc(&self, size: usize, align: usize, zeroed: bool, seed: u64) -> Done {
        // SAFETY: `align` is one the allocator serves (the contract above).
        let p = self
            .inside
            .during(|| unsafe { self.alloc.alloc(size, align, zeroed) });
        let mut broken = None;
        if !p.is_null() {
            if let Err(held) = self.claims.claim(p as usize, size) {
                return Done::Overlap {
                    ptr: p as usize,
                    len: size,
                    held,
                };
            }
            // SAFETY: a new block of `size` bytes, claimed by this worker alone.
            unsafe {
                if zeroed {
                    broken = pattern::check_zero(p, size, 0, seed);
                }
                pattern::fill(p, size, seed);
            }
        }
        Done::Block {
            ptr: p as usize,
            broken,
        }
    }

    unsafe fn free(&self, b: Block, sized: bool) -> Done {
        let p = b.ptr as *mut u8;
        self.claims.release(b.ptr);
        crate::sanitizer::given(b.ptr, || {
            // SAFETY: `b` is live, this worker's alone, with its tracked size and
            // alignment, in a live heap if in one (the contract above).
            self.inside.during(|| unsafe {
                match (b.heap, self.alloc.extras()) {
                    (Some(h), _) => self.heaps.remote_free_in(h, p, b.size, b.align),
                    (None, Some(x)) if sized => {
                        if !x.free_sized(p, b.size, b.align) {
                            self.alloc.free(p, b.size, b.align);
                        }
                    }
                    (None, _) => self.alloc.free(p, b.size, b.align),
                }
            });
        });
        Done::Freed
    }

    unsafe fn realloc(&self, b: Block, new: usize, seed: u64) -> Done {
        let p = b.ptr as *mut u8;
        self.claims.release(b.ptr);
        let q = crate::sanitizer::given(b.ptr, || {
            // SAFETY: `b` is live, this worker's alone, with its tracked size and
            // alignment, in a live heap if in one (the contract above).
            self.inside.during(|| unsafe {
                match b.heap {
                    Some(h) => self
                        .heaps
                        .remote_realloc_in(h, p, b.resized(new))
                        .unwrap_or(std::ptr::null_mut()),
                    None => self.alloc.realloc(p, b.size, b.align, new),
                }
            })
        });
        // A refused realloc leaves the old block live.
        let (ptr, len) = match q.is_null() {
            true => (b.ptr, b.end() - b.ptr),
            false => (q as usize, new),
        };
        if let Err(held) = self.claims.claim(ptr, len) {
            return Done::Overlap { ptr, len, held };
        }
        let mut broken = None;
        if !q.is_null() {
            // SAFETY: the new block holds `new` bytes, claimed by this worker alone
            // above; both calls stay within them.
            unsafe {
                broken = pattern::check(q, b.extent, b.size.min(new), b.seed);
                pattern::fill(q, new, seed);
            }
        }
        Done::Block {
            ptr: q as usize,
            broken,
        }
    }

    /// Resizes in place (a block in no heap: queued only then). A block
    /// that stayed where it was is claimed for the `new` bytes asked, and
    /// left unwritten: whether it holds them, and its prefix, are checked
    /// on the main thread as after the serial op.
    unsafe fn resize(&self, b: Block, new: usize, extra: usize) -> Done {
        let p = b.ptr as *mut u8;
        let to = crate::sanitizer::given(b.ptr, || {
            self.inside.during(|| {
                let x = self.alloc.extras()?;
                // SAFETY: `b` is live, this worker's alone, with its tracked size and
                // alignment, in no heap (the contract above; queued only then).
                unsafe { x.resize_in_place(p, b.resized(new), extra) }
            })
        });
        if let Some(InPlace::Resized { ptr, .. }) = to {
            if ptr == b.ptr {
                self.claims.release(b.ptr);
                if let Err(held) = self.claims.claim(ptr, new) {
                    return Done::Overlap {
                        ptr,
                        len: new,
                        held,
                    };
                }
            }
        }
        Done::Resized(to)
    }

    /// Asks the usable size, then writes the block's slack as the serial
    /// probe does ([`fill_slack`]), within the usable bytes it had when it
    /// came (what its claim covers).
    unsafe fn usable(&self, b: Block) -> Done {
        let p = b.ptr as *mut u8;
        let usable = crate::sanitizer::given(b.ptr, || {
            // SAFETY: `b` is live, with its tracked size and alignment (the contract above).
            self.inside
                .during(|| unsafe { self.alloc.usable_size(p, b.size, b.align) })
        });
        // SAFETY: `b` is live and this worker's alone; the bytes written are
        // within the usable size it came with.
        let extent = unsafe { fill_slack(&b, usable.min(b.usable)) };
        Done::Usable { usable, extent }
    }

    /// A churn step: `count` blocks allocated and written, then each
    /// checked and freed, oldest first.
    unsafe fn churn(&self, size: usize, align: usize, count: usize, seed: u64) -> Done {
        let mut ptrs = Vec::with_capacity(count);
        let mut refused = 0;
        for i in 0..count {
            // SAFETY: `align` is one the allocator serves (the contract above).
            let p = self
                .inside
                .during(|| unsafe { self.alloc.alloc(size, align, false) });
            if p.is_null() {
                refused += 1;
                continue;
            }
            if let Err(held) = self.claims.claim(p as usize, size) {
                // The churn's own blocks stay claimed and unfreed.
                return Done::Overlap {
                    ptr: p as usize,
                    len: size,
                    held,
                };
            }
            // SAFETY: a new block of `size` bytes, claimed by this worker alone.
            unsafe { pattern::fill(p, size, seed.wrapping_add(i as u64)) };
            ptrs.push((p as usize, i));
        }
        let mut broken = None;
        for &(p, i) in &ptrs {
            if broken.is_none() {
                let seed = seed.wrapping_add(i as u64);
                // SAFETY: a live block of `size` bytes of this churn, written above.
                let found = unsafe { pattern::check(p as *const u8, size, size, seed) };
                broken = found.map(|m| (p, m));
            }
            self.claims.release(p);
            // SAFETY: a live block of this churn, allocated with `size` and `align`.
            self.inside
                .during(|| unsafe { self.alloc.free(p as *mut u8, size, align) });
        }
        Done::Churned {
            ptrs: ptrs.into_iter().map(|(p, _)| p).collect(),
            broken,
            refused,
        }
    }

    /// A fork step: the child makes its calls and exits
    /// ([`in_forked_child`]); this worker waits for it, and kills it once
    /// it has waited [`super::child::FORK_PATIENCE`].
    unsafe fn fork(&self, size: usize, align: usize, seed: u64) -> Done {
        // SAFETY: `fork` takes no pointer; the child runs only what the
        // next block says.
        let pid = self.inside.during(|| unsafe { libc::fork() });
        match pid {
            -1 => return Done::Forked(ForkEnd::Refused),
            // SAFETY: this is the child, on the thread that forked (the
            // other threads are not in it); it runs only its own calls
            // into the allocator and leaves by `_exit`: no unwinding into
            // the harness, no handler of the parent's at exit. `align` is
            // one the allocator serves (checked when queued).
            0 => unsafe { in_forked_child(self.alloc, size, align, seed) },
            _ => {}
        }
        Done::Forked(super::child::wait_for(pid))
    }
}

/// A fork step's child: allocates [`FORK_BLOCKS`] blocks of `size`,
/// writes each, checks and frees them, and exits 0; 2 when a pattern
/// broke, [`super::child::PANICKED`] when the allocator panicked. It
/// never returns.
///
/// # Safety
/// Only in the child of a fork, on the thread that forked; `align` is one
/// the allocator serves.
unsafe fn in_forked_child(
    alloc: &'static dyn Allocator,
    size: usize,
    align: usize,
    seed: u64,
) -> ! {
    let body = || {
        let mut ptrs = [std::ptr::null_mut::<u8>(); FORK_BLOCKS];
        for (i, p) in ptrs.iter_mut().enumerate() {
            // SAFETY: the caller's; each block is written within its size.
            unsafe {
                // A refused request is judged nowhere: the parent's
                // section may hold the room.
                *p = alloc.alloc(size, align, false);
                if !p.is_null() {
                    pattern::fill(*p, size, seed.wrapping_add(i as u64));
                }
            }
        }
        let mut code = 0;
        for (i, &p) in ptrs.iter().enumerate().filter(|(_, p)| !p.is_null()) {
            // SAFETY: each block is live, this child's, written above.
            unsafe {
                if pattern::check(p, size, size, seed.wrapping_add(i as u64)).is_some() {
                    code = 2;
                }
                alloc.free(p, size, align);
            }
        }
        code
    };
    // SAFETY: this is a forked child (the caller's contract), which
    // `finish` ends.
    unsafe {
        super::child::quiet();
        super::child::finish(body)
    }
}
