//! Runs a program against an allocator while the shadow heap checks every op.

use crate::allocator::{Allocator, EmulatedHeaps, HeapId, Heaps, ReallocToZero};
use crate::edges::IMPOSSIBLE_FROM;
use crate::model::{Block, ShadowHeap};
use crate::op::{NewSize, Op, Program};
use crate::pattern;
use crate::violation::{self, Report, Violation};
use crate::workers::WorkerPool;

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

/// What a new block is: a fresh allocation or the result of a realloc.
enum Origin {
    Fresh { zeroed: bool },
    Realloc(Block),
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
    next_seed: u64,
    /// A block the allocator returned that is being checked, not yet tracked.
    pending: Option<Block>,
    finished: bool,
    pub stats: Stats,
}

impl Executor {
    pub fn new(alloc: &'static dyn Allocator, mode: Mode) -> Executor {
        Executor {
            alloc,
            emulated: alloc.heaps().is_none().then(|| EmulatedHeaps::new(alloc)),
            shadow: ShadowHeap::default(),
            heap_ids: Vec::new(),
            pool: None,
            checked: mode == Mode::Checked,
            op_index: 0,
            op: None,
            next_seed: 0,
            pending: None,
            finished: false,
            stats: Stats::default(),
        }
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

    fn heaps(&self) -> &dyn Heaps {
        match &self.emulated {
            Some(e) => e,
            None => self.alloc.heaps().expect("allocator lost its heap API"),
        }
    }

    fn fail(&self, violation: Violation) -> ! {
        let op = self
            .op
            .map_or_else(|| "end of program".to_string(), |op| op.to_string());
        let report = Report {
            op_index: self.op_index,
            op,
            violation,
        };
        violation::raise(format!("{report} [allocator {}]", self.alloc.name()));
    }

    fn seed(&mut self) -> u64 {
        // splitmix64: distinct, deterministic seeds per block.
        self.next_seed = self.next_seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.next_seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Makes an allocator call on the chosen thread; pointers travel as usize.
    fn call(
        &mut self,
        on: On,
        f: impl FnOnce(&'static dyn Allocator) -> usize + Send + 'static,
    ) -> usize {
        let alloc = self.alloc;
        match on {
            On::Main => f(alloc),
            On::Worker(w) => self
                .pool
                .get_or_insert_with(WorkerPool::lock)
                .run(w, move || f(alloc)),
        }
    }

    /// Runs op `index` of a program.
    pub fn step(&mut self, index: usize, op: &Op) -> Outcome {
        self.op_index = index;
        self.op = Some(*op);
        self.stats.ops += 1;
        let outcome = self.dispatch(op);
        match outcome {
            Outcome::Skipped => self.stats.skipped += 1,
            Outcome::Failed => self.stats.failed += 1,
            _ => {}
        }
        if self.checked {
            if let Some(detail) = self.alloc.take_error() {
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
            Op::Realloc { slot: s, to } => {
                slot(self, s).map_or(Outcome::Skipped, |i| self.realloc_block(i, to, On::Main))
            }
            Op::UsableSize { slot: s } => {
                slot(self, s).map_or(Outcome::Skipped, |i| self.probe_usable(i))
            }
            Op::Calloc { count, size } => self.calloc(count, size),
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
                self.heaps().collect(h, force);
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
                self.realloc_block(i, to, On::Worker(worker))
            }),
            Op::WorkerCheck { worker, slot: s } => {
                slot(self, s).map_or(Outcome::Skipped, |i| self.worker_check(i, worker))
            }
            Op::ThreadExit { worker, restart } => {
                let pool = self.pool.get_or_insert_with(WorkerPool::lock);
                pool.exit(worker);
                if restart {
                    pool.run(worker, || 0);
                }
                Outcome::Done
            }
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
        if align > self.alloc.max_align() || (!impossible && !self.shadow.fits(size)) {
            return Outcome::Skipped;
        }
        let p = match heap {
            None => self.call(on, move |a| unsafe {
                a.alloc(size, align, zeroed) as usize
            }),
            Some(h) => unsafe { self.heaps().alloc_in(h, size, align, zeroed) as usize },
        };
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
            if size != 0 && self.checked {
                self.fail(Violation::Null { size, align });
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
            self.fail(Violation::Alignment {
                ptr: p,
                size,
                align,
            });
        }
        block.usable = unsafe { self.alloc.usable_size(p as *mut u8, size, align) };
        if block.usable < size {
            self.fail(Violation::UsableSize {
                ptr: p,
                size,
                usable: block.usable,
                why: "less than requested",
            });
        }
        block.seed = self.seed();
        let index = match self.shadow.insert(block, true) {
            Ok(i) => {
                self.pending = None;
                i
            }
            Err(other) => self.fail(Violation::Overlap {
                ptr: p,
                len: size.max(block.usable),
                other: other.ptr,
                other_len: other.size.max(other.usable),
            }),
        };
        let base = p as *mut u8;
        match origin {
            Origin::Fresh { zeroed: true } => {
                if let Some(mismatch) = unsafe { pattern::check_zero(base, size) } {
                    self.fail(Violation::Zeroed {
                        ptr: p,
                        size,
                        mismatch,
                    });
                }
            }
            Origin::Fresh { zeroed: false } => {}
            Origin::Realloc(old) => {
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

    fn free_block(&mut self, i: usize, on: On) -> Outcome {
        let b = self.shadow.blocks()[i];
        if self.checked {
            self.verify(&b, "before free");
        }
        self.shadow.remove(i);
        match b.heap {
            Some(h) => unsafe { self.heaps().free_in(h, b.ptr as *mut u8, b.size, b.align) },
            None => {
                self.call(on, move |a| unsafe {
                    a.free(b.ptr as *mut u8, b.size, b.align);
                    0
                });
            }
        }
        Outcome::Done
    }

    fn realloc_block(&mut self, i: usize, to: NewSize, on: On) -> Outcome {
        let b = self.shadow.blocks()[i];
        let new = to.resolve(b.size);
        let semantics = self.alloc.realloc_to_zero();
        let impossible = new >= IMPOSSIBLE_FROM;
        if (new == 0 && semantics == ReallocToZero::Undefined)
            || (!impossible && !self.shadow.fits_resize(new))
        {
            return Outcome::Skipped;
        }
        if self.checked {
            self.verify(&b, "before realloc");
        }
        let q = match b.heap {
            Some(h) => unsafe {
                self.heaps()
                    .realloc_in(h, b.ptr as *mut u8, b.size, b.align, new) as usize
            },
            None => self.call(on, move |a| unsafe {
                a.realloc(b.ptr as *mut u8, b.size, b.align, new) as usize
            }),
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
                if !impossible && self.checked {
                    self.fail(Violation::Null {
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
        self.adopt(q, new, b.align, b.heap, Origin::Realloc(old))
    }

    /// Asks for the usable size and writes all of it.
    fn probe_usable(&mut self, i: usize) -> Outcome {
        let b = self.shadow.blocks()[i];
        let usable = unsafe { self.alloc.usable_size(b.ptr as *mut u8, b.size, b.align) };
        if !self.checked {
            return Outcome::Live(i);
        }
        self.verify(&b, "before a usable-size probe");
        if usable != b.usable {
            self.fail(Violation::UsableSize {
                ptr: b.ptr,
                size: b.size,
                usable,
                why: "changed since allocation",
            });
        }
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
        let p = unsafe { self.alloc.calloc(count, size) } as usize;
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
                self.fail(Violation::Null { size: n, align: 1 })
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
        match self.heaps().new_heap() {
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
        unsafe { self.heaps().delete(h) };
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
        unsafe { self.heaps().destroy(h) };
        // The blocks are gone: drop them from the shadow without touching them.
        while let Some(i) = self.shadow.blocks().iter().position(|b| b.heap == Some(h)) {
            self.shadow.remove(i);
        }
        Outcome::Done
    }

    fn heap_visit(&mut self, h: HeapId) -> Outcome {
        if !self.checked {
            self.heaps().visit(h);
            return Outcome::Done;
        }
        let in_heap = || self.shadow.blocks().iter().filter(|b| b.heap == Some(h));
        if let Some(b) = in_heap().find(|b| self.heaps().contains(h, b.ptr) == Some(false)) {
            self.fail(Violation::HeapOwned {
                heap: h,
                ptr: b.ptr,
            });
        }
        let Some(visited) = self.heaps().visit(h) else {
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
        let bad = self
            .pool
            .get_or_insert_with(WorkerPool::lock)
            .run(worker, move || {
                unsafe { pattern::check(b.ptr as *const u8, b.extent, b.extent, b.seed) }.is_some()
                    as usize
            });
        if bad != 0 {
            self.verify(&b, "when checked on another thread");
        }
        Outcome::Live(i)
    }

    fn validate(&self) {
        if let Err(detail) = self.alloc.validate(&self.shadow.live()) {
            self.fail(Violation::Validator { detail });
        }
    }

    /// Validates, checks and frees every live block, ends every heap, and
    /// lets the allocator drop per-program state.
    pub fn finish(&mut self, op_count: usize) {
        self.op_index = op_count;
        self.op = None;
        if self.checked {
            self.validate();
        }
        while !self.shadow.is_empty() {
            let last = self.shadow.len() - 1;
            self.free_block(last, On::Main);
        }
        for h in std::mem::take(&mut self.heap_ids) {
            unsafe { self.heaps().delete(h) };
        }
        if self.checked {
            if let Some(detail) = self.alloc.take_error() {
                self.fail(Violation::AllocatorError { detail });
            }
        }
        self.alloc.reset();
        self.finished = true;
    }

    /// Frees a block on the main thread without checking it.
    fn release(&self, b: Block) {
        match b.heap {
            Some(h) => unsafe { self.heaps().free_in(h, b.ptr as *mut u8, b.size, b.align) },
            None => unsafe { self.alloc.free(b.ptr as *mut u8, b.size, b.align) },
        }
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
        if let Some(b) = self.pending.take() {
            if self.shadow.overlapping(b.ptr, b.end()).is_none() {
                self.release(b);
            }
        }
        while !self.shadow.is_empty() {
            let b = self.shadow.remove(self.shadow.len() - 1);
            self.release(b);
        }
        for h in std::mem::take(&mut self.heap_ids) {
            unsafe { self.heaps().delete(h) };
        }
        self.alloc.take_error();
        self.alloc.reset();
    }
}
