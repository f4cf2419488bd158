//! Race sections on the executor: each race op queued as a step on the
//! main thread, the section run ([`super::race::run`]), then every check of
//! what its steps did, in script order.

use super::child::{ForkEnd, FORK_PATIENCE};
use super::race::{Done, Step};
use super::race_run::run;
use super::{Executor, Origin, Outcome};
use crate::allocator::InPlace;
use crate::edges::{NewSize, IMPOSSIBLE_FROM};
use crate::model::Block;
use crate::op::Op;
use crate::pattern::Mismatch;
use crate::violation::{Site, Violation};

/// What a race step does to a block that was live before the section.
#[derive(Clone, Copy, Debug)]
pub(super) enum Change {
    /// Frees it (`sized`: with the sized call, where there is one).
    Free {
        sized: bool,
    },
    Realloc(NewSize),
    /// Resizes it in place, asking for `extra` bytes more on top.
    Resize(NewSize, usize),
    /// Asks its usable size and writes its slack.
    Usable,
}

/// Race sections on the executor: queueing on the main thread, the run,
/// then every check.
impl Executor {
    /// A race op: a step queued for the section, or a contention op.
    /// [`Executor::dispatch`] hands it race ops only.
    pub(super) fn race_op(&mut self, op: &Op) -> Outcome {
        let slot = |s: &Self, raw: usize| s.shadow.slot(raw);
        match *op {
            Op::RaceAlloc {
                worker,
                size,
                align,
                zeroed,
            } => self.queue_alloc(worker, size, align, zeroed),
            Op::RaceFree {
                worker,
                slot: s,
                sized,
            } => slot(self, s).map_or(Outcome::Skipped, |i| {
                self.queue_change(worker, i, Change::Free { sized })
            }),
            Op::RaceRealloc {
                worker,
                slot: s,
                to,
            } => slot(self, s).map_or(Outcome::Skipped, |i| {
                self.queue_change(worker, i, Change::Realloc(to))
            }),
            Op::RaceResize {
                worker,
                slot: s,
                to,
                extra,
            } => slot(self, s).map_or(Outcome::Skipped, |i| {
                self.queue_change(worker, i, Change::Resize(to, extra))
            }),
            Op::RaceUsableSize { worker, slot: s } => slot(self, s).map_or(Outcome::Skipped, |i| {
                self.queue_change(worker, i, Change::Usable)
            }),
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
            Op::RaceFork {
                worker,
                size,
                align,
            } => self.race_fork(worker, size, align),
            _ => unreachable!("not a race op: {op}"),
        }
    }

    pub(super) fn queue_alloc(
        &mut self,
        worker: usize,
        size: usize,
        align: usize,
        zeroed: bool,
    ) -> Outcome {
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
        let seed = self.seeds.next();
        self.race.push(
            worker,
            Step::Alloc {
                size,
                align,
                zeroed,
                seed,
            },
        );
        Outcome::Done
    }

