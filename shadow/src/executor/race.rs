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

use super::{Executor, On, Origin, Outcome};
use crate::allocator::{Allocator, EmulatedHeaps, Heaps};
use crate::edges::{NewSize, IMPOSSIBLE_FROM};
use crate::guard::{self, Panicked};
use crate::model::Block;
use crate::pattern::{self, Mismatch};
use crate::violation::{Site, Violation};
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

    /// Steps queued on all workers.
    pub fn len(&self) -> usize {
        self.scripts.iter().map(Vec::len).sum()
    }

    /// Bytes the queued steps add to the program's requests.
    pub fn bytes(&self) -> usize {
        self.scripts.iter().flatten().map(race_bytes).sum()
    }

    /// Whether a step frees a block (a free, or a realloc that may move):
    /// the section can then make room after a refusal in it.
    pub fn frees(&self) -> bool {
        self.scripts
            .iter()
            .flatten()
            .any(|s| !matches!(s, Step::Alloc { .. }))
    }
}

/// How many of a section's workers are inside the allocator now, and the
/// most there were at once: whether the section really raced.
#[derive(Default)]
struct Inside {
    now: AtomicUsize,
    most: AtomicUsize,
}

impl Inside {
    /// Runs `f`, an allocator call, counted as inside.
    fn during<R>(&self, f: impl FnOnce() -> R) -> R {
        let n = self.now.fetch_add(1, Ordering::AcqRel) + 1;
        self.most.fetch_max(n, Ordering::AcqRel);
        let result = f();
        self.now.fetch_sub(1, Ordering::AcqRel);
        result
    }
}

/// What a section did: each step's result, worker 0's script first, and
/// the most workers that were inside the allocator at once.
pub struct Ran {
    pub results: Vec<(Step, Done)>,
    pub most_inside: usize,
}

