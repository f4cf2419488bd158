//! The contention ops: one op each for where allocator races live, built
//! on race sections ([`super::race`]). A remote-free race (blocks of one
//! owner freed by every other thread while it allocates, then each must be
//! handed out again), a thread exit racing the frees of its blocks and the
//! allocations of its size, and a churn of one size class on every thread.

use super::checks::contents;
use super::claims::Claims;
use super::race::{Step, MAX_STEPS};
use super::race_ops::Change;
use super::{Executor, On, Origin, Outcome, Request};
use crate::allocator::Allocator;
use crate::edges::IMPOSSIBLE_FROM;
use crate::edges::MAX_BLOCK;
use crate::model::Block;
use crate::pattern;
use crate::poison;
use crate::violation::{Site, Violation};
use crate::workers::WORKERS;

/// Largest block a churn step allocates: allocator races live in the size
/// classes a thread cache or a page's free list serves.
pub const CHURN_MAX: usize = 64 << 10;
/// Blocks each churning worker cycles while a race-fork's worker forks.
const FORK_CHURN: usize = 16;

/// Most bytes one thread of a contention op allocates: all its blocks of a
/// size up to 32 KiB, fewer of larger ones, one of 1 MiB or more (a large
/// block is a page or a segment of its own: one is its race). Uncapped,
/// an op could fill and check 64 MiB, and its time went there.
const OP_BYTES: usize = 1 << 20;

/// How many blocks of `size` and `align` a thread of a contention op
/// allocates when asked for `count`: at most [`MAX_STEPS`], within
/// [`OP_BYTES`], but one of any size when asked for any.
fn within_budget(size: usize, align: usize, count: usize) -> usize {
    let fit = (OP_BYTES / size.max(align).max(1)).max(1);
    count.min(MAX_STEPS).min(fit)
}

/// The workers other than `owner`, from `first` on, round robin.
fn others(owner: usize, first: usize) -> Vec<usize> {
    let owner = owner % WORKERS;
    (0..WORKERS)
        .map(|i| (first + i) % WORKERS)
        .filter(|&w| w != owner)
        .collect()
}