    /// Queues `change` of live block `i`; the block leaves the shadow now,
    /// so no other step can name it. A heap's block is reallocated only
    /// where the heap API has a plain realloc any thread may make
    /// ([`Heaps::remote_realloc_in`]: its own allocates in the heap, which
    /// heap APIs bind to one thread), freed with the heap's remote free
    /// (never the sized call), and never resized in place.
    ///
    /// [`Heaps::remote_realloc_in`]: crate::allocator::Heaps::remote_realloc_in
    pub(super) fn queue_change(&mut self, worker: usize, i: usize, change: Change) -> Outcome {
        let b = self.shadow.blocks()[i];
        let fits = |n: usize| self.shadow.fits_resize(n.saturating_add(self.race.bytes()));
        let runs = match change {
            Change::Free { .. } | Change::Usable => true,
            Change::Realloc(to) => {
                let n = to.resolve(b.size);
                let remote = b.heap.is_none() || self.heaps.api().reallocs_remotely();
                n != 0 && n < IMPOSSIBLE_FROM && fits(n) && remote
            }
            Change::Resize(to, extra) => {
                let n = to.resolve(b.size);
                let offered = b.heap.is_none() && self.alloc.extras().is_some();
                offered && b.size != 0 && n != 0 && fits(n.saturating_add(extra))
            }
        };
        if !self.checked || !runs || !self.race.has_room(worker) {
            return Outcome::Skipped;
        }
        self.guard.set_site(Site::new("race", b.size, b.align));
        self.guard.verify(&b, "before a race section");
        let block = self.shadow.remove(i);
        let step = match change {
            Change::Free { sized } => Step::Free { block, sized },
            Change::Realloc(to) => Step::Realloc {
                block,
                new: to.resolve(b.size),
                seed: self.seeds.next(),
            },
            Change::Resize(to, extra) => Step::Resize {
                block,
                new: to.resolve(b.size),
                extra,
            },
            Change::Usable => Step::Usable { block },
        };
        self.race.push(worker, step);
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
        let (alloc, heaps) = (self.alloc, self.heaps.calls());
        let live: Vec<_> = self
            .shadow
            .blocks()
            .iter()
            .map(|b| (b.ptr, b.end()))
            .collect();
        let ran = crate::coverage::around(|| run(section, live, self.workers.pool(), alloc, heaps));
        self.stats.race_sections += 1;
        self.stats.race_calls += ran.calls;
        self.stats.most_inside = self.stats.most_inside.max(ran.most_inside);
        if ran.most_inside >= 2 {
            self.stats.races += 1;
        }
        let results = ran.results;
        // Everything the section returned is held until checked, so a
        // program that ends at a tolerated violation still releases it.
        self.untracked.hold_raced(
            results
                .iter()
                .rev()
                .filter_map(|(step, done)| raced_block(step, done))
                .collect(),
        );
        // A block handed out twice is the bug whatever the section did
        // after it: reported before any other step's finding.
        let first_overlap = results
            .iter()
            .find(|(_, done)| matches!(done, Done::Overlap { .. }));
        if let Some((step, Done::Overlap { ptr, len, held })) = first_overlap {
            let (api, size, align) = step.site();
            self.guard.set_site(Site::new(api, size, align));
            self.guard.fail(Violation::Overlap {
                ptr: *ptr,
                len: *len,
                other: held.ptr,
                other_len: held.len,
            });
        }
        for (step, done) in results {
            self.check_raced(step, done, frees);
        }
        for b in self.shadow.blocks() {
            self.guard.set_site(Site::new("race", b.size, b.align));
            self.guard.verify(b, "after a race section");
        }
        // What the threads did to the allocator's own structures, seen
        // right after they did it (not at the next 64th op).
        if self.checked {
            self.validate();
            self.guard.heap_check();
            self.walk.check_listed(&self.guard, self.shadow.blocks());
        }
    }

    /// Checks what `step` did; `frees`: whether its section freed blocks.
    fn check_raced(&mut self, step: Step, done: Done, frees: bool) {
        if let Step::Churn { size, align, .. } = step {
            return self.check_churn(size, align, done, frees);
        }
        let (api, size, align) = step.site();
        self.guard.set_site(Site::new(api, size, align));
        match (step, done) {
            (_, Done::Panicked(p)) => self.guard.panicked(p),
            (Step::Free { block, .. }, Done::Freed) => {
                if let Some(h) = block.heap {
                    self.heaps.freed_remotely(h, block.ptr);
                }
            }
            (Step::Resize { block, new, .. }, Done::Resized(to)) => {
                self.check_raced_resize(block, new, to)
            }
            (Step::Usable { block }, Done::Usable { usable, extent }) => {
                self.check_raced_usable(block, usable, extent)
            }
            (Step::Fork { size, .. }, Done::Forked(end)) => {
                let how = match end {
                    ForkEnd::Clean | ForkEnd::Refused => return,
                    ForkEnd::Hung => format!(
                        "did not exit within {} s (a lock held at the fork)",
                        FORK_PATIENCE.as_secs()
                    ),
                    ForkEnd::Failed { code: Some(2), .. } => {
                        "found a block of its broken (exit 2)".to_string()
                    }
                    ForkEnd::Failed {
                        code: Some(super::child::PANICKED),
                        ..
                    } => format!(
                        "panicked in the allocator (exit {})",
                        super::child::PANICKED
                    ),
                    ForkEnd::Failed { code, signal } => match signal {
                        Some(signal) => format!("died of signal {signal}"),
                        None => format!("exited with {code:?}"),
                    },
                };
                self.guard.flag(Violation::Fork { size, how });
            }
            (step, Done::Block { ptr, broken }) => self.check_raced_block(step, ptr, broken, frees),
            (step, done) => unreachable!("{step:?} cannot end as {done:?}"),
        }
    }

