//! Runs a program against an allocator while the shadow heap checks every op.

use crate::allocator::Allocator;
use crate::guard;
use crate::model::{Block, ShadowHeap};
use crate::op::{Family, Op, Program};
use crate::tolerance;
use crate::violation::{Site, Violation};

mod arena;
mod attack;
mod attack_seen;
mod blocks;
mod calls;
mod checks;
mod child;
mod claims;
mod contention;
mod heap_table;
mod heaps;
mod hooked;
mod huge;
mod kept;
mod more;
mod os_fail;
mod race;
mod race_ops;
mod race_run;
mod race_steps;
mod realloc;
mod released;
mod slack;
mod untracked;
mod walk;
pub mod workload;

use arena::ArenaProbe;
use blocks::Request;
use calls::{CallGuard, On, Workers};
use heap_table::HeapTable;
use huge::HugeBudget;
use kept::KeptProbe;
use os_fail::OsWindow;
use race::Section;
pub use race_run::serial_races;
use untracked::Untracked;
use walk::WalkProbe;

/// Validators run after every this many ops, and at the end.
const VALIDATE_EVERY: usize = 64;

pub use crate::settings::Mode;
pub use crate::tally::Stats;

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

/// Which realloc a resize calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ReallocCall {
    /// [`crate::allocator::Allocator::realloc`] (or the heap's), which
    /// keeps the block's alignment.
    Plain,
    /// The zeroed realloc: bytes past where [`crate::allocator::ZeroedFrom`]
    /// says read zero.
    Zeroed,
    /// C's plain realloc of a block of any alignment.
    Unaligned,
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
    /// One of the blocks a contention op's owner allocated in one job,
    /// filled with `seed`'s pattern on its thread before the next call.
    Batched {
        seed: u64,
    },
}

/// Runs programs against one allocator: the dispatcher of one op, which
/// owns the parts an op works with (each its own type) and the program's
/// mode and counts.
pub struct Executor {
    alloc: &'static dyn Allocator,
    checked: bool,
    /// The model of the live blocks.
    shadow: ShadowHeap,
    /// Blocks the allocator handed out that the shadow does not track yet.
    untracked: Untracked,
    seeds: Seeds,
    /// The call guard, and what a violation is of.
    guard: CallGuard,
    /// The heaps the program holds.
    heaps: HeapTable,
    workers: Workers,
    /// The race section being queued.
    race: Section,
    /// What an allocator over a fixed region could serve when the program
    /// started (checked runs only), held against its end.
    arena: ArenaProbe,
    kept: KeptProbe,
    /// The allocator's walk of its blocks in use, where it has one.
    walk: WalkProbe,
    /// An `os-fail`'s window.
    os: OsWindow,
    /// Huge requests made so far.
    huge: HugeBudget,
    /// A `race-fork` or an `attack` has forked (one a program does).
    forked: bool,
    /// A `purge` ran: the program's end checks its live blocks' pages.
    purged: bool,
    /// A `hook-free` ran: the allocator's hook holds blocks.
    hooked: bool,
    finished: bool,
    pub stats: Stats,
}

/// The seeds of the blocks' patterns: distinct and deterministic, from a
/// base the executor starts with.
struct Seeds {
    next: u64,
}

impl Seeds {
    fn new(base: u64) -> Seeds {
        Seeds { next: base }
    }

