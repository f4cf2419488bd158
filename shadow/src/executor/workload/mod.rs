//! Runs the `workload` target's programs: a classic allocator stress
//! program ([`Workload`], its shapes in [`kinds`]) on its own threads, free
//! running, for many calls and many live blocks, where an op program
//! holds a few hundred.
//!
//! No shadow heap follows it: each block carries its pattern
//! ([`crate::pattern`], by a seed of its own), checked when it is freed
//! (by whichever thread frees it), reallocated (the kept prefix) or, for a
//! long-lived one, now and then in place. A block handed out twice, a
//! free list's link written into a live block, a copy that lost bytes all
//! show there. Each block is also checked for its alignment and a request
//! that fails, and once everything is freed the allocator's own heap
//! check and error callback are asked.
//!
//! The first violation that leaves memory in doubt stops every thread,
//! which then free nothing more, and ends the program; the ones that
//! leave the heap sound are recorded and the run goes on. A panic inside
//! the allocator is one ([`crate::guard`]).
//!
//! A single-threaded allocator runs the same threads one after another on
//! the calling thread (a block handed to another thread then waits in its
//! inbox): the shapes stay, the concurrency goes.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::allocator::Allocator;
use crate::executor::{Mode, Seeds, Stats};
use crate::op::{Op, Program, Workload};
use crate::pattern;
use crate::violation::{By, Report, Site, Violation};

mod kinds;
mod replay;

pub use replay::{replay, table_bytes, OnMark};

/// The time a workload's threads take steps for, at most: a large one
/// under ASan's own malloc (`system` in the fuzz builds, which poisons
/// and quarantines every block) would otherwise outlast the engine's
/// timeout, a finding that is the harness's. An allocator that hangs
/// inside a call still does (the call never returns).
pub const BUDGET: Duration = Duration::from_secs(2);
/// Resident bytes a workload's run may add before its threads stop as
/// they do at [`BUDGET`]: an allocator that reuses nothing until it is
/// reset (a bump allocator) would otherwise grow the process to the
/// engine's RSS limit within one run. Growth over runs is the drift
/// replay's to judge.
pub const GROWTH: u64 = 1 << 30;
/// Calls between two looks at the process's resident size.
const LOOK_EVERY: usize = 4096;

/// Runs a `workload` program: each of its ops (one, when decoded).
pub fn run(program: &Program, alloc: &'static dyn Allocator, mode: Mode) -> Stats {
    let mut stats = Stats::default();
    for op in &program.ops {
        let Op::Workload(w) = op else {
            stats.skipped += 1;
            continue;
        };
        stats.ops += 1;
        stats.calls += run_one(w, alloc, mode);
    }
    stats
}

/// A live block and the seed of its pattern.
#[derive(Clone, Copy, Debug)]
pub(super) struct Block {
    ptr: usize,
    size: usize,
    align: usize,
    seed: u64,
}

/// What every thread of one run shares.
pub(super) struct Shared {
    alloc: &'static dyn Allocator,
    /// The workload, in a workload's run (a trace's replay has none).
    workload: Option<Workload>,
    /// The op reports name: the workload's line, or the trace.
    op: String,
    seed: u64,
    checked: bool,
    /// Whether a null may be the allocator's fair answer (a fixed region
    /// that is full).
    may_run_out: bool,
    /// Set at the first violation that leaves memory in doubt.
    stop: AtomicBool,
    /// When a workload's threads stop taking steps and free what they
    /// hold ([`BUDGET`]); none for a trace, replayed whole.
    deadline: Option<Instant>,
    /// The resident bytes at the start, and whether the run grew
    /// [`GROWTH`] past them; the call count at the next look.
    start_resident: u64,
    grown: AtomicBool,
    next_look: AtomicUsize,
    ended: Mutex<Option<Report>>,
    sound: Mutex<Vec<Report>>,
    /// Blocks handed to each thread, which checks and frees them.
    inboxes: Vec<Mutex<Vec<Block>>>,
    /// Blocks a thread left behind at its exit, for the next ones.
    pool: Mutex<Vec<Block>>,
    /// Producers still running (`xmalloc`).
    producing: AtomicUsize,
    calls: AtomicUsize,
}

