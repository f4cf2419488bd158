//! Calls from inside the allocator: its hook ([`Extras::set_hook`],
//! mimalloc's deferred free), which it calls from its own allocation path
//! with its state part-way through a call. A `hook-free` hands the hook a
//! block; the next time the allocator calls it, the hook frees that block
//! and allocates one of its own of the same size and alignment (a
//! reentrant free and malloc), which it frees the time after. An
//! allocator that calls out before its state is whole hands the inner
//! call what the outer one is about to return: after each op, every block
//! the hook holds must overlap no live block, and each must hold its
//! pattern when the hook frees it.
//!
//! The hook is one per process: what it holds lives in [`HELD`], with the
//! allocator whose blocks they are (the program's, which a `hook-free`
//! sets). A hook called while another thread runs it, or from inside its
//! own calls, does nothing.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, MutexGuard, TryLockError};

use super::checks::contents;
use super::{Executor, Outcome};
use crate::allocator::{Allocator, Extras};
use crate::model::Block;
use crate::pattern::{self, Mismatch};
use crate::violation::Violation;

/// What the hook holds between the allocator's calls of it.
struct Held {
    alloc: Option<&'static dyn Allocator>,
    /// Blocks the program gave it, to free on its next call.
    given: Vec<Block>,
    /// Blocks it allocated itself, to free on its next call.
    own: Vec<Block>,
    /// The first block it found changed before it freed it.
    broken: Option<(Block, Mismatch)>,
}

static HELD: Mutex<Held> = Mutex::new(Held {
    alloc: None,
    given: Vec::new(),
    own: Vec::new(),
    broken: None,
});

/// Calls of the hook that found blocks to free.
static CALLS: AtomicUsize = AtomicUsize::new(0);

/// Added to a given block's seed for the block the hook allocates in its
/// place, so the two patterns differ.
const OWN_SEED: u64 = 0x486f_6f6b;

fn held() -> MutexGuard<'static, Held> {
    HELD.lock().unwrap_or_else(|e| e.into_inner())
}

/// The hook the allocator calls: frees what it holds, then (unless
/// `force`, which asks it to free all it can) allocates a block in place
/// of each block the program gave it.
fn hook(force: bool) {
    let mut held = match HELD.try_lock() {
        Ok(held) => held,
        // A panic in an earlier call of the allocator's from here.
        Err(TryLockError::Poisoned(e)) => e.into_inner(),
        Err(TryLockError::WouldBlock) => return,
    };
    let Some(alloc) = held.alloc else {
        return;
    };
    let given = std::mem::take(&mut held.given);
    let own = std::mem::take(&mut held.own);
    if !(given.is_empty() && own.is_empty()) {
        CALLS.fetch_add(1, Ordering::Relaxed);
    }
    for b in given.iter().chain(&own) {
        // SAFETY: `b` is live: the hook holds it, and only the hook frees it, here.
        if let Some(m) = unsafe { contents(b) } {
            held.broken.get_or_insert((*b, m));
        }
        // SAFETY: as above, with the size and alignment it was allocated with; it leaves
        // the hook's lists above, so it is freed once.
        unsafe { alloc.free(b.ptr as *mut u8, b.size, b.align) };
    }
    if force {
        return;
    }
    for b in given {
        // SAFETY: a fresh request; `alloc` serves `b`'s size and alignment, as it served `b`.
        let p = unsafe { alloc.alloc(b.size, b.align, false) };
        if p.is_null() {
            continue;
        }
        let mut own = Block::fresh(p as usize, b.size, b.align);
        own.seed = b.seed.wrapping_add(OWN_SEED);
        // SAFETY: `p` is a fresh block of `b.size` bytes.
        unsafe { pattern::fill(p, own.extent, own.seed) };
        held.own.push(own);
    }
}

