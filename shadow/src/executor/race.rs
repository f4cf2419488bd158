//! Race sections: several worker threads inside the allocator at once.
//!
//! The executor queues each race op as a [`Step`] on its worker's script,
//! resolving slots and seeds on the main thread so the section's inputs are
//! deterministic. [`super::race_run::run`] then releases every worker with a script (or a
//! thread exit) at the same moment (a spinning barrier: a sleeping one
//! wakes threads tens of microseconds apart, longer than a whole script)
//! and waits for all. On a worker a step ([`super::race_steps`]) only
//! calls the allocator, claims or gives up the block's bytes
//! ([`super::claims`]: a block handed out twice is caught there) and
//! writes or reads its pattern; every other
//! check happens afterwards, on the main thread, in script order
//! ([`super::race_ops`]: the queueing and checking side, on the
//! executor). What interleaves inside the section is up to the machine: a
//! finding from a race may need several replays to show again.

use std::sync::atomic::{AtomicUsize, Ordering};

use super::child::ForkEnd;
use super::claims::Held;
use crate::allocator::InPlace;
use crate::guard::Panicked;
use crate::model::Block;
use crate::pattern::Mismatch;
use crate::workers::WORKERS;

/// Most steps one worker's script holds; further race ops are skipped.
pub const MAX_STEPS: usize = 32;

/// One allocator call a worker makes in a race.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    /// Allocate (`zeroed`: check it reads zero) and write the pattern of
    /// `seed`.
    Alloc {
        size: usize,
        align: usize,
        zeroed: bool,
        seed: u64,
    },
    /// Free a block that was live before the section (`sized`: with the
    /// sized call where the allocator has one and the block is in no heap).
    Free { block: Block, sized: bool },
    /// Realloc a block that was live before the section, check the kept
    /// prefix, then write the pattern of `seed`.
    Realloc { block: Block, new: usize, seed: u64 },
    /// Resize a block that was live before the section in place (asking
    /// for `extra` bytes more on top).
    Resize {
        block: Block,
        new: usize,
        extra: usize,
    },
    /// Ask a block that was live before the section its usable size, and
    /// write its pattern over the usable bytes it had when it came.
    Usable { block: Block },
    /// Allocate `count` blocks, writing the pattern of `seed + i` into the
    /// `i`-th, then free them oldest first, each checked before its free.
    Churn {
        size: usize,
        align: usize,
        count: usize,
        seed: u64,
    },
    /// Fork the process while the other workers run: the child, this
    /// thread alone in it, allocates [`FORK_BLOCKS`] blocks of `size`,
    /// writes the pattern of `seed + i` into the `i`-th, checks and frees
    /// them, and exits; the worker waits for it ([`super::child::FORK_PATIENCE`]).
    Fork {
        size: usize,
        align: usize,
        seed: u64,
    },
}

/// Blocks a forked child allocates, checks and frees.
pub const FORK_BLOCKS: usize = 8;
/// What a step did.
#[derive(Clone, Debug)]
pub enum Done {
    /// The new block (0: the request failed) and the first byte its
    /// worker found wrong, if any: in the kept prefix of a realloc, not
    /// zero in a zeroed block.
    Block {
        ptr: usize,
        broken: Option<Mismatch>,
    },
    Freed,
    /// What an in-place resize did (`None`: not in the API); the block
    /// was not written.
    Resized(Option<InPlace>),
    /// The usable size the worker was told, and the block's extent once
    /// its worker wrote its slack (`None`: not written).
    Usable {
        usable: usize,
        extent: Option<usize>,
    },
    /// A churn's blocks (each freed again), the first whose pattern broke
    /// while it was live, and how many requests were refused.
    Churned {
        ptrs: Vec<usize>,
        broken: Option<(usize, Mismatch)>,
        refused: usize,
    },
    /// The allocator handed the worker a block whose bytes a live block
    /// still owns (its `len` bytes at `ptr` meet `held`): the worker
    /// stopped there, before writing it.
    Overlap {
        ptr: usize,
        len: usize,
        held: Held,
    },
    /// How a forked child ended.
    Forked(ForkEnd),
    Panicked(Panicked),
}