    /// Checks the block an alloc or realloc step returned, then tracks it.
    fn check_raced_block(&mut self, step: Step, ptr: usize, broken: Option<Mismatch>, frees: bool) {
        let (_, size, align) = step.site();
        if ptr == 0 {
            let asked = match step {
                Step::Realloc { block, new, .. } => {
                    // A failed realloc leaves the block as it was.
                    if let Err(other) = self.shadow.insert(block, true) {
                        self.guard.overlap(block, other);
                    }
                    new
                }
                _ => size,
            };
            // A fixed region's refusal cannot be judged after a section
            // that freed: the room may have come after the refusal.
            let unjudged = frees && self.alloc.arena().is_some();
            if asked != 0 && !unjudged && !self.refused_fairly(asked, align) {
                self.guard.flag(Violation::Null { size: asked, align });
            }
            return;
        }
        self.untracked.adopt_raced();
        let (new_size, seed) = match step {
            Step::Alloc {
                size, zeroed, seed, ..
            } => {
                if let (true, Some(mismatch)) = (zeroed, broken) {
                    self.guard.flag(Violation::Zeroed {
                        ptr,
                        size,
                        mismatch,
                    });
                }
                (size, seed)
            }
            Step::Realloc { block, new, seed } => {
                if let Some(mismatch) = broken {
                    self.untracked.hold(Block {
                        ptr,
                        size: new,
                        ..block
                    });
                    self.guard.fail(Violation::ReallocPrefix {
                        old: block.ptr,
                        new: ptr,
                        old_size: block.size,
                        new_size: new,
                        mismatch,
                    });
                }
                (new, seed)
            }
            _ => unreachable!("only an alloc or a realloc returns a block"),
        };
        // A heap's block reallocated in place stays in its heap; one that
        // moved was freed from another thread, as a race's free is.
        let heap = match step {
            Step::Realloc { block, .. } if block.ptr == ptr => block.heap,
            Step::Realloc { block, .. } => {
                if let Some(h) = block.heap {
                    self.heaps.freed_remotely(h, block.ptr);
                }
                None
            }
            _ => None,
        };
        self.adopt(ptr, new_size, align, heap, Origin::Raced { seed });
    }

    /// Checks an in-place resize as the serial op does: a block that
    /// stayed is back in the shadow, usable size unchanged; one that grew
    /// or shrank is where it was, holds what was asked, kept its prefix,
    /// and is tracked at what it now holds.
    fn check_raced_resize(&mut self, old: Block, new: usize, to: Option<InPlace>) {
        let Some(InPlace::Resized { ptr, owned }) = to else {
            if let Err(other) = self.shadow.insert(old, true) {
                self.guard.overlap(old, other);
            }
            if to.is_some() {
                self.usable_unchanged(&old, "changed by an in-place resize that failed");
            }
            return;
        };
        self.untracked.adopt_raced();
        self.resized_in_place(&old, new, ptr, owned);
        let origin = Origin::Realloc {
            old,
            zero_from: None,
        };
        self.adopt(ptr, owned, old.align, old.heap, origin);
    }

    /// Holds a usable size asked on a worker to the one the block came
    /// with, and takes the block back with the bytes its worker wrote.
    fn check_raced_usable(&mut self, mut block: Block, usable: usize, extent: Option<usize>) {
        self.same_usable(&block, usable, "changed since allocation");
        block.extent = extent.unwrap_or(block.extent);
        if let Err(other) = self.shadow.insert(block, true) {
            self.guard.overlap(block, other);
        }
    }
}

impl Step {
    /// The api, size and alignment a finding of the step names.
    fn site(&self) -> (&'static str, usize, usize) {
        match *self {
            Step::Churn { size, align, .. } => ("race-churn", size, align),
            Step::Alloc { size, align, .. } => ("race-alloc", size, align),
            Step::Free { block, .. } => ("race-free", block.size, block.align),
            Step::Realloc { block, .. } => ("race-realloc", block.size, block.align),
            Step::Resize { block, .. } => ("race-resize", block.size, block.align),
            Step::Usable { block } => ("race-usable-size", block.size, block.align),
            Step::Fork { size, align, .. } => ("race-fork", size, align),
        }
    }
}

/// The block a step left live, as the Drop of a tolerated program must
/// release it (the old block of a failed realloc is back in the shadow).
fn raced_block(step: &Step, done: &Done) -> Option<Block> {
    let ptr = match done {
        Done::Block { ptr, .. } if *ptr != 0 => *ptr,
        Done::Resized(Some(InPlace::Resized { ptr, owned })) => {
            return Some(Block::fresh(*ptr, *owned, step.site().2))
        }
        _ => return None,
    };
    let (size, align) = match *step {
        Step::Alloc { size, align, .. } => (size, align),
        Step::Realloc { block, new, .. } => (new, block.align),
        Step::Free { .. }
        | Step::Resize { .. }
        | Step::Usable { .. }
        | Step::Churn { .. }
        | Step::Fork { .. } => return None,
    };
    Some(Block::fresh(ptr, size, align))
}