    fn next(&mut self) -> u64 {
        // splitmix64: distinct, deterministic seeds per block.
        self.next = self.next.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.next;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

/// A fresh seed base for each program, so memory a previous program left
/// behind never already holds the pattern this one expects.
/// The alignment a plain request gets: malloc's (16), or the allocator's
/// largest when that is less (an embedded heap that serves 8-aligned
/// blocks only). The capacity check probes with it, and a misalignment
/// below it may be the allocator's layout ([`CallGuard`]'s `misaligned`).
fn plain_align(alloc: &dyn Allocator) -> usize {
    16.min(alloc.max_align())
}

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
        let checked = mode == Mode::Checked;
        let heaps = HeapTable::new(alloc);
        let mut guard = CallGuard::new(alloc);
        // The start probe's calls are a path of their own: a heap they
        // break is keyed by the code they ran, as an op's calls are.
        guard.set_site(Site::bare("start"));
        crate::coverage::begin_op();
        let arena = ArenaProbe::new(alloc, &guard, checked);
        let kept = KeptProbe::new(alloc, &guard, checked);
        let walk = WalkProbe::new(alloc, &guard, checked);
        Executor {
            alloc,
            checked,
            shadow: ShadowHeap::default(),
            untracked: Untracked::default(),
            seeds: Seeds::new(seed_base),
            guard,
            heaps,
            workers: Workers::default(),
            race: Section::default(),
            arena,
            kept,
            walk,
            os: OsWindow::new(alloc),
            huge: HugeBudget::default(),
            forked: false,
            purged: false,
            hooked: false,
            finished: false,
            stats: Stats::default(),
        }
    }