impl Executor {
    /// `owner` allocates `count` blocks (one at a time); then a section
    /// runs in which the other workers, dealt round robin from `freer`,
    /// free them while `owner` allocates `count` more; then every block
    /// freed remotely must come back ([`Executor::check_reuse`]).
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
        let owner = owner % WORKERS;
        let freers = others(owner, freer);
        let owned = self.alloc_on(owner, size, align, count);
        let mut freed = Vec::new();
        for (n, b) in owned.iter().enumerate() {
            let worker = freers[n % freers.len()];
            if self.queue_free(worker, b.ptr) {
                freed.push((worker, *b));
            }
        }
        for _ in 0..owned.len() {
            self.queue_alloc(owner, size, align, false);
        }
        self.run_race();
        self.check_reuse(owner, &freed, size, align);
        Outcome::Done
    }

    /// `worker` allocates `count` blocks and frees the first half itself;
    /// then a section runs in which its thread exits while the other
    /// workers allocate `count` blocks of the size and free its live ones.
    pub(super) fn race_exit(
        &mut self,
        worker: usize,
        size: usize,
        align: usize,
        count: usize,
    ) -> Outcome {
        // Race sections check as they go: a bare run has none.
        if !self.checked || size == 0 || size >= IMPOSSIBLE_FROM {
            return Outcome::Skipped;
        }
        let owner = worker % WORKERS;
        let others = others(owner, owner + 1);
        let owned = self.alloc_on(owner, size, align, count);
        let half = owned.len() / 2;
        self.free_on(owner, &owned[..half]);
        for n in 0..owned.len() {
            self.queue_alloc(others[n % others.len()], size, align, false);
        }
        for (n, b) in owned[half..].iter().enumerate() {
            self.queue_free(others[n % others.len()], b.ptr);
        }
        self.race.exit(owner);
        self.run_race();
        Outcome::Done
    }

    /// Every worker churns `count` blocks of `size` at once.
    pub(super) fn queue_churn(&mut self, size: usize, align: usize, count: usize) -> Outcome {
        let Some(count) = self.churn_count(size, align, count) else {
            return Outcome::Skipped;
        };
        for worker in 0..WORKERS {
            self.push_churn(worker, size, align, count);
        }
        Outcome::Done
    }

    /// The blocks of `size` each worker of a churn cycles (`count`, within
    /// an op's budget), or `None` when the section cannot take them.
    fn churn_count(&self, size: usize, align: usize, count: usize) -> Option<usize> {
        let count = within_budget(size, align, count);
        let bytes = size.saturating_mul(count).saturating_mul(WORKERS);
        let fits = self.checked
            && size != 0
            && size <= CHURN_MAX
            && align <= self.alloc.max_align()
            && self.shadow.fits(bytes.saturating_add(self.race.bytes()));
        fits.then_some(count)
    }

    /// Queues a churn of `count` blocks of `size` on `worker`, if it has
    /// room.
    fn push_churn(&mut self, worker: usize, size: usize, align: usize, count: usize) {
        if self.race.has_room(worker) {
            let seed = self.seeds.next();
            let churn = Step::Churn {
                size,
                align,
                count,
                seed,
            };
            self.race.push(worker, churn);
        }
    }

    /// Every other worker churns blocks of `size` while `worker` forks,
    /// and its child allocates blocks of the size ([`Step::Fork`]).
    pub(super) fn race_fork(&mut self, worker: usize, size: usize, align: usize) -> Outcome {
        let forker = worker % WORKERS;
        let Some(count) = self.churn_count(size, align, FORK_CHURN) else {
            return Outcome::Skipped;
        };
        if !self.alloc.fork_safe() || self.forked || !self.race.has_room(forker) {
            return Outcome::Skipped;
        }
        // A fork costs a process's page tables (about 9 ms under ASan): one
        // a program.
        self.forked = true;
        for other in others(forker, forker + 1) {
            self.push_churn(other, size, align, count);
        }
        let seed = self.seeds.next();
        self.race.push(forker, Step::Fork { size, align, seed });
        self.run_race();
        Outcome::Done
    }

    /// Checks what a churn step did; `frees`: its section freed blocks.
    pub(super) fn check_churn(
        &mut self,
        size: usize,
        align: usize,
        done: super::race::Done,
        frees: bool,
    ) {
        use super::race::Done;
        self.guard.set_site(Site::new("race-churn", size, align));
        let (ptrs, broken, refused) = match done {
            Done::Churned {
                ptrs,
                broken,
                refused,
            } => (ptrs, broken, refused),
            Done::Panicked(p) => self.guard.panicked(p),
            _ => unreachable!("a churn step churns"),
        };
        if let Some((ptr, mismatch)) = broken {
            // Another thread's call wrote into the block while it was live:
            // the section's code is where the bug is.
            self.guard.fail(Violation::Contents {
                ptr,
                size,
                mismatch,
                when: "while a race section's churn held it",
                by_call: true,
            });
        }
        if let Some(&ptr) = ptrs.iter().find(|p| !p.is_multiple_of(align)) {
            self.guard.flag(
                self.guard
                    .misaligned(ptr, size, align, self.shadow.blocks()),
            );
        }
        let unjudged = frees && self.alloc.arena().is_some();
        if refused > 0 && !unjudged && !self.refused_fairly(size, align) {
            self.guard.flag(Violation::Null { size, align });
        }
    }

    /// Up to `count` blocks of `size` allocated on `worker`, within the
    /// op's budget ([`within_budget`]) and the shadow's caps, checked and
    /// tracked as any worker's. One job makes every call ([`owned`]), so an
    /// op pays one handoff, not one a block; each block is filled on its
    /// thread before the next call, so a call that writes into a block
    /// made before it is caught as it would be one call at a time. A huge
    /// size (one block) goes through [`Executor::alloc_block`].
    fn alloc_on(&mut self, worker: usize, size: usize, align: usize, count: usize) -> Vec<Block> {
        let n = within_budget(size, align, count);
        if size > MAX_BLOCK {
            return (0..n)
                .filter_map(|_| {
                    match self.alloc_block(Request::plain(size, align), On::Worker(worker)) {
                        Outcome::Live(i) => Some(self.shadow.blocks()[i]),
                        _ => None,
                    }
                })
                .collect();
        }
        let n = self.shadow.room_for(size, n);
        if n == 0 || align > self.alloc.max_align() {
            return Vec::new();
        }
        self.guard.set_site(Site::new("alloc", size, align));
        let seeds: Vec<u64> = (0..n).map(|_| self.seeds.next()).collect();
        let claims = Claims::new(self.shadow.blocks().iter().map(|b| (b.ptr, b.end())));
        let (alloc, fill) = (self.alloc, self.checked);
        let job = seeds.clone();
        let made = self.workers.call_on(&self.guard, worker, move || {
            owned(alloc, size, align, &job, &claims, fill)
        });
        self.guard.count(made.calls.saturating_sub(1));
        self.untracked.hold_raced(
            made.ptrs
                .iter()
                .rev()
                .filter(|&&p| p != 0)
                .map(|&p| Block::fresh(p, size, align))
                .collect(),
        );
        let mut blocks = Vec::new();
        for (&p, &seed) in made.ptrs.iter().zip(&seeds) {
            let outcome = if p == 0 {
                self.adopt_fresh(0, Request::plain(size, align))
            } else {
                self.untracked.adopt_raced();
                self.adopt(p, size, align, None, Origin::Batched { seed })
            };
            if let Outcome::Live(i) = outcome {
                blocks.push(self.shadow.blocks()[i]);
            }
        }
        blocks
    }

    /// Frees `blocks` (live, of no heap) on `worker` in one job, each
    /// checked before its free as [`Executor::free_block`] checks it
    /// ([`freed_in_turn`]): a broken one ends the program there, the
    /// blocks before it freed.
    fn free_on(&mut self, worker: usize, blocks: &[Block]) {
        let Some(first) = blocks.first() else {
            return;
        };
        self.guard
            .set_site(Site::new("free", first.size, first.align));
        let (alloc, check, job) = (self.alloc, self.checked, blocks.to_vec());
        let freed = self.workers.call_on(&self.guard, worker, move || {
            freed_in_turn(alloc, &job, check)
        });
        self.guard.count(freed.count.saturating_sub(1));
        for b in &blocks[..freed.count] {
            if let Some(i) = self.shadow.blocks().iter().position(|l| l.ptr == b.ptr) {
                self.shadow.remove(i);
            }
            self.guard.given_back(b, "free");
        }
        if let Some(mismatch) = freed.broken {
            let b = blocks[freed.count];
            self.guard.fail(Violation::Contents {
                ptr: b.ptr,
                size: b.size,
                mismatch,
                when: "before free",
                by_call: false,
            });
        }
    }

    /// Queues `worker`'s free of the live block at `ptr`, if it is live
    /// and the section has room: whether it was queued.
    fn queue_free(&mut self, worker: usize, ptr: usize) -> bool {
        let Some(i) = self.shadow.blocks().iter().position(|b| b.ptr == ptr) else {
            return false;
        };
        self.queue_change(worker, i, Change::Free { sized: false }) == Outcome::Done
    }

    /// After a remote-free race: each block freed on another thread than
    /// its owner's must come back. The owner's heap, once it has taken in
    /// the frees, must not count it in use
    /// ([`Allocator::in_use_after_collect`]); or, where the allocator
    /// promises it ([`Allocator::remote_reuse`]), it is handed out again
    /// within `k + n` allocations of its size on the owner's thread, then
    /// on each freeing thread's (the probes' blocks are freed on the
    /// thread that allocated them). A block that does not come back was
    /// dropped: a `remote-free-lost`.
    fn check_reuse(&mut self, owner: usize, freed: &[(usize, Block)], size: usize, align: usize) {
        if !self.checked || freed.is_empty() {
            return;
        }
        self.guard.set_site(Site::new("remote-free", size, align));
        // A block the section's own allocations got back is live again.
        let missing: Vec<Block> = freed
            .iter()
            .map(|(_, b)| *b)
            .filter(|b| self.shadow.overlapping(b.ptr, b.end()).is_none())
            .collect();
        if missing.is_empty() {
            return;
        }
        let ptrs: Vec<usize> = missing.iter().map(|b| b.ptr).collect();
        let live: Vec<usize> = self.shadow.blocks().iter().map(|b| b.ptr).collect();
        let alloc = self.alloc;
        let in_use = self.workers.call_on(&self.guard, owner, move || {
            alloc.in_use_after_collect(&ptrs, &live)
        });
        let (lost, how) = match in_use {
            Some(in_use) => (
                in_use,
                "are still in use in their owner's heap after it collected".to_string(),
            ),
            None => match self.alloc.remote_reuse(size, align) {
                Some(slack) => {
                    let bound = freed.len() + slack;
                    let lost = self.probe_reuse(owner, freed, missing, size, align, bound);
                    let how = format!("never came back in {bound} allocations of that size on the owner's thread and each freeing thread's");
                    (lost, how)
                }
                None => return,
            },
        };
        if let Some(&ptr) = lost.first() {
            self.guard.flag(Violation::RemoteFreeLost {
                ptr,
                size,
                freed: freed.len(),
                lost: lost.len(),
                how,
            });
        }
    }

    /// Allocates on the owner, then on each freer, until every block of
    /// `missing` has come back or `bound` allocations each: the blocks
    /// that never did.
    fn probe_reuse(
        &mut self,
        owner: usize,
        freed: &[(usize, Block)],
        mut missing: Vec<Block>,
        size: usize,
        align: usize,
        bound: usize,
    ) -> Vec<usize> {
        let mut threads = vec![owner];
        for &(w, _) in freed {
            if !threads.contains(&w) {
                threads.push(w);
            }
        }
        let alloc = self.alloc;
        for worker in threads {
            if missing.is_empty() {
                break;
            }
            let wanted = missing.clone();
            let probe = self.workers.call_on(&self.guard, worker, move || {
                reuse_probe(alloc, size, align, bound, wanted)
            });
            self.guard.count(probe.calls);
            for &p in &probe.ptrs {
                if let Some(other) = self.shadow.overlapping(p, p + size) {
                    self.guard.overlap(Block::fresh(p, size, align), other);
                }
            }
            missing.retain(|m| !probe.ptrs.iter().any(|&p| p < m.end() && m.ptr < p + size));
        }
        missing.iter().map(|b| b.ptr).collect()
    }
}