fn run_one(w: &Workload, alloc: &'static dyn Allocator, mode: Mode) -> usize {
    let single = alloc.single_threaded();
    let mut shared = Shared::new(alloc, mode, w.to_string(), w.seed, w.threads, Some(*w));
    shared.deadline = Some(Instant::now() + BUDGET);
    kinds::run(&shared, single);
    // What is left: blocks handed on after their receiver ended, and what
    // the last threads left behind; freed here, on the calling thread.
    if !shared.stopped() {
        // Thread `threads`: the calling thread, which has no inbox.
        let mut me = Worker::new(&shared, w.threads);
        let mut left: Vec<Block> = shared
            .pool
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .drain(..)
            .collect();
        for inbox in &shared.inboxes {
            left.extend(inbox.lock().unwrap_or_else(|e| e.into_inner()).drain(..));
        }
        for b in left {
            if !me.free(b) {
                break;
            }
        }
    }
    shared.end()
}

impl Shared {
    fn new(
        alloc: &'static dyn Allocator,
        mode: Mode,
        op: String,
        seed: u64,
        threads: usize,
        workload: Option<Workload>,
    ) -> Shared {
        Shared {
            alloc,
            workload,
            op,
            seed,
            checked: mode == Mode::Checked,
            may_run_out: alloc.arena().is_some(),
            stop: AtomicBool::new(false),
            deadline: None,
            start_resident: crate::resident::resident_bytes().unwrap_or(0),
            grown: AtomicBool::new(false),
            next_look: AtomicUsize::new(LOOK_EVERY),
            ended: Mutex::new(None),
            sound: Mutex::new(Vec::new()),
            inboxes: (0..threads).map(|_| Mutex::new(Vec::new())).collect(),
            pool: Mutex::new(Vec::new()),
            producing: AtomicUsize::new(0),
            calls: AtomicUsize::new(0),
        }
    }

    /// Ends the run: the end checks when every block is freed, the sound
    /// violations recorded, the one that stopped it raised; the calls
    /// made.
    fn end(self) -> usize {
        if !self.stopped() {
            if self.checked {
                self.end_checks();
            }
            // As after an op program: per-program state dropped (a bump
            // allocator's region), and what the allocator holds free
            // given back when the fuzzing process has grown.
            let _ = crate::guard::call(|| {
                self.alloc.reset();
                crate::resident::after_program(self.alloc);
            });
        }
        for report in self.sound.into_inner().unwrap_or_else(|e| e.into_inner()) {
            crate::ending::record(report);
        }
        if let Some(report) = self.ended.into_inner().unwrap_or_else(|e| e.into_inner()) {
            crate::ending::raise(report);
        }
        self.calls.into_inner()
    }

    fn stopped(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// Whether the workload's time is spent, or the process grew
    /// [`GROWTH`]: its threads take no more steps and free what they hold.
    pub(super) fn late(&self) -> bool {
        let Some(deadline) = self.deadline else {
            return false;
        };
        if Instant::now() >= deadline || self.grown.load(Ordering::Relaxed) {
            return true;
        }
        let (calls, next) = (
            self.calls.load(Ordering::Relaxed),
            self.next_look.load(Ordering::Relaxed),
        );
        let mine = calls >= next
            && self
                .next_look
                .compare_exchange(
                    next,
                    calls + LOOK_EVERY,
                    Ordering::Relaxed,
                    Ordering::Relaxed,
                )
                .is_ok();
        if mine && crate::resident::resident_bytes().unwrap_or(0) > self.start_resident + GROWTH {
            self.grown.store(true, Ordering::Relaxed);
        }
        self.grown.load(Ordering::Relaxed)
    }

    fn report(&self, violation: Violation, site: Site) -> Report {
        Report {
            op_index: 0,
            op: self.op.clone(),
            site,
            path: Vec::new(),
            violation,
            by: By::Allocator(self.alloc.name().to_string()),
        }
    }

    /// A violation: one that leaves the heap sound is kept (the first of
    /// its key) and the run goes on; any other stops every thread.
    fn flag(&self, violation: Violation, site: Site) {
        let report = self.report(violation, site);
        if report.violation.leaves_heap_sound() {
            let mut sound = self.sound.lock().unwrap_or_else(|e| e.into_inner());
            if !sound.iter().any(|r| r.key() == report.key()) {
                sound.push(report);
            }
            return;
        }
        self.stop.store(true, Ordering::Relaxed);
        self.ended
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_or_insert(report);
    }

    /// Once every block is freed: the allocator's own heap check and
    /// error callback.
    fn end_checks(&self) {
        if let Err(detail) = self.alloc.heap_check() {
            self.flag(Violation::HeapCheck { detail }, Site::bare("end"));
        }
        if let Some(detail) = self.alloc.take_error() {
            self.flag(Violation::AllocatorError { detail }, Site::bare("end"));
        }
    }

    /// Hands `b` to thread `to`, which checks and frees it.
    fn send(&self, to: usize, b: Block) {
        self.inboxes[to]
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(b);
    }
}

/// One thread of a run: its random draws and its calls.
pub(super) struct Worker<'a> {
    pub(super) id: usize,
    pub(super) shared: &'a Shared,
    /// Its draws: the executor's splitmix64, from the run's seed and this
    /// thread's id.
    draws: Seeds,
}