/// The heap API a section frees heap blocks through: the allocator's own,
/// or the executor's emulation of one (shared with the workers).
#[derive(Clone)]
pub enum HeapCalls {
    Own(&'static dyn Heaps),
    Emulated(Arc<EmulatedHeaps>),
}

impl HeapCalls {
    fn get(&self) -> &dyn Heaps {
        match self {
            HeapCalls::Own(h) => *h,
            HeapCalls::Emulated(e) => &**e,
        }
    }
}

/// Runs the section: every worker with a script starts at once.
pub fn run(
    section: Section,
    pool: &mut WorkerPool,
    alloc: &'static dyn Allocator,
    heaps: HeapCalls,
) -> Ran {
    let busy = section.scripts.iter().filter(|s| !s.is_empty()).count();
    let gate = Arc::new(AtomicUsize::new(0));
    let inside = Arc::new(Inside::default());
    let (tx, rx) = channel();
    for (worker, script) in section.scripts.into_iter().enumerate() {
        if script.is_empty() {
            continue;
        }
        let (gate, inside, tx, heaps) = (gate.clone(), inside.clone(), tx.clone(), heaps.clone());
        pool.start(worker, move || {
            wait_for_all(&gate, busy);
            let done: Vec<_> = script
                .iter()
                .map(|s| (*s, step(alloc, heaps.get(), s, &inside)))
                .collect();
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
    Ran {
        results: results.into_iter().flat_map(|(_, done)| done).collect(),
        most_inside: inside.most.load(Ordering::Acquire),
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

fn step(alloc: &'static dyn Allocator, heaps: &dyn Heaps, step: &Step, inside: &Inside) -> Done {
    let result = guard::call(|| unsafe {
        match *step {
            Step::Alloc { size, align, seed } => {
                let p = inside.during(|| alloc.alloc(size, align, false));
                if !p.is_null() {
                    pattern::fill(p, size, seed);
                }
                Done::Block {
                    ptr: p as usize,
                    lost_prefix: None,
                }
            }
            Step::Free { block: b } => {
                let p = b.ptr as *mut u8;
                crate::sanitizer::given(b.ptr, || {
                    inside.during(|| match b.heap {
                        Some(h) => heaps.remote_free_in(h, p, b.size, b.align),
                        None => alloc.free(p, b.size, b.align),
                    });
                });
                Done::Freed
            }
            Step::Realloc {
                block: b,
                new,
                seed,
            } => {
                let q = crate::sanitizer::given(b.ptr, || {
                    inside.during(|| alloc.realloc(b.ptr as *mut u8, b.size, b.align, new))
                });
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

/// Race sections on the executor: queueing on the main thread, the run,
/// then every check.
impl Executor {
    pub(super) fn queue_alloc(&mut self, worker: usize, size: usize, align: usize) -> Outcome {
        let fits = self.shadow.len() + self.race.len() < crate::model::MAX_LIVE_BLOCKS
            && self.shadow.fits(size.saturating_add(self.race.bytes()));
        if !self.checked
            || size >= IMPOSSIBLE_FROM
            || align > self.alloc.max_align()
            || !fits
            || !self.race.has_room(worker)
        {
            return Outcome::Skipped;
        }
        let seed = self.seed();
        self.race.push(worker, Step::Alloc { size, align, seed });
        Outcome::Done
    }

    /// Queues a free (`to` is `None`) or a realloc of live block `i`; the
    /// block leaves the shadow now, so no other step can name it. A heap's
    /// block is only freed here: a realloc allocates in its heap, which
    /// heap APIs bind to one thread (see [`Heaps::remote_free_in`]).
    pub(super) fn queue_resize(&mut self, worker: usize, i: usize, to: Option<NewSize>) -> Outcome {
        let b = self.shadow.blocks()[i];
        let new = to.map(|t| t.resolve(b.size));
        let resizable = new.is_none_or(|n| {
            n != 0
                && n < IMPOSSIBLE_FROM
                && self.shadow.fits_resize(n.saturating_add(self.race.bytes()))
        });
        let in_heap = b.heap.is_some() && new.is_some();
        if !self.checked || in_heap || !resizable || !self.race.has_room(worker) {
            return Outcome::Skipped;
        }
        self.site = Site::new("race", b.size, b.align);
        self.verify(&b, "before a race section");
        let block = self.shadow.remove(i);
        let step = match new {
            None => Step::Free { block },
            Some(new) => Step::Realloc {
                block,
                new,
                seed: self.seed(),
            },
        };
        self.race.push(worker, step);
        Outcome::Done
    }

    /// `owner` allocates `count` blocks (one at a time), then a section
    /// runs in which `freer` frees them while `owner` allocates `count`
    /// more.
    pub(super) fn remote_free_race(
        &mut self,
        freer: usize,
        owner: usize,
        size: usize,
        align: usize,
        count: usize,
    ) -> Outcome {
        if size == 0 || size >= IMPOSSIBLE_FROM {
            return Outcome::Skipped;
        }
        // The free is remote: never on the owner's own thread.
        let freer = match freer % WORKERS == owner % WORKERS {
            true => owner + 1,
            false => freer,
        };
        let mut owned = Vec::new();
        for _ in 0..count.min(MAX_STEPS) {
            if let Outcome::Live(i) = self.alloc_block(size, align, false, None, On::Worker(owner))
            {
                owned.push(self.shadow.blocks()[i].ptr);
            }
        }
        for ptr in &owned {
            if let Some(i) = self.shadow.blocks().iter().position(|b| b.ptr == *ptr) {
                self.queue_resize(freer, i, None);
            }
        }
        for _ in 0..owned.len() {
            self.queue_alloc(owner, size, align);
        }
        self.run_race();
        Outcome::Done
    }

    /// Runs the queued section, then checks each result in script order
    /// and every live block.
    pub(super) fn run_race(&mut self) {
        if self.race.is_empty() {
            return;
        }
        // Threads run the section at once: a violation's path is all the
        // allocator code the section ran (a superset of the one call's).
        crate::coverage::begin_op();
        let section = std::mem::take(&mut self.race);
        let frees = section.frees();
        let (alloc, heaps) = (self.alloc, self.heap_calls());
        let ran = crate::coverage::around(|| run(section, self.pool(), alloc, heaps));
        self.stats.race_sections += 1;
        if ran.most_inside >= 2 {
            self.stats.races += 1;
        }
        let results = ran.results;
        // Everything the section returned is held until checked, so a
        // program that ends at a tolerated violation still releases it.
        self.raced = results
            .iter()
            .rev()
            .filter_map(|(step, done)| raced_block(step, done))
            .collect();
        for (step, done) in results {
            self.check_raced(step, done, frees);
        }
        for b in self.shadow.blocks() {
            self.site = Site::new("race", b.size, b.align);
            self.verify(b, "after a race section");
        }
    }

    /// Checks what `step` did; `frees`: whether its section freed blocks.
    fn check_raced(&mut self, step: Step, done: Done, frees: bool) {
        let (api, size, align) = match step {
            Step::Alloc { size, align, .. } => ("race-alloc", size, align),
            Step::Free { block } => ("race-free", block.size, block.align),
            Step::Realloc { block, .. } => ("race-realloc", block.size, block.align),
        };
        self.site = Site::new(api, size, align);
        let (ptr, lost_prefix) = match done {
            Done::Panicked(p) => self.panicked(p),
            Done::Freed => {
                if let Step::Free { block } = step {
                    if let Some(h) = block.heap {
                        self.remote_freed.push((h, block.ptr));
                    }
                }
                return;
            }
            Done::Block { ptr, lost_prefix } => (ptr, lost_prefix),
        };
        if ptr == 0 {
            let asked = match step {
                Step::Realloc { block, new, .. } => {
                    // A failed realloc leaves the block as it was.
                    if let Err(other) = self.shadow.insert(block, true) {
                        self.overlap(block, other);
                    }
                    new
                }
                _ => size,
            };
            // A fixed region's refusal cannot be judged after a section
            // that freed: the room may have come after the refusal.
            let unjudged = frees && self.alloc.arena().is_some();
            if asked != 0 && !unjudged && !self.refused_fairly(asked, align) {
                self.flag(Violation::Null { size: asked, align });
            }
            return;
        }
        self.raced.pop();
        let (new_size, seed) = match step {
            Step::Alloc { size, seed, .. } => (size, seed),
            Step::Realloc { block, new, seed } => {
                if let Some(mismatch) = lost_prefix {
                    self.pending = Some(Block {
                        ptr,
                        size: new,
                        ..block
                    });
                    self.fail(Violation::ReallocPrefix {
                        old: block.ptr,
                        new: ptr,
                        old_size: block.size,
                        new_size: new,
                        mismatch,
                    });
                }
                (new, seed)
            }
            Step::Free { .. } => unreachable!("a free returns no block"),
        };
        self.adopt(ptr, new_size, align, None, Origin::Raced { seed });
    }
}

/// Bytes a queued step adds to the program's requests.
fn race_bytes(step: &Step) -> usize {
    match *step {
        Step::Alloc { size, .. } => size,
        Step::Realloc { new, .. } => new,
        Step::Free { .. } => 0,
    }
}

/// The block a step left live, as the Drop of a tolerated program must
/// release it (the old block of a failed realloc is back in the shadow).
fn raced_block(step: &Step, done: &Done) -> Option<Block> {
    let ptr = match done {
        Done::Block { ptr, .. } if *ptr != 0 => *ptr,
        _ => return None,
    };
    let (size, align) = match *step {
        Step::Alloc { size, align, .. } => (size, align),
        Step::Realloc { block, new, .. } => (new, block.align),
        Step::Free { .. } => return None,
    };
    Some(Block {
        ptr,
        size,
        align,
        usable: size,
        extent: size,
        seed: 0,
        heap: None,
    })
}