/// What a reuse probe on one thread saw: the blocks it was handed (all
/// freed again) and the calls it made.
struct Probe {
    ptrs: Vec<usize>,
    calls: usize,
}

/// Allocates blocks of `size` one at a time until every block of `wanted`
/// has been overlapped by one, or `bound` allocations, then frees them.
fn reuse_probe(
    alloc: &'static dyn Allocator,
    size: usize,
    align: usize,
    bound: usize,
    mut wanted: Vec<Block>,
) -> Probe {
    let mut ptrs = Vec::new();
    while ptrs.len() < bound && !wanted.is_empty() {
        // SAFETY: a request of a size and alignment the program asked
        // for already; the block is freed below with the same layout.
        let p = unsafe { alloc.alloc(size, align, false) } as usize;
        if p == 0 {
            break;
        }
        wanted.retain(|m| !(p < m.end() && m.ptr < p + size));
        ptrs.push(p);
    }
    let calls = 2 * ptrs.len() + usize::from(ptrs.len() < bound && !wanted.is_empty());
    for &p in &ptrs {
        // SAFETY: `p` came from `alloc.alloc(size, align)` above and is
        // freed once.
        unsafe { alloc.free(p as *mut u8, size, align) };
    }
    Probe { ptrs, calls }
}

/// What an owner's job made: the blocks, in call order (null where one
/// was refused), and the allocator calls it made.
struct Made {
    ptrs: Vec<usize>,
    calls: usize,
}