/// The steps queued so far, per worker.
#[derive(Default)]
pub struct Section {
    pub(super) scripts: [Vec<Step>; WORKERS],
    /// Workers whose thread exits once its script is done, while the
    /// others still run theirs.
    pub(super) exits: [bool; WORKERS],
}

impl Section {
    pub fn is_empty(&self) -> bool {
        self.scripts.iter().all(Vec::is_empty) && !self.exits.contains(&true)
    }

    /// Ends worker `worker`'s thread in the section, after its script.
    pub fn exit(&mut self, worker: usize) {
        self.exits[worker % WORKERS] = true;
    }

    /// Whether worker `worker` can take one more step.
    pub fn has_room(&self, worker: usize) -> bool {
        self.scripts[worker % WORKERS].len() < MAX_STEPS
    }

    pub fn push(&mut self, worker: usize, step: Step) {
        self.scripts[worker % WORKERS].push(step);
    }

    /// Steps queued on all workers.
    pub fn len(&self) -> usize {
        self.scripts.iter().map(Vec::len).sum()
    }

    /// Bytes the queued steps add to the program's requests.
    pub fn bytes(&self) -> usize {
        self.scripts.iter().flatten().map(race_bytes).sum()
    }

    /// The blocks the steps free or reallocate, live until then: `(start,
    /// end)` of each, as [`super::claims::Claims`] take them.
    pub(super) fn held(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
        self.scripts.iter().flatten().filter_map(|s| match s {
            Step::Free { block, .. }
            | Step::Realloc { block, .. }
            | Step::Resize { block, .. }
            | Step::Usable { block } => Some((block.ptr, block.end())),
            Step::Alloc { .. } | Step::Churn { .. } | Step::Fork { .. } => None,
        })
    }

    /// Whether a step frees bytes (a free, a realloc that may move, a
    /// resize that may shrink, a churn): the section can then make room
    /// after a refusal in it.
    pub fn frees(&self) -> bool {
        self.scripts.iter().flatten().any(|s| {
            !matches!(
                s,
                Step::Alloc { .. } | Step::Usable { .. } | Step::Fork { .. }
            )
        })
    }
}

/// How many of a section's workers are inside the allocator now, and the
/// most there were at once: whether the section really raced.
#[derive(Default)]
pub(super) struct Inside {
    now: AtomicUsize,
    most: AtomicUsize,
    calls: AtomicUsize,
}

impl Inside {
    /// Runs `f`, an allocator call, counted as inside.
    pub(super) fn during<R>(&self, f: impl FnOnce() -> R) -> R {
        self.calls.fetch_add(1, Ordering::Relaxed);
        let n = self.now.fetch_add(1, Ordering::AcqRel) + 1;
        self.most.fetch_max(n, Ordering::AcqRel);
        let result = f();
        self.now.fetch_sub(1, Ordering::AcqRel);
        result
    }

    /// The most workers inside at once, and the calls made, once the
    /// section is over.
    pub(super) fn counts(&self) -> (usize, usize) {
        (
            self.most.load(Ordering::Acquire),
            self.calls.load(Ordering::Relaxed),
        )
    }
}

/// Bytes a queued step adds to the program's requests (a churn's, while
/// its blocks are live).
fn race_bytes(step: &Step) -> usize {
    match *step {
        Step::Alloc { size, .. } => size,
        Step::Realloc { new, .. } => new,
        Step::Resize { new, extra, .. } => new.saturating_add(extra),
        Step::Churn { size, count, .. } => size.saturating_mul(count),
        Step::Free { .. } | Step::Usable { .. } | Step::Fork { .. } => 0,
    }
}
