//! Race sections: several worker threads inside the allocator at once.
//!
//! The executor queues each race op as a [`Step`] on its worker's script,
//! resolving slots and seeds on the main thread so the section's inputs are
//! deterministic. [`run`] then releases every worker with a script (or a
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

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::channel;
use std::sync::{Arc, Mutex};

use super::claims::{Claims, Held};
use super::heap_table::HeapCalls;
use crate::allocator::{Allocator, InPlace};
use crate::guard::Panicked;
use crate::model::Block;
use crate::pattern::Mismatch;
use crate::workers::{WorkerPool, WORKERS};

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
    /// them, and exits; the worker waits for it ([`FORK_PATIENCE`]).
    Fork {
        size: usize,
        align: usize,
        seed: u64,
    },
}

/// Blocks a forked child allocates, checks and frees.
pub const FORK_BLOCKS: usize = 8;
/// How long a forked child may take before it is hung.
pub const FORK_PATIENCE: std::time::Duration = std::time::Duration::from_secs(3);

/// How a forked child ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ForkEnd {
    /// It made its calls, its blocks held their patterns, and it exited.
    Clean,
    /// The system refused the fork (or the child was reaped elsewhere):
    /// nothing was checked.
    Refused,
    /// It had not exited after [`FORK_PATIENCE`] (killed then): a lock
    /// held at the fork by a thread the child does not have.
    Hung,
    /// A block's pattern broke, a request failed, or the allocator
    /// panicked in it (its exit code), or a signal ended it.
    Failed {
        code: Option<i32>,
        signal: Option<i32>,
    },
}

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
    scripts: [Vec<Step>; WORKERS],
    /// Workers whose thread exits once its script is done, while the
    /// others still run theirs.
    exits: [bool; WORKERS],
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
    /// end)` of each, as [`Claims`] take them.
    fn held(&self) -> impl Iterator<Item = (usize, usize)> + '_ {
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
}

/// What a section did: each step's result, worker 0's script first, the
/// most workers that were inside the allocator at once, and how many
/// allocator calls the workers made.
pub struct Ran {
    pub results: Vec<(Step, Done)>,
    pub most_inside: usize,
    pub calls: usize,
}

/// Race sections run one worker after another (each exit done before the
/// next worker starts) when set: the serial replay of a program whose
/// finding came from a race, which must run clean when the race was the
/// bug ([`serial_races`]).
static SERIAL: AtomicBool = AtomicBool::new(false);

/// Runs every race section of this process serially (`true`), or at once
/// as fuzzing does (`false`, the default). Same steps, same checks, no
/// contention.
pub fn serial_races(serial: bool) {
    SERIAL.store(serial, Ordering::Relaxed);
}

/// Runs the section: every worker with a script, or an exit, starts at
/// once (one after another under [`serial_races`]); a worker that exits
/// ends its thread after its script, and the section is over once that
/// thread is gone. `live`: the bytes the shadow's blocks own, `(start,
/// end)`; a worker handed bytes a live block owns stops there
/// ([`Done::Overlap`]).
pub fn run(
    section: Section,
    live: impl IntoIterator<Item = (usize, usize)>,
    pool: &mut WorkerPool,
    alloc: &'static dyn Allocator,
    heaps: HeapCalls,
) -> Ran {
    let claims = Arc::new(Claims::new(live.into_iter().chain(section.held())));
    let exits = section.exits;
    let starts = |w: usize, script: &Vec<Step>| !script.is_empty() || exits[w];
    let busy = section
        .scripts
        .iter()
        .enumerate()
        .filter(|(w, s)| starts(*w, s))
        .count();
    let gate = Arc::new(AtomicUsize::new(0));
    let inside = Arc::new(Inside::default());
    // Each worker leaves its results here; the last of a run to finish
    // wakes the main thread, once (not once per worker, each wakeup
    // taking a CPU from the workers still racing).
    let results = Arc::new(Mutex::new(Vec::new()));
    let left = Arc::new(AtomicUsize::new(busy));
    let (tx, rx) = channel();
    let serial = SERIAL.load(Ordering::Relaxed);
    for (worker, script) in section.scripts.into_iter().enumerate() {
        if !starts(worker, &script) {
            continue;
        }
        let (inside, claims, tx, heaps, results) = (
            inside.clone(),
            claims.clone(),
            tx.clone(),
            heaps.clone(),
            results.clone(),
        );
        let (gate, together, left) = match serial {
            true => (
                Arc::new(AtomicUsize::new(0)),
                1,
                Arc::new(AtomicUsize::new(1)),
            ),
            false => (gate.clone(), busy, left.clone()),
        };
        let job = move || {
            wait_for_all(&gate, together);
            let mut done = Vec::with_capacity(script.len());
            for s in script {
                let d = super::race_steps::step(alloc, heaps.get(), &s, &inside, &claims);
                let overlapped = matches!(d, Done::Overlap { .. });
                done.push((s, d));
                if overlapped {
                    break;
                }
            }
            results
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((worker, done));
            if left.fetch_sub(1, Ordering::AcqRel) == 1 {
                let _ = tx.send(());
            }
        };
        match exits[worker] {
            true => pool.start_last(worker, job),
            false => pool.start(worker, job),
        }
        if serial {
            // The next worker starts once this one is done (and gone).
            rx.recv().expect("a worker thread died in a race section");
            pool.reap();
        }
    }
    drop(tx);
    if !serial {
        rx.recv().expect("a worker thread died in a race section");
    }
    let mut results = std::mem::take(&mut *results.lock().unwrap_or_else(|e| e.into_inner()));
    assert_eq!(
        results.len(),
        busy,
        "a worker thread died in a race section"
    );
    // The exits' thread-local destructors may still run, racing the
    // others' last steps: the section ends when they are done.
    pool.reap();
    results.sort_by_key(|(worker, _)| *worker);
    Ran {
        results: results.into_iter().flat_map(|(_, done)| done).collect(),
        most_inside: inside.most.load(Ordering::Acquire),
        calls: inside.calls.load(Ordering::Relaxed),
    }
}

/// A barrier that spins (yielding now and then, for machines with fewer
/// cores than workers) so every thread leaves it within a few hundred
/// nanoseconds of the last arrival.
fn wait_for_all(gate: &AtomicUsize, n: usize) {
    gate.fetch_add(1, Ordering::AcqRel);
    let mut spins = 0u32;
    while gate.load(Ordering::Acquire) < n {
        spins += 1;
        if spins.is_multiple_of(256) {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
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
