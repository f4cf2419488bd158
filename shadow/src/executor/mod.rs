//! Runs a program against an allocator while the shadow heap checks every op.

use crate::allocator::{Allocator, EmulatedHeaps, HeapId};
use crate::guard;
use crate::model::{Block, ShadowHeap};
use crate::op::{Op, Program};
use crate::tolerance;
use crate::violation::{Site, Violation};
use crate::workers::WorkerPool;

mod arena;
mod blocks;
mod calls;
mod checks;
mod claims;
mod contention;
mod heaps;
mod more;
mod race;

use more::ReallocCall;
pub use race::serial_races;
use race::Section;

/// Validators run after every this many ops, and at the end.
const VALIDATE_EVERY: usize = 64;
/// Most heaps a program holds at once.
const MAX_HEAPS: usize = 8;

/// Whether the shadow model runs (`Checked`) or only the allocator calls
/// (`Bare`, the cost floor `just bench` compares against).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    Checked,
    Bare,
}

/// What an op did, for the differential target to compare.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Caps, API limits or nothing to act on: the op did nothing.
    Skipped,
    /// The allocator refused the request cleanly.
    Failed,
    /// The op left this block live (index into the shadow heap).
    Live(usize),
    /// The op ended a block or heap, or changed no block.
    Done,
}

/// Which thread makes the allocator call.
#[derive(Clone, Copy)]
enum On {
    Main,
    Worker(usize),
}

/// What a new block is: a fresh allocation, the result of a realloc (of a
/// zeroed realloc: `zero_from` is where the bytes that must read zero
/// start), or a block a race section's worker already wrote the pattern of
/// `seed` into.
enum Origin {
    Fresh {
        zeroed: bool,
    },
    Realloc {
        old: Block,
        zero_from: Option<usize>,
    },
    Raced {
        seed: u64,
    },
}

/// Counts of what a program did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    pub ops: usize,
    pub skipped: usize,
    pub failed: usize,
    /// Race sections run, and of them, those in which two or more workers
    /// were inside the allocator at once.
    pub race_sections: usize,
    pub races: usize,
    /// Allocator calls made, and of them, those made inside race
    /// sections; the most workers inside the allocator at once.
    pub calls: usize,
    pub race_calls: usize,
    pub most_inside: usize,
}

/// Runs programs against one allocator.
pub struct Executor {
    alloc: &'static dyn Allocator,
    /// Used when the allocator has no heap API of its own.
    emulated: Option<std::sync::Arc<EmulatedHeaps>>,
    shadow: ShadowHeap,
    heap_ids: Vec<HeapId>,
    pool: Option<std::sync::MutexGuard<'static, WorkerPool>>,
    checked: bool,
    op_index: usize,
    op: Option<Op>,
    /// The allocator call the op is making, for violation keys.
    site: Site,
    next_seed: u64,
    /// A block the allocator returned that is being checked, not yet tracked.
    pending: Option<Block>,
    /// The race section being queued.
    race: Section,
    /// Blocks a race section returned that are not yet checked and tracked
    /// (the next to adopt is last).
    raced: Vec<Block>,
    /// Heap blocks freed by a race section's other threads since their
    /// heap last collected: a visit may still list them, as a heap defers
    /// a free from another thread to its own (mimalloc's page keeps a
    /// "list of deferred free blocks freed by other threads").
    remote_freed: Vec<(HeapId, usize)>,
    /// Inside a bulk allocation: the bulk cap on live blocks applies.
    bulk: bool,
    /// Huge requests made so far (each is freed at once).
    huge_requests: usize,
    finished: bool,
    /// The reference side of a differential run: its violations name the
    /// reference allocator, not the allocator under test.
    reference: bool,
    /// What an allocator over a fixed region could serve when the program
    /// started (checked runs only), held against its end.
    capacity_at_start: Option<arena::Capacity>,
    /// Allocator calls made outside race sections so far.
    calls: std::cell::Cell<usize>,
    pub stats: Stats,
}

/// A fresh seed base for each program, so memory a previous program left
/// behind never already holds the pattern this one expects.
fn next_seed_base() -> u64 {
    static PROGRAMS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = PROGRAMS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    n.wrapping_mul(0xA076_1D64_78BD_642F)
}