/// Frees what the hook holds, outside the allocator, but a block `kept`
/// names (one the program holds too): a program's end, once the
/// allocator has had its calls of the hook.
fn release(kept: impl Fn(&Block) -> bool) -> Option<(Block, Mismatch)> {
    let mut held = held();
    if let Some(alloc) = held.alloc.take() {
        let blocks = std::mem::take(&mut held.given).into_iter();
        for b in blocks
            .chain(std::mem::take(&mut held.own))
            .filter(|b| !kept(b))
        {
            // SAFETY: as in `hook`: held only here, freed once.
            unsafe { alloc.free(b.ptr as *mut u8, b.size, b.align) };
        }
    }
    held.broken.take()
}

/// A block the hook holds (given it, or its own) that overlaps `[start,
/// end)`: a block just handed out that the hook holds too.
pub(super) fn holding(start: usize, end: usize) -> Option<Block> {
    let held = held();
    let mut blocks = held.given.iter().chain(&held.own);
    blocks.find(|b| b.ptr < end && start < b.end()).copied()
}

impl Executor {
    /// Hands block `i` to the allocator's hook. Skipped where the
    /// allocator has none, for a heap's block, and over a fixed region:
    /// there the harness's own size searches (is a refusal fair, is
    /// capacity lost) would run the hook, which frees blocks and so makes
    /// room in the middle of a search.
    pub(super) fn hook_free(&mut self, i: usize) -> Outcome {
        let b = self.shadow.blocks()[i];
        let Some(extras) = self.alloc.extras() else {
            return Outcome::Skipped;
        };
        if b.heap.is_some() || self.alloc.arena().is_some() || !extras.set_hook(Some(hook)) {
            return Outcome::Skipped;
        }
        if self.checked {
            self.guard.verify(&b, "before the allocator's hook took it");
        }
        self.shadow.remove(i);
        let mut held = held();
        held.alloc = Some(self.alloc);
        held.given.push(b);
        self.hooked = true;
        Outcome::Done
    }

    /// After an op, once the program has used the hook: a block the hook
    /// allocated overlaps no live block, and none the hook freed had
    /// changed.
    pub(super) fn check_hooked(&self) {
        let (own, broken) = {
            let mut held = held();
            (held.own.clone(), held.broken.take())
        };
        self.hooked_broken(broken);
        for b in own {
            if let Some(other) = self.shadow.overlapping(b.ptr, b.end()) {
                self.guard.overlap(b, other);
            }
        }
    }

    /// At a program's end: the allocator calls its hook (twice: it frees
    /// the blocks given it, then its own), and what is left is freed here.
    pub(super) fn settle_hook(&mut self, extras: Option<&dyn Extras>) {
        self.stats.hook_calls += CALLS.swap(0, Ordering::Relaxed);
        if let Some(extras) = extras {
            self.guard
                .guarded(|| extras.run_hook() && extras.run_hook());
        }
        let broken = release(|_| false);
        if let Some(extras) = extras {
            self.guard.guarded(|| extras.set_hook(None));
        }
        // Those calls were the end's.
        CALLS.store(0, Ordering::Relaxed);
        self.hooked_broken(broken);
    }

    fn hooked_broken(&self, broken: Option<(Block, Mismatch)>) {
        if let (Some((b, mismatch)), true) = (broken, self.checked) {
            self.guard.fail(Violation::Contents {
                ptr: b.ptr,
                size: b.size,
                mismatch,
                when: "while the allocator's hook held it",
                by_call: false,
            });
        }
    }
}

/// Frees what the hook holds without a check, but a block `shadow` holds
/// too (freed with the program's), and takes the hook away: a program
/// that ended at a tolerated violation.
pub(super) fn drop_held(shadow: &crate::model::ShadowHeap, extras: Option<&dyn Extras>) {
    let _ = release(|b| shadow.overlapping(b.ptr, b.end()).is_some());
    if let Some(extras) = extras {
        let _ = crate::guard::call(|| extras.set_hook(None));
    }
}