/// Allocates a block of `size` for each of `seeds`, one call at a time,
/// and (when `fill`) fills each with its seed's pattern over the bytes the
/// harness would touch (no more than the allocator's usable size says,
/// nor past ASan's poison) before the next call. Each block is claimed
/// first ([`Claims`], as a race section's are): one that overlaps a live
/// block or one made before it stops the job, unfilled, and adopting it
/// is the overlap.
fn owned(
    alloc: &'static dyn Allocator,
    size: usize,
    align: usize,
    seeds: &[u64],
    claims: &Claims,
    fill: bool,
) -> Made {
    let mut made = Made {
        ptrs: Vec::new(),
        calls: 0,
    };
    for &seed in seeds {
        // SAFETY: `align <= max_align()` (the caller checks) and a power
        // of two, as ops draw it; the block is tracked by the caller.
        let p = unsafe { alloc.alloc(size, align, false) };
        made.calls += 1;
        made.ptrs.push(p as usize);
        if p.is_null() {
            continue;
        }
        if claims.claim(p as usize, size).is_err() {
            break;
        }
        if fill && size > 0 {
            // SAFETY: `p` was just returned for `size` bytes and not freed.
            let usable = unsafe { alloc.usable_size(p, size, align) };
            made.calls += 1;
            let reach = size.min(usable);
            let reach = poison::poisoned_from(p, 0, reach).unwrap_or(reach);
            // SAFETY: the first `reach` bytes are the block's, by the
            // allocator's word and ASan's, and overlap no other block held.
            unsafe { pattern::fill(p, reach, seed) };
        }
    }
    made
}

/// What an owner's frees did: how many blocks were freed, and the broken
/// pattern of the next one, where they stopped.
struct Freed {
    count: usize,
    broken: Option<pattern::Mismatch>,
}

/// Frees `blocks` one at a time, each (when `check`) checked first; stops
/// at the first broken one, left live.
fn freed_in_turn(alloc: &'static dyn Allocator, blocks: &[Block], check: bool) -> Freed {
    for (count, b) in blocks.iter().enumerate() {
        // SAFETY: `b` is a live block of the shadow, held by no other call.
        if let Some(mismatch) = check.then(|| unsafe { contents(b) }).flatten() {
            return Freed {
                count,
                broken: Some(mismatch),
            };
        }
        // SAFETY: `b` is a live block of `alloc` with its tracked size and
        // alignment, freed once: the caller stops tracking it.
        crate::sanitizer::given(b.ptr, || unsafe {
            alloc.free(b.ptr as *mut u8, b.size, b.align)
        });
    }
    Freed {
        count: blocks.len(),
        broken: None,
    }
}
