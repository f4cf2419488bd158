//! Race sections: several worker threads inside the allocator at once.
//!
//! The executor queues each race op as a [`Step`] on its worker's script,
//! resolving slots and seeds on the main thread so the section's inputs are
//! deterministic. [`run`] then releases every worker with a script at the
//! same moment (a spinning barrier: a sleeping one wakes threads tens of
//! microseconds apart, longer than a whole script) and waits for all. On a
//! worker a step only calls the allocator and writes or reads the block's
//! pattern; every check happens afterwards, on the main thread, in script
//! order. What interleaves inside the section is up to the machine: a
//! finding from a race may need several replays to show again.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc::channel;
use std::sync::Arc;

use crate::allocator::Allocator;
use crate::guard::{self, Panicked};
use crate::model::Block;
use crate::pattern::{self, Mismatch};
use crate::workers::{WorkerPool, WORKERS};

/// Most steps one worker's script holds; further race ops are skipped.
pub const MAX_STEPS: usize = 32;

/// One allocator call a worker makes in a race.
#[derive(Clone, Copy, Debug)]
pub enum Step {
    /// Allocate and write the pattern of `seed`.
    Alloc {
        size: usize,
        align: usize,
        seed: u64,
    },
    /// Free a block that was live before the section.
    Free { block: Block },
    /// Realloc a block that was live before the section, check the kept
    /// prefix, then write the pattern of `seed`.
    Realloc { block: Block, new: usize, seed: u64 },
}

/// What a step did.
#[derive(Clone, Debug)]
pub enum Done {
    /// The new block (0: the request failed); for a realloc, the prefix
    /// mismatch its worker saw, if any.
    Block {
        ptr: usize,
        lost_prefix: Option<Mismatch>,
    },
    Freed,
    Panicked(Panicked),
}

/// The steps queued so far, per worker.
#[derive(Default)]
pub struct Section {
    scripts: [Vec<Step>; WORKERS],
}

impl Section {
    pub fn is_empty(&self) -> bool {
        self.scripts.iter().all(Vec::is_empty)
    }

    /// Whether worker `worker` can take one more step.
    pub fn has_room(&self, worker: usize) -> bool {
        self.scripts[worker % WORKERS].len() < MAX_STEPS
    }

    pub fn push(&mut self, worker: usize, step: Step) {
        self.scripts[worker % WORKERS].push(step);
    }

    /// Every queued step, in the order results come back from [`run`].
    pub fn steps(&self) -> impl Iterator<Item = &Step> {
        self.scripts.iter().flatten()
    }
}

/// Runs the section: every worker with a script starts at once. Results
/// come back per step, worker 0's script first.
pub fn run(
    section: Section,
    pool: &mut WorkerPool,
    alloc: &'static dyn Allocator,
) -> Vec<(Step, Done)> {
    let busy = section.scripts.iter().filter(|s| !s.is_empty()).count();
    let gate = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = channel();
    for (worker, script) in section.scripts.into_iter().enumerate() {
        if script.is_empty() {
            continue;
        }
        let (gate, tx) = (gate.clone(), tx.clone());
        pool.start(worker, move || {
            wait_for_all(&gate, busy);
            let done: Vec<_> = script.iter().map(|s| (*s, step(alloc, s))).collect();
            let _ = tx.send((worker, done));
        });
    }
    drop(tx);
    let mut results: Vec<_> = rx.iter().collect();
    assert_eq!(
        results.len(),
        busy,
        "a worker thread died in a race section"
    );
    results.sort_by_key(|(worker, _)| *worker);
    results.into_iter().flat_map(|(_, done)| done).collect()
}

/// A barrier that spins (yielding now and then, for machines with fewer
/// cores than workers) so every thread leaves it within a few hundred
/// nanoseconds of the last arrival.
fn wait_for_all(gate: &AtomicUsize, n: usize) {
    gate.fetch_add(1, Ordering::AcqRel);
    let mut spins = 0u32;
    while gate.load(Ordering::Acquire) < n {
        spins += 1;
        if spins % 256 == 0 {
            std::thread::yield_now();
        } else {
            std::hint::spin_loop();
        }
    }
}

fn step(alloc: &'static dyn Allocator, step: &Step) -> Done {
    let result = guard::call(|| unsafe {
        match *step {
            Step::Alloc { size, align, seed } => {
                let p = alloc.alloc(size, align, false);
                if !p.is_null() {
                    pattern::fill(p, size, seed);
                }
                Done::Block {
                    ptr: p as usize,
                    lost_prefix: None,
                }
            }
            Step::Free { block: b } => {
                alloc.free(b.ptr as *mut u8, b.size, b.align);
                Done::Freed
            }
            Step::Realloc {
                block: b,
                new,
                seed,
            } => {
                let q = alloc.realloc(b.ptr as *mut u8, b.size, b.align, new);
                let mut lost_prefix = None;
                if !q.is_null() {
                    lost_prefix = pattern::check(q, b.extent, b.size.min(new), b.seed);
                    pattern::fill(q, new, seed);
                }
                Done::Block {
                    ptr: q as usize,
                    lost_prefix,
                }
            }
        }
    });
    result.unwrap_or_else(Done::Panicked)
}