    /// Makes this the reference side of a differential run: its violation
    /// lines end `[reference allocator <name>]`, so they are never taken for
    /// the allocator under test's ([`report::key::key_of`] keeps the suffix).
    pub fn as_reference(mut self) -> Executor {
        self.guard.as_reference();
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
        self.guard.site()
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
        self.guard.begin(index, Some(*op));
        self.stats.ops += 1;
        crate::writer::arm(index, self.guard.is_reference());
        let outcome = self.dispatch(op);
        crate::writer::end_in_child_after(index, self.guard.is_reference());
        crate::sanitizer::check();
        match outcome {
            Outcome::Skipped => self.stats.skipped += 1,
            Outcome::Failed => self.stats.failed += 1,
            _ => {}
        }
        self.count_os_window(op);
        if self.checked && self.hooked {
            self.check_hooked();
        }
        self.locate_changes();
        if self.checked {
            if let Some(detail) = self.guard.asked(|| self.alloc.take_error()) {
                self.guard.fail(Violation::AllocatorError { detail });
            }
            self.guard.heap_check();
            self.walk.check_listed(&self.guard, self.shadow.blocks());
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
                self.guard.verify_after_call(b, "by this op's calls");
            }
        }
    }

    /// Whether changed contents are located at the calls that made them:
    /// in a checked replay.
    fn locating(&self) -> bool {
        self.checked && crate::findings::recording()
    }

    /// Runs `op` by its family: each family's function is a table of its
    /// ops.
    fn dispatch(&mut self, op: &Op) -> Outcome {
        match op.family() {
            Family::Block => self.block_op(op),
            Family::Heap => self.heap_op(op),
            Family::Worker => self.worker_op(op),
            Family::Race => self.race_op(op),
            // The `workload` target's programs run on their own runner.
            Family::Workload => Outcome::Skipped,
        }
    }

    /// A block op on the main thread (and the ops that act on the
    /// allocator as a whole: attacks, purges, OS failures, the hook).
    /// [`Executor::dispatch`] hands it block ops only.
    fn block_op(&mut self, op: &Op) -> Outcome {
        let slot = |s: &Self, raw: usize| s.shadow.slot(raw);
        match *op {
            Op::Alloc {
                size,
                align,
                zeroed,
            } => self.alloc_block(Request::new(size, align, zeroed, None), On::Main),
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
            Op::Attack { attack, size } => self.attack(attack, size),
            Op::Purge { delay, force } => self.purge(delay, force),
            Op::OsFail { ops } => self.os_fail(ops),
            Op::HookFree { slot: s } => {
                slot(self, s).map_or(Outcome::Skipped, |i| self.hook_free(i))
            }
            _ => unreachable!("not a block op: {op}"),
        }
    }

    /// A worker's op, or its thread's exit. [`Executor::dispatch`] hands
    /// it worker ops only.
    fn worker_op(&mut self, op: &Op) -> Outcome {
        let slot = |s: &Self, raw: usize| s.shadow.slot(raw);
        match *op {
            Op::WorkerAlloc {
                worker,
                size,
                align,
            } => self.alloc_block(Request::plain(size, align), On::Worker(worker)),
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
            // Not an impossible request, whose check keeps a thread-local
            // of the harness's own (`sanitizer::must_fail`), gone by then;
            // nor a huge one, which has a path and a budget of its own.
            Op::ExitAlloc {
                worker,
                size,
                align,
            } if size <= crate::edges::MAX_BLOCK => {
                self.alloc_block(Request::plain(size, align), On::Exiting(worker))
            }
            Op::ExitAlloc { .. } => Outcome::Skipped,
            Op::ExitFree { worker, slot: s } => slot(self, s).map_or(Outcome::Skipped, |i| {
                self.free_block(i, On::Exiting(worker))
            }),
            Op::ThreadExit { worker, restart } => {
                let pool = self.workers.pool();
                pool.exit(worker);
                if restart {
                    pool.run(worker, || ());
                }
                Outcome::Done
            }
            _ => unreachable!("not a worker op: {op}"),
        }
    }

    /// Validates, checks and frees every live block, ends every heap, lets
    /// the allocator drop per-program state, and holds an allocator over a
    /// fixed region to the capacity it had when the program started.
    pub fn finish(&mut self, op_count: usize) {
        self.run_race();
        crate::coverage::begin_op();
        crate::sanitizer::check();
        self.guard.begin(op_count, None);
        self.end_os_window();
        if self.hooked {
            self.settle_hook(self.alloc.extras());
        }
        if self.checked {
            if self.purged {
                self.check_released("at the end of a program that purged", false);
            }
            self.validate();
        }
        self.free_kept_huge();
        // The path of what the closing frees break is theirs so far.
        crate::coverage::begin_op();
        while !self.shadow.is_empty() {
            let last = self.shadow.len() - 1;
            if self.locating() {
                // Every op's changes were located after it: a change now
                // is the closing frees'.
                let b = &self.shadow.blocks()[last];
                self.guard.verify_after_call(b, "by the closing frees");
            }
            self.free_block(last, On::Main);
            if self.checked {
                self.guard.heap_check();
            }
        }
        self.guard.set_site(Site::bare("end"));
        for h in self.heaps.take_ids() {
            // SAFETY: `h` was a live heap of the table, whose ids are taken here so it is not
            // used again; every block was freed above.
            self.guard.guarded(|| unsafe { self.heaps.api().delete(h) });
        }
        if self.checked {
            if let Some(detail) = self.guard.asked(|| self.alloc.take_error()) {
                self.guard.fail(Violation::AllocatorError { detail });
            }
            self.guard.heap_check();
        }
        self.guard.asked(|| self.alloc.reset());
        if self.checked {
            self.arena.check_capacity(&self.guard);
            self.walk.check_kept(&self.guard);
            self.kept.check(&self.guard);
        }
        self.guard
            .asked(|| crate::resident::after_program(self.alloc));
        crate::sanitizer::check();
        self.stats.calls += self.guard.take_calls() + self.stats.race_calls;
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
        if self.hooked {
            hooked::drop_held(&self.shadow, self.alloc.extras());
        }
        for b in self.untracked.take() {
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
        if let Some(b) = self.huge.kept.take() {
            self.release(b);
        }
        for h in self.heaps.take_ids() {
            // SAFETY: `h` was a live heap of the table, whose ids are taken here so it is not
            // used again; every tracked block was released above.
            let _ = guard::call(|| unsafe { self.heaps.api().delete(h) });
        }
        let _ = guard::call(|| {
            self.alloc.take_error();
            self.alloc.reset();
        });
    }
}