impl<'a> Worker<'a> {
    pub(super) fn new(shared: &'a Shared, id: usize) -> Worker<'a> {
        Worker::of_generation(shared, id, 0)
    }

    /// Thread `id` of a `churn` run's `generation` (0 for every other
    /// kind): its draws are its own.
    pub(super) fn of_generation(shared: &'a Shared, id: usize, generation: usize) -> Worker<'a> {
        let thread = (id as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        let generation = (generation as u64).wrapping_mul(0xD1B5_4A32_D192_ED03);
        Worker {
            id,
            shared,
            draws: Seeds::new(shared.seed ^ thread ^ generation),
        }
    }

    /// The workload this thread runs (in a workload's run).
    pub(super) fn w(&self) -> &Workload {
        self.shared.workload.as_ref().expect("a workload's run")
    }

    pub(super) fn next(&mut self) -> u64 {
        self.draws.next()
    }

    /// A number in `0..n` (`n` > 0).
    pub(super) fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    /// A size in the workload's range, log-uniform: an octave first,
    /// then a size in it.
    pub(super) fn size(&mut self) -> usize {
        let (min, max) = (self.w().min, self.w().max);
        let (lo, hi) = (min.ilog2(), max.ilog2());
        let e = lo + self.below((hi - lo + 1) as usize) as u32;
        let from = (1usize << e).max(min);
        let to = ((1usize << e) * 2 - 1).min(max);
        from + self.below(to - from + 1)
    }

    /// An alignment: malloc's mostly, over-aligned one call in sixteen.
    fn align(&mut self) -> usize {
        let over = 64.min(self.shared.alloc.max_align());
        match self.below(16) {
            0 => over,
            1..=7 => 8,
            _ => 16,
        }
    }

    pub(super) fn stopped(&self) -> bool {
        self.shared.stopped()
    }

    /// An allocator call under guard: a panic in it stops the run.
    fn call<R>(&self, site: Site, f: impl FnOnce() -> R) -> Option<R> {
        self.shared.calls.fetch_add(1, Ordering::Relaxed);
        match crate::guard::call(f) {
            Ok(r) => Some(r),
            Err(p) => {
                let violation = Violation::Panic {
                    message: p.message,
                    location: p.location,
                };
                self.shared.flag(violation, site);
                None
            }
        }
    }

    /// Allocates a block of a drawn size and writes its pattern; `None`
    /// when the allocator refused or the run stopped.
    pub(super) fn alloc(&mut self) -> Option<Block> {
        let size = self.size();
        self.alloc_of(size)
    }

    pub(super) fn alloc_of(&mut self, size: usize) -> Option<Block> {
        let align = self.align();
        self.alloc_as(size, align, false)
    }

    /// Allocates `size` bytes aligned to `align` (a `zeroed` block must
    /// read zero) and writes its pattern.
    pub(super) fn alloc_as(&mut self, size: usize, align: usize, zeroed: bool) -> Option<Block> {
        let site = Site::new("alloc", size, align);
        let alloc = self.shared.alloc;
        // SAFETY: a nonzero size and a power-of-two alignment, as `alloc`
        // asks (callers keep it within `max_align`).
        let p = self.call(site, || unsafe { alloc.alloc(size, align, zeroed) })? as usize;
        if p == 0 {
            if !self.shared.may_run_out {
                self.shared.flag(Violation::Null { size, align }, site);
            }
            return None;
        }
        let b = Block {
            ptr: p,
            size,
            align,
            seed: self.next(),
        };
        if !self.shared.checked {
            return Some(b);
        }
        if !p.is_multiple_of(align) {
            let violation = Violation::Alignment {
                ptr: p,
                size,
                align,
            };
            self.shared.flag(violation, site);
        }
        // SAFETY: the allocator just handed out `size` bytes at `p`.
        let dirty = zeroed.then(|| unsafe { pattern::check_zero(p as *const u8, size, 0, b.seed) });
        if let Some(Some(mismatch)) = dirty {
            let violation = Violation::Zeroed {
                ptr: p,
                size,
                mismatch,
            };
            self.shared.flag(violation, site);
        }
        // SAFETY: as above.
        unsafe { pattern::fill(p as *mut u8, size, b.seed) };
        Some(b)
    }

    /// Checks a live block's pattern in place (`when`: where in the run);
    /// false when it changed, and the run stops.
    pub(super) fn check(&self, b: &Block, when: &'static str, site: Site) -> bool {
        if !self.shared.checked {
            return true;
        }
        // SAFETY: `b` is live and this thread holds it: no other thread
        // frees or writes it meanwhile.
        let mismatch = unsafe { pattern::check(b.ptr as *const u8, b.size, b.size, b.seed) };
        let Some(mismatch) = mismatch else {
            return true;
        };
        let violation = Violation::Contents {
            ptr: b.ptr,
            size: b.size,
            mismatch,
            when,
            by_call: false,
        };
        self.shared.flag(violation, site);
        false
    }

    /// Checks and frees `b`; false when the run stopped (nothing is freed
    /// then).
    pub(super) fn free(&mut self, b: Block) -> bool {
        let site = Site::new("free", b.size, b.align);
        if self.stopped() || !self.check(&b, "before its free", site) {
            return false;
        }
        let alloc = self.shared.alloc;
        // SAFETY: `b` is live, was handed out by this allocator with this
        // size and alignment, and is freed once: whoever holds a `Block`
        // owns it.
        self.call(site, || unsafe {
            alloc.free(b.ptr as *mut u8, b.size, b.align)
        })
        .is_some()
    }

    /// Reallocates `b` to `new_size`: the kept prefix must hold its
    /// pattern; the new block gets the whole pattern. False when the run
    /// stopped; a refused realloc leaves `b` as it was.
    pub(super) fn realloc(&mut self, b: &mut Block, new_size: usize) -> bool {
        let site = Site::new("realloc", b.size, b.align);
        if self.stopped() || !self.check(b, "before its realloc", site) {
            return false;
        }
        let alloc = self.shared.alloc;
        let old = *b;
        // SAFETY: `b` is live, this allocator's, with this size and
        // alignment; `new_size` is nonzero. On success the old block is
        // gone and only the new one is used.
        let Some(p) = self.call(site, || unsafe {
            alloc.realloc(old.ptr as *mut u8, old.size, old.align, new_size)
        }) else {
            return false;
        };
        let p = p as usize;
        if p == 0 {
            if !self.shared.may_run_out {
                self.shared.flag(
                    Violation::Null {
                        size: new_size,
                        align: old.align,
                    },
                    site,
                );
            }
            return true;
        }
        if self.shared.checked {
            if !p.is_multiple_of(old.align) {
                let violation = Violation::Alignment {
                    ptr: p,
                    size: new_size,
                    align: old.align,
                };
                self.shared.flag(violation, site);
            }
            let kept = old.size.min(new_size);
            // SAFETY: the realloc's new block holds `new_size` ≥ `kept` bytes.
            let lost = unsafe { pattern::check(p as *const u8, old.size, kept, old.seed) };
            if let Some(mismatch) = lost {
                let violation = Violation::ReallocPrefix {
                    old: old.ptr,
                    new: p,
                    old_size: old.size,
                    new_size,
                    mismatch,
                };
                self.shared.flag(violation, site);
                return false;
            }
        }
        *b = Block {
            ptr: p,
            size: new_size,
            align: old.align,
            seed: self.next(),
        };
        if self.shared.checked {
            // SAFETY: the new block holds `new_size` bytes.
            unsafe { pattern::fill(p as *mut u8, new_size, b.seed) };
        }
        true
    }

    /// Checks and frees every block handed to this thread; false when
    /// the run stopped.
    pub(super) fn drain(&mut self) -> bool {
        let got: Vec<Block> = std::mem::take(
            &mut *self.shared.inboxes[self.id]
                .lock()
                .unwrap_or_else(|e| e.into_inner()),
        );
        got.into_iter().all(|b| self.free(b))
    }

    /// Hands `b` to another thread than this one (itself when alone).
    pub(super) fn send_away(&mut self, b: Block) {
        let n = self.w().threads;
        let to = match n {
            1 => 0,
            _ => (self.id + 1 + self.below(n - 1)) % n,
        };
        self.shared.send(to, b);
    }
}