/// The seed base of a run of `program`: from its ops, so a replay of one
/// input in a fresh process gives its blocks the very seeds the fuzz
/// process's run gave them (where a large block's checked windows fall,
/// what its pattern is), and finds what fuzzing found. The same program
/// run again right after gets a fresh base, so memory its last run left
/// behind never already holds the pattern it expects.
pub fn seed_base_for(program: &Program) -> u64 {
    use std::hash::{Hash, Hasher};
    static LAST: std::sync::Mutex<(u64, u64)> = std::sync::Mutex::new((0, 0));
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    program.ops.hash(&mut hasher);
    let ops = hasher.finish();
    let mut last = LAST.lock().unwrap_or_else(|e| e.into_inner());
    let again = if last.0 == ops { last.1 + 1 } else { 0 };
    *last = (ops, again);
    ops ^ again.wrapping_mul(0xA076_1D64_78BD_642F)
}

impl Executor {
    /// An executor whose blocks' seeds start at a fresh base.
    pub fn new(alloc: &'static dyn Allocator, mode: Mode) -> Executor {
        Executor::with_seed_base(alloc, mode, next_seed_base())
    }

    /// An executor whose blocks' seeds follow from `seed_base` (the two
    /// sides of a differential run share one).
    pub fn with_seed_base(alloc: &'static dyn Allocator, mode: Mode, seed_base: u64) -> Executor {
        // A report from the end of the last program (its blocks released
        // without checks) is not this program's.
        crate::sanitizer::clear();
        let mut executor = Executor {
            alloc,
            emulated: alloc
                .heaps()
                .is_none()
                .then(|| std::sync::Arc::new(EmulatedHeaps::new(alloc))),
            shadow: ShadowHeap::default(),
            heap_ids: Vec::new(),
            pool: None,
            checked: mode == Mode::Checked,
            op_index: 0,
            op: None,
            site: Site::bare("none"),
            next_seed: seed_base,
            pending: None,
            race: Section::default(),
            raced: Vec::new(),
            remote_freed: Vec::new(),
            bulk: false,
            huge_requests: 0,
            finished: false,
            reference: false,
            capacity_at_start: None,
            calls: std::cell::Cell::new(0),
            stats: Stats::default(),
        };
        if executor.checked {
            executor.capacity_at_start = executor.capacity();
        }
        executor
    }

    /// Makes this the reference side of a differential run: its violation
    /// lines end `[reference allocator <name>]`, so they are never taken for
    /// the allocator under test's ([`report::key::key_of`] keeps the suffix).
    pub fn as_reference(mut self) -> Executor {
        self.reference = true;
        self
    }

    /// Runs every op, then frees what is left. Panics with an
    /// `allocsoak violation:` line at the first broken invariant.
    pub fn run(mut self, program: &Program) -> Stats {
        for (i, op) in program.ops.iter().enumerate() {
            self.step(i, op);
        }
        self.finish(program.ops.len());
        self.stats
    }

    pub fn shadow(&self) -> &ShadowHeap {
        &self.shadow
    }

    /// The allocator call the last op made.
    pub fn site(&self) -> Site {
        self.site
    }

