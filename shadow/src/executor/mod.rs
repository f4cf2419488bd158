//! Runs a program against an allocator while the shadow heap checks every op.

use crate::allocator::{Allocator, EmulatedHeaps, HeapId, Heaps, ReallocToZero};
use crate::edges::IMPOSSIBLE_FROM;
use crate::guard::{self, Panicked};
use crate::model::{Block, ShadowHeap, MAX_BLOCK};
use crate::op::{NewSize, Op, Program};
use crate::pattern;
use crate::violation::{self, Report, Site, Violation};
use crate::workers::WorkerPool;

mod arena;
mod more;
mod race;

use more::ReallocCall;
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
}

/// Runs programs against one allocator.
pub struct Executor {
    alloc: &'static dyn Allocator,
    /// Used when the allocator has no heap API of its own.
    emulated: Option<EmulatedHeaps>,
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
    pub stats: Stats,
}

/// A fresh seed base for each program, so memory a previous program left
/// behind never already holds the pattern this one expects.
pub fn next_seed_base() -> u64 {
    static PROGRAMS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);
    let n = PROGRAMS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    n.wrapping_mul(0xA076_1D64_78BD_642F)
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
            emulated: alloc.heaps().is_none().then(|| EmulatedHeaps::new(alloc)),
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
            bulk: false,
            huge_requests: 0,
            finished: false,
            reference: false,
            capacity_at_start: None,
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

    fn heaps(&self) -> &dyn Heaps {
        match &self.emulated {
            Some(e) => e,
            None => self.alloc.heaps().expect("allocator lost its heap API"),
        }
    }

    fn line(&self, violation: Violation) -> String {
        let op = self
            .op
            .map_or_else(|| "end of program".to_string(), |op| op.to_string());
        let report = Report {
            op_index: self.op_index,
            op,
            site: self.site,
            violation,
        };
        use report::key::{REFERENCE, UNDER_TEST};
        let by = if self.reference {
            REFERENCE
        } else {
            UNDER_TEST
        };
        format!("{report}{by}{}]", self.alloc.name())
    }

    /// Ends the program at a violation (quietly when it is tolerated).
    fn fail(&self, violation: Violation) -> ! {
        violation::raise(self.line(violation));
    }

    /// A violation that leaves the heap sound: returns when it is
    /// tolerated, and the caller goes on with the block.
    fn flag(&self, violation: Violation) {
        debug_assert!(violation.leaves_heap_sound());
        violation::record(self.line(violation));
    }

    fn panicked(&self, p: Panicked) -> ! {
        self.fail(Violation::Panic {
            message: p.message,
            location: p.location,
        })
    }

    /// Runs `f`, an allocator call on this thread; a panic in it is a finding.
    fn guarded<R>(&self, f: impl FnOnce() -> R) -> R {
        guard::call(f).unwrap_or_else(|p| self.panicked(p))
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

    /// Makes an allocator call on the chosen thread; pointers travel as
    /// usize. A panic in the call is a finding.
    fn call(
        &mut self,
        on: On,
        f: impl FnOnce(&'static dyn Allocator) -> usize + Send + 'static,
    ) -> usize {
        let alloc = self.alloc;
        let result = match on {
            On::Main => guard::call(|| f(alloc)),
            On::Worker(w) => self.pool().run(w, move || guard::call(|| f(alloc))),
        };
        result.unwrap_or_else(|p| self.panicked(p))
    }

    /// Runs op `index` of a program. A race op only queues its step: the
    /// section runs before the next other op, or in [`Executor::finish`].
    pub fn step(&mut self, index: usize, op: &Op) -> Outcome {
        if !op.is_race() {
            self.run_race();
        }
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
        if self.checked {
            if let Some(detail) = self.guarded(|| self.alloc.take_error()) {
                self.fail(Violation::AllocatorError { detail });
            }
            if index % VALIDATE_EVERY == VALIDATE_EVERY - 1 {
                self.validate();
            }
        }
        outcome
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
        }
    }

    fn alloc_block(
        &mut self,
        size: usize,
        align: usize,
        zeroed: bool,
        heap: Option<HeapId>,
        on: On,
    ) -> Outcome {
        let impossible = size >= IMPOSSIBLE_FROM;
        if size > MAX_BLOCK && !impossible && align <= self.alloc.max_align() {
            return self.huge(size, align, zeroed, heap, on);
        }
        let room = match self.bulk {
            true => self.shadow.fits_bulk(size),
            false => self.shadow.fits(size),
        };
        if align > self.alloc.max_align() || (!impossible && !room) {
            return Outcome::Skipped;
        }
        let p = self.alloc_call(size, align, zeroed, heap, on);
        self.adopt_fresh(p, size, align, zeroed, heap)
    }

    /// Asks the allocator for a block (in `heap`, if given, on `on`).
    fn alloc_call(
        &mut self,
        size: usize,
        align: usize,
        zeroed: bool,
        heap: Option<HeapId>,
        on: On,
    ) -> usize {
        let api = match (heap.is_some() && self.emulated.is_none(), zeroed) {
            (true, false) => "heap-alloc",
            (true, true) => "heap-alloc-zeroed",
            (false, false) => "alloc",
            (false, true) => "alloc-zeroed",
        };
        self.site = Site::new(api, size, align);
        match heap {
            None => self.call(on, move |a| unsafe {
                a.alloc(size, align, zeroed) as usize
            }),
            Some(h) => {
                self.guarded(|| unsafe { self.heaps().alloc_in(h, size, align, zeroed) as usize })
            }
        }
    }

    /// Checks what a request for a fresh block returned (`p`, or null)
    /// and tracks the block.
    fn adopt_fresh(
        &mut self,
        p: usize,
        size: usize,
        align: usize,
        zeroed: bool,
        heap: Option<HeapId>,
    ) -> Outcome {
        let impossible = size >= IMPOSSIBLE_FROM;
        if impossible {
            if p != 0 && self.checked {
                self.fail(Violation::ImpossibleSuccess {
                    size,
                    align,
                    ptr: p,
                });
            }
            return Outcome::Failed;
        }
        if p == 0 {
            if size != 0 && self.checked && !self.refused_fairly(size, align) {
                self.flag(Violation::Null { size, align });
            }
            return Outcome::Failed;
        }
        self.adopt(p, size, align, heap, Origin::Fresh { zeroed })
    }

    /// Checks a block the allocator just handed out and starts tracking it.
    fn adopt(
        &mut self,
        p: usize,
        size: usize,
        align: usize,
        heap: Option<HeapId>,
        origin: Origin,
    ) -> Outcome {
        let mut block = Block {
            ptr: p,
            size,
            align,
            usable: size,
            extent: size,
            seed: 0,
            heap,
        };
        self.pending = Some(block);
        if !self.checked {
            return Outcome::Live(self.shadow.insert(block, false).expect("unchecked insert"));
        }
        if p % align != 0 {
            self.flag(Violation::Alignment {
                ptr: p,
                size,
                align,
            });
        }
        block.usable =
            self.guarded(|| unsafe { self.alloc.usable_size(p as *mut u8, size, align) });
        if let (Origin::Fresh { .. }, None) = (&origin, heap) {
            self.check_good_size(&block);
        }
        if block.usable < size {
            self.flag(Violation::UsableSize {
                ptr: p,
                size,
                usable: block.usable,
                why: "less than requested",
            });
            // Tolerated: go on as if the block had what was asked for.
            block.usable = size;
        }
        block.seed = match origin {
            Origin::Raced { seed } => seed,
            _ => self.seed(),
        };
        let index = match self.shadow.insert(block, true) {
            Ok(i) => {
                self.pending = None;
                i
            }
            Err(other) => self.overlap(block, other),
        };
        let base = p as *mut u8;
        match origin {
            Origin::Fresh { zeroed: true } => {
                if let Some(mismatch) = unsafe { pattern::check_zero(base, size, 0, block.seed) } {
                    self.flag(Violation::Zeroed {
                        ptr: p,
                        size,
                        mismatch,
                    });
                }
            }
            Origin::Fresh { zeroed: false } => {}
            Origin::Raced { seed } => {
                // Written by its worker during the section: another thread
                // that got the same memory wrote over it.
                if let Some(mismatch) = unsafe { pattern::check(base, size, size, seed) } {
                    self.fail(Violation::Contents {
                        ptr: p,
                        size,
                        mismatch,
                        when: "during a race section",
                    });
                }
                return Outcome::Live(index);
            }
            Origin::Realloc { old, zero_from } => {
                if let Some(mismatch) =
                    unsafe { pattern::check(base, old.extent, old.size.min(size), old.seed) }
                {
                    self.fail(Violation::ReallocPrefix {
                        old: old.ptr,
                        new: p,
                        old_size: old.size,
                        new_size: size,
                        mismatch,
                    });
                }
                let dirty = zero_from
                    .and_then(|from| unsafe { pattern::check_zero(base, size, from, block.seed) });
                if let Some(mismatch) = dirty {
                    self.flag(Violation::Zeroed {
                        ptr: p,
                        size,
                        mismatch,
                    });
                }
            }
        }
        unsafe { pattern::fill(base, size, block.seed) };
        Outcome::Live(index)
    }

    fn verify(&self, b: &Block, when: &'static str) {
        if let Some(mismatch) =
            unsafe { pattern::check(b.ptr as *const u8, b.extent, b.extent, b.seed) }
        {
            self.fail(Violation::Contents {
                ptr: b.ptr,
                size: b.size,
                mismatch,
                when,
            });
        }
    }

    /// Ends the program: block `b` overlaps the live block `other`.
    fn overlap(&self, b: Block, other: Block) -> ! {
        self.fail(Violation::Overlap {
            ptr: b.ptr,
            len: b.size.max(b.usable),
            other: other.ptr,
            other_len: other.size.max(other.usable),
        })
    }

    fn free_block(&mut self, i: usize, on: On) -> Outcome {
        let b = self.shadow.blocks()[i];
        if self.checked {
            self.verify(&b, "before free");
        }
        self.shadow.remove(i);
        self.free_call(b, on);
        Outcome::Done
    }

    /// Frees a block no longer tracked, through its heap if it has one.
    fn free_call(&mut self, b: Block, on: On) {
        match b.heap {
            Some(h) => {
                self.site = Site::new(self.heap_api("heap-free", "free"), b.size, b.align);
                self.guarded(|| unsafe {
                    self.heaps().free_in(h, b.ptr as *mut u8, b.size, b.align)
                })
            }
            None => {
                self.site = Site::new("free", b.size, b.align);
                self.call(on, move |a| unsafe {
                    a.free(b.ptr as *mut u8, b.size, b.align);
                    0
                });
            }
        }
    }

    /// Resizes block `i` with the realloc `call` names; a call the
    /// allocator does not have, or a size its contract leaves undefined,
    /// is skipped.
    fn realloc_block(&mut self, i: usize, to: NewSize, on: On, call: ReallocCall) -> Outcome {
        let b = self.shadow.blocks()[i];
        let new = to.resolve(b.size);
        let semantics = match call {
            ReallocCall::Plain => self.alloc.realloc_to_zero(),
            _ => ReallocToZero::Undefined,
        };
        let impossible = new >= IMPOSSIBLE_FROM;
        let extras = self.alloc.extras();
        if (new == 0 && semantics == ReallocToZero::Undefined)
            || (!impossible && !self.shadow.fits_resize(new))
            || (call != ReallocCall::Plain && (b.heap.is_some() || extras.is_none()))
        {
            return Outcome::Skipped;
        }
        if self.checked {
            self.verify(&b, "before realloc");
        }
        let api = match (call, b.heap.is_some() && self.emulated.is_none(), new) {
            (ReallocCall::Zeroed, _, _) => "realloc-zeroed",
            (ReallocCall::Unaligned, _, _) => "realloc-plain",
            (_, _, 0) => "realloc-zero",
            (_, false, _) => "realloc",
            (_, true, _) => "heap-realloc",
        };
        self.site = Site::new(api, b.size, b.align);
        let p = b.ptr as *mut u8;
        let q = match (call, b.heap, extras) {
            (ReallocCall::Plain, Some(h), _) => self.guarded(|| unsafe {
                self.heaps().realloc_in(h, p, b.size, b.align, new) as usize
            }),
            (ReallocCall::Plain, None, _) => self.call(on, move |a| unsafe {
                a.realloc(b.ptr as *mut u8, b.size, b.align, new) as usize
            }),
            (ReallocCall::Zeroed, _, Some(x)) => {
                let q = self.guarded(|| unsafe { x.realloc_zeroed(p, b.size, b.align, new) });
                match q {
                    Some(q) => q as usize,
                    None => return Outcome::Skipped,
                }
            }
            (ReallocCall::Unaligned, _, Some(x)) => {
                let q = self.guarded(|| unsafe { x.realloc_plain(p, b.size, b.align, new) });
                match q {
                    Some(q) => q as usize,
                    None => return Outcome::Skipped,
                }
            }
            (_, _, None) => unreachable!("skipped above"),
        };
        if q == 0 || impossible {
            if impossible && q != 0 && self.checked {
                self.fail(Violation::ImpossibleSuccess {
                    size: new,
                    align: b.align,
                    ptr: q,
                });
            }
            if new != 0 {
                // A failed realloc leaves the block as it was.
                if !impossible && self.checked && !self.refused_fairly(new, b.align) {
                    self.flag(Violation::Null {
                        size: new,
                        align: b.align,
                    });
                }
                if self.checked {
                    self.verify(&b, "after a failed realloc");
                }
                return Outcome::Failed;
            }
            if semantics == ReallocToZero::Allocates && self.checked {
                self.fail(Violation::Realloc {
                    ptr: b.ptr,
                    new_size: 0,
                    why: "returned null, but this API returns a block",
                });
            }
            self.shadow.remove(i);
            return Outcome::Done;
        }
        let old = self.shadow.remove(i);
        let (align, zero_from) = match call {
            ReallocCall::Plain => (b.align, None),
            ReallocCall::Zeroed => (b.align, Some(b.usable)),
            ReallocCall::Unaligned => (more::malloc_align(new), None),
        };
        self.adopt(q, new, align, b.heap, Origin::Realloc { old, zero_from })
    }

    /// Asks for the usable size and writes all of it.
    fn probe_usable(&mut self, i: usize) -> Outcome {
        let b = self.shadow.blocks()[i];
        self.site = Site::new("usable-size", b.size, b.align);
        let usable =
            self.guarded(|| unsafe { self.alloc.usable_size(b.ptr as *mut u8, b.size, b.align) });
        if !self.checked {
            return Outcome::Live(i);
        }
        self.verify(&b, "before a usable-size probe");
        if usable != b.usable {
            self.flag(Violation::UsableSize {
                ptr: b.ptr,
                size: b.size,
                usable,
                why: "changed since allocation",
            });
            // Tolerated: write only what both answers promise.
        }
        let usable = usable.min(b.usable);
        if b.size == 0 {
            // C leaves any access to a zero-size block undefined, and ASan
            // poisons it whatever malloc_usable_size says: nothing to write.
            return Outcome::Live(i);
        }
        let base = b.ptr as *mut u8;
        // The pattern's layout over the usable size, and every byte past the
        // requested size: the slack is where an oversized usable size shows.
        unsafe {
            pattern::fill(base, usable, b.seed);
            pattern::fill_range(base, b.size, usable, b.seed);
        }
        self.shadow.blocks_mut()[i].extent = usable;
        Outcome::Live(i)
    }

    fn calloc(&mut self, count: usize, size: usize) -> Outcome {
        let total = count.checked_mul(size);
        let impossible = total.is_none_or(|n| n >= IMPOSSIBLE_FROM);
        if !impossible && !self.shadow.fits(total.unwrap_or(0)) {
            return Outcome::Skipped;
        }
        self.site = Site::new("calloc", total.unwrap_or(usize::MAX), 1);
        let p = self.guarded(|| unsafe { self.alloc.calloc(count, size) }) as usize;
        match (total, p) {
            (None, 0) | (Some(0), 0) => Outcome::Failed,
            (None, p) if self.checked => self.fail(Violation::CallocOverflow {
                count,
                size,
                ptr: p,
            }),
            (Some(n), p) if impossible && p != 0 && self.checked => {
                self.fail(Violation::ImpossibleSuccess {
                    size: n,
                    align: 1,
                    ptr: p,
                })
            }
            (Some(n), 0) if !impossible && self.checked => {
                if !self.refused_fairly(n, 1) {
                    self.flag(Violation::Null { size: n, align: 1 });
                }
                Outcome::Failed
            }
            (Some(n), p) if !impossible && p != 0 => {
                self.adopt(p, n, 1, None, Origin::Fresh { zeroed: true })
            }
            _ => Outcome::Failed,
        }
    }

    fn pick_heap(&self, raw: usize) -> Option<HeapId> {
        (!self.heap_ids.is_empty()).then(|| self.heap_ids[raw % self.heap_ids.len()])
    }

    fn heap_new(&mut self) -> Outcome {
        if self.heap_ids.len() >= MAX_HEAPS {
            return Outcome::Skipped;
        }
        self.site = Site::bare(self.heap_api("heap-new", "none"));
        match self.guarded(|| self.heaps().new_heap()) {
            Some(h) => {
                self.heap_ids.push(h);
                Outcome::Done
            }
            None => Outcome::Failed,
        }
    }

    fn heap_delete(&mut self, raw: usize) -> Outcome {
        let Some(h) = self.pick_heap(raw) else {
            return Outcome::Skipped;
        };
        self.heap_ids.retain(|&x| x != h);
        self.site = Site::bare(self.heap_api("heap-delete", "free"));
        self.guarded(|| unsafe { self.heaps().delete(h) });
        for b in self
            .shadow
            .blocks_mut()
            .iter_mut()
            .filter(|b| b.heap == Some(h))
        {
            b.heap = None;
        }
        if self.checked {
            // Blocks of a deleted heap must stay valid; check them now.
            for b in self.shadow.blocks().iter().filter(|b| b.heap.is_none()) {
                self.verify(b, "after its heap was deleted");
            }
        }
        Outcome::Done
    }

    fn heap_destroy(&mut self, raw: usize) -> Outcome {
        let Some(h) = self.pick_heap(raw) else {
            return Outcome::Skipped;
        };
        self.heap_ids.retain(|&x| x != h);
        self.site = Site::bare(self.heap_api("heap-destroy", "free"));
        self.guarded(|| unsafe { self.heaps().destroy(h) });
        // The blocks are gone: drop them from the shadow without touching them.
        while let Some(i) = self.shadow.blocks().iter().position(|b| b.heap == Some(h)) {
            self.shadow.remove(i);
        }
        Outcome::Done
    }

    fn heap_visit(&mut self, h: HeapId) -> Outcome {
        self.site = Site::bare(self.heap_api("heap-visit", "none"));
        if !self.checked {
            self.guarded(|| self.heaps().visit(h));
            return Outcome::Done;
        }
        let in_heap = || self.shadow.blocks().iter().filter(|b| b.heap == Some(h));
        let disowned = self.guarded(|| {
            in_heap()
                .find(|b| self.heaps().contains(h, b.ptr) == Some(false))
                .copied()
        });
        if let Some(b) = disowned {
            self.fail(Violation::HeapOwned {
                heap: h,
                ptr: b.ptr,
            });
        }
        let Some(visited) = self.guarded(|| self.heaps().visit(h)) else {
            return Outcome::Done;
        };
        // Each live block must lie in exactly one visited block, and each
        // visited block must hold a live one.
        let holds = |(start, size): (usize, usize), p: usize| start <= p && p < start + size.max(1);
        let expected: Vec<usize> = in_heap().map(|b| b.ptr).collect();
        let missing: Vec<_> = expected
            .iter()
            .filter(|&&p| !visited.iter().any(|&v| holds(v, p)))
            .collect();
        let extra: Vec<_> = visited
            .iter()
            .filter(|&&v| !expected.iter().any(|&p| holds(v, p)))
            .map(|v| v.0)
            .collect();
        if !missing.is_empty() || !extra.is_empty() || visited.len() != expected.len() {
            self.fail(Violation::HeapVisit {
                heap: h,
                detail: format!(
                    "visit saw {} blocks, {} are live; missing {missing:x?}, extra {extra:x?}",
                    visited.len(),
                    expected.len()
                ),
            });
        }
        Outcome::Done
    }

    /// Hands a block to a worker thread, which checks its contents there.
    fn worker_check(&mut self, i: usize, worker: usize) -> Outcome {
        if !self.checked {
            return Outcome::Skipped;
        }
        let b = self.shadow.blocks()[i];
        self.site = Site::new("check", b.size, b.align);
        let bad = self.pool().run(worker, move || unsafe {
            pattern::check(b.ptr as *const u8, b.extent, b.extent, b.seed).is_some()
        });
        if bad {
            self.verify(&b, "when checked on another thread");
        }
        Outcome::Live(i)
    }

    fn validate(&mut self) {
        self.site = Site::bare("validate");
        if let Err(detail) = self.guarded(|| self.alloc.validate(&self.shadow.live())) {
            self.fail(Violation::Validator { detail });
        }
    }

    /// Validates, checks and frees every live block, ends every heap, lets
    /// the allocator drop per-program state, and holds an allocator over a
    /// fixed region to the capacity it had when the program started.
    pub fn finish(&mut self, op_count: usize) {
        self.run_race();
        crate::sanitizer::check();
        self.op_index = op_count;
        self.op = None;
        if self.checked {
            self.validate();
        }
        while !self.shadow.is_empty() {
            let last = self.shadow.len() - 1;
            self.free_block(last, On::Main);
        }
        self.site = Site::bare("end");
        for h in std::mem::take(&mut self.heap_ids) {
            self.guarded(|| unsafe { self.heaps().delete(h) });
        }
        if self.checked {
            if let Some(detail) = self.guarded(|| self.alloc.take_error()) {
                self.fail(Violation::AllocatorError { detail });
            }
        }
        self.guarded(|| self.alloc.reset());
        if let Some(start) = self.capacity_at_start.filter(|_| self.checked) {
            self.check_capacity(start);
        }
        crate::sanitizer::check();
        self.finished = true;
    }

    /// `real` when the allocator has its own heap API, else `emulated`
    /// (emulated heaps call the allocator's plain functions).
    fn heap_api(&self, real: &'static str, emulated: &'static str) -> &'static str {
        match self.emulated {
            None => real,
            Some(_) => emulated,
        }
    }

    /// Frees a block on the main thread without checking it (a panic in
    /// the allocator is ignored: the program is already over).
    fn release(&self, b: Block) {
        let _ = guard::call(|| match b.heap {
            Some(h) => unsafe { self.heaps().free_in(h, b.ptr as *mut u8, b.size, b.align) },
            None => unsafe { self.alloc.free(b.ptr as *mut u8, b.size, b.align) },
        });
    }
}

/// A program that ended at a tolerated violation releases what it holds
/// as the executor drops, without checks: its blocks and heaps go back to
/// the allocator, so a soak that gets past a known bug does not leak. A
/// block that overlaps a live one is forgotten instead, as freeing it
/// would free the live one twice.
impl Drop for Executor {
    fn drop(&mut self) {
        if self.finished || !violation::tolerating() {
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
            let _ = guard::call(|| unsafe { self.heaps().delete(h) });
        }
        let _ = guard::call(|| {
            self.alloc.take_error();
            self.alloc.reset();
        });
    }
}