    fn seed(&mut self) -> u64 {
        // splitmix64: distinct, deterministic seeds per block.
        self.next_seed = self.next_seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.next_seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn pool(&mut self) -> &mut WorkerPool {
        self.pool.get_or_insert_with(WorkerPool::lock)
    }

    /// Runs op `index` of a program. A race op only queues its step: the
    /// section runs before the next other op, or in [`Executor::finish`].
    pub fn step(&mut self, index: usize, op: &Op) -> Outcome {
        if op.uses_other_threads() && self.alloc.single_threaded() {
            self.stats.ops += 1;
            self.stats.skipped += 1;
            return Outcome::Skipped;
        }
        if !op.is_race() {
            self.run_race();
        }
        crate::coverage::begin_op();
        self.op_index = index;
        self.op = Some(*op);
        self.stats.ops += 1;
        let outcome = self.dispatch(op);
        crate::sanitizer::check();
        match outcome {
            Outcome::Skipped => self.stats.skipped += 1,
            Outcome::Failed => self.stats.failed += 1,
            _ => {}
        }
        self.locate_changes();
        if self.checked {
            if let Some(detail) = self.asked(|| self.alloc.take_error()) {
                self.fail(Violation::AllocatorError { detail });
            }
            if index % VALIDATE_EVERY == VALIDATE_EVERY - 1 {
                self.validate();
            }
        }
        outcome
    }

    /// In a replay, checks every live block after each op's calls, so a
    /// block changed by another block's call (a free-list link written
    /// into it, a page purged under it) is found at that call and keyed by
    /// its path, wherever the fuzzing process came upon it. Fuzzing checks
    /// a block only where it uses it: this costs a pass over the live
    /// bytes per op.
    fn locate_changes(&self) {
        if self.locating() {
            for b in self.shadow.blocks() {
                self.verify_after_call(b, "by this op's calls");
            }
        }
    }

    /// Whether changed contents are located at the calls that made them:
    /// in a checked replay.
    fn locating(&self) -> bool {
        self.checked && crate::findings::recording()
    }

    fn dispatch(&mut self, op: &Op) -> Outcome {
        let slot = |s: &Self, raw: usize| s.shadow.slot(raw);
        match *op {
            Op::Alloc {
                size,
                align,
                zeroed,
            } => self.alloc_block(size, align, zeroed, None, On::Main),
            Op::Free { slot: s } => {
                slot(self, s).map_or(Outcome::Skipped, |i| self.free_block(i, On::Main))
            }
            Op::Realloc { slot: s, to } => slot(self, s).map_or(Outcome::Skipped, |i| {
                self.realloc_block(i, to, On::Main, ReallocCall::Plain)
            }),
            Op::UsableSize { slot: s } => {
                slot(self, s).map_or(Outcome::Skipped, |i| self.probe_usable(i))
            }
            Op::Calloc { count, size } => self.calloc(count, size),
            Op::BulkAlloc { size, align, count } => self.bulk_alloc(size, align, count),
            Op::BulkFree {
                slot: s,
                count,
                order,
            } => slot(self, s).map_or(Outcome::Skipped, |i| self.bulk_free(i, count, order)),
            Op::ReallocZeroed { slot: s, to } => slot(self, s).map_or(Outcome::Skipped, |i| {
                self.realloc_block(i, to, On::Main, ReallocCall::Zeroed)
            }),
            Op::ResizeInPlace { slot: s, to, extra } => {
                slot(self, s).map_or(Outcome::Skipped, |i| self.resize_in_place(i, to, extra))
            }
            Op::FreeSized { slot: s } => {
                slot(self, s).map_or(Outcome::Skipped, |i| self.free_sized(i))
            }
            Op::ReallocPlain { slot: s, to } => slot(self, s).map_or(Outcome::Skipped, |i| {
                self.realloc_block(i, to, On::Main, ReallocCall::Unaligned)
            }),
            Op::ReallocNull { size } => self.realloc_null(size),
            Op::FreeNull => self.free_null(),
            Op::Purge { delay, force } => self.purge(delay, force),
            Op::HeapNew => self.heap_new(),
            Op::HeapDelete { heap } => self.heap_delete(heap),
            Op::HeapDestroy { heap } => self.heap_destroy(heap),
            Op::HeapAlloc {
                heap,
                size,
                align,
                zeroed,
            } => {
                if self.heap_ids.is_empty() {
                    self.heap_new();
                }
                match self.heap_ids.is_empty() {
                    true => Outcome::Skipped,
                    false => {
                        let h = self.heap_ids[heap % self.heap_ids.len()];
                        self.alloc_block(size, align, zeroed, Some(h), On::Main)
                    }
                }
            }
            Op::HeapCollect { heap, force } => self.pick_heap(heap).map_or(Outcome::Skipped, |h| {
                self.site = Site::bare("heap-collect");
                self.guarded(|| self.heaps().collect(h, force));
                self.remote_freed.retain(|&(of, _)| of != h);
                Outcome::Done
            }),
            Op::HeapVisit { heap } => self
                .pick_heap(heap)
                .map_or(Outcome::Skipped, |h| self.heap_visit(h)),
            Op::WorkerAlloc {
                worker,
                size,
                align,
            } => self.alloc_block(size, align, false, None, On::Worker(worker)),
            Op::WorkerFree { worker, slot: s } => {
                slot(self, s).map_or(Outcome::Skipped, |i| self.free_block(i, On::Worker(worker)))
            }
            Op::WorkerRealloc {
                worker,
                slot: s,
                to,
            } => slot(self, s).map_or(Outcome::Skipped, |i| {
                self.realloc_block(i, to, On::Worker(worker), ReallocCall::Plain)
            }),
            Op::WorkerCheck { worker, slot: s } => {
                slot(self, s).map_or(Outcome::Skipped, |i| self.worker_check(i, worker))
            }
            Op::ThreadExit { worker, restart } => {
                let pool = self.pool();
                pool.exit(worker);
                if restart {
                    pool.run(worker, || ());
                }
                Outcome::Done
            }
            Op::RaceAlloc {
                worker,
                size,
                align,
            } => self.queue_alloc(worker, size, align),
            Op::RaceFree { worker, slot: s } => {
                slot(self, s).map_or(Outcome::Skipped, |i| self.queue_resize(worker, i, None))
            }
            Op::RaceRealloc {
                worker,
                slot: s,
                to,
            } => slot(self, s).map_or(Outcome::Skipped, |i| self.queue_resize(worker, i, Some(to))),
            Op::RaceRemoteFree {
                freer,
                owner,
                size,
                align,
                count,
            } => self.remote_free_race(freer, owner, size, align, count),
            Op::RaceExit {
                worker,
                size,
                align,
                count,
            } => self.race_exit(worker, size, align, count),
            Op::RaceChurn { size, align, count } => self.queue_churn(size, align, count),
        }
    }

    /// Validates, checks and frees every live block, ends every heap, lets
    /// the allocator drop per-program state, and holds an allocator over a
    /// fixed region to the capacity it had when the program started.
    pub fn finish(&mut self, op_count: usize) {
        self.run_race();
        crate::coverage::begin_op();
        crate::sanitizer::check();
        self.op_index = op_count;
        self.op = None;
        if self.checked {
            self.validate();
        }
        // The path of what the closing frees break is theirs so far.
        crate::coverage::begin_op();
        while !self.shadow.is_empty() {
            let last = self.shadow.len() - 1;
            if self.locating() {
                // Every op's changes were located after it: a change now
                // is the closing frees'.
                self.verify_after_call(&self.shadow.blocks()[last], "by the closing frees");
            }
            self.free_block(last, On::Main);
        }
        self.site = Site::bare("end");
        for h in std::mem::take(&mut self.heap_ids) {
            // SAFETY: `h` was live in `heap_ids`, which is taken here so it is not used again;
            // every block was freed above.
            self.guarded(|| unsafe { self.heaps().delete(h) });
        }
        if self.checked {
            if let Some(detail) = self.asked(|| self.alloc.take_error()) {
                self.fail(Violation::AllocatorError { detail });
            }
        }
        self.asked(|| self.alloc.reset());
        if let Some(start) = self.capacity_at_start.filter(|_| self.checked) {
            self.check_capacity(start);
        }
        crate::sanitizer::check();
        self.stats.calls += self.calls.take() + self.stats.race_calls;
        self.finished = true;
    }
}

/// A program that ended at a tolerated violation releases what it holds
/// as the executor drops, without checks: its blocks and heaps go back to
/// the allocator, so a soak that gets past a known bug does not leak. A
/// block that overlaps a live one is forgotten instead, as freeing it
/// would free the live one twice.
impl Drop for Executor {
    fn drop(&mut self) {
        if self.finished || !tolerance::tolerating() {
            return;
        }
        self.checked = false;
        let unchecked = self
            .pending
            .take()
            .into_iter()
            .chain(std::mem::take(&mut self.raced));
        for b in unchecked {
            if self.shadow.overlapping(b.ptr, b.end()).is_none() {
                // Tracked, so a second raced block at the same place is
                // forgotten rather than freed twice.
                let _ = self.shadow.insert(b, true);
            }
        }
        while !self.shadow.is_empty() {
            let b = self.shadow.remove(self.shadow.len() - 1);
            self.release(b);
        }
        for h in std::mem::take(&mut self.heap_ids) {
            // SAFETY: `h` was live in `heap_ids`, which is taken here so it is not used again;
            // every tracked block was released above.
            let _ = guard::call(|| unsafe { self.heaps().delete(h) });
        }
        let _ = guard::call(|| {
            self.alloc.take_error();
            self.alloc.reset();
        });
    }
}
