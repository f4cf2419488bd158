//! Fuzz bytes to ops: each target's op families as `Arbitrary` enums,
//! lowered to [`Op`]s with sizes and alignments drawn from the edges.
//!
//! `arbitrary` picks a variant by scaling a `u32` over the count, so a
//! variant added to an enum changes what many committed seeds decode to
//! (half of that enum's choices move to a neighbour).

use arbitrary::{Arbitrary, Unstructured};

use super::{Attack, BulkOrder, Op, PurgeDelay, Target, NEWEST};
use crate::allocator::attack_sizes;
use crate::edges::{bulk_count, size_align, ArbAlign, ArbCount, ArbNewSize, ArbSize, History};

/// The next op of a `target` program, lowered; an error when the bytes
/// left cannot complete one.
pub(super) fn next_op(
    target: Target,
    u: &mut Unstructured,
    h: &mut History,
) -> arbitrary::Result<Op> {
    Ok(match target {
        Target::AllocOps | Target::DiffMimalloc => u.arbitrary::<ArbBasicOp>()?.lower(h),
        Target::HeapApi => u.arbitrary::<ArbHeapOp>()?.lower(h),
        Target::MtOps => u.arbitrary::<ArbThreadOp>()?.lower(h),
        Target::Workload => Op::Workload(super::workload::decode(u)?),
    })
}

fn slot_of(byte: u8) -> usize {
    if byte >= 128 {
        NEWEST
    } else {
        byte.into()
    }
}

#[derive(Arbitrary)]
enum ArbBasicOp {
    Alloc(ArbSize, ArbAlign),
    AllocZeroed(ArbSize, ArbAlign),
    Free(u8),
    Realloc(u8, ArbNewSize),
    UsableSize(u8),
    Calloc(ArbCount, ArbSize),
    /// One op in seven: the basic ones stay where most bugs are.
    More(ArbMoreOp),
}

/// Bulk ops and the calls beyond alloc / realloc / free (see
/// [`crate::allocator::Extras`]).
#[derive(Arbitrary)]
enum ArbMoreOp {
    BulkAlloc(ArbSize, ArbAlign, u8),
    BulkFree(u8, u8, BulkOrder),
    ReallocZeroed(u8, ArbNewSize),
    ResizeInPlace(u8, ArbNewSize, u8),
    FreeSized(u8),
    ReallocPlain(u8, ArbNewSize),
    ReallocNull(ArbSize),
    /// An `attack` when its first byte is below [`ATTACK_BELOW`], else a
    /// `free(NULL)`: an attack costs a fork.
    FreeNull(u8, u8, ArbSize),
    Purge(u8, bool),
    HookFree(u8),
    OsFail(u8),
}

/// Of `ArbMoreOp::FreeNull`'s draws, those whose gate byte is below this
/// attack (1 in 64): each forks a child (about 9 ms under ASan), once a
/// program, where the allocator promises to stop it.
const ATTACK_BELOW: u8 = 4;

/// An attack's size: the one drawn where an attack can be made at it
/// (16 B to 1 MiB), else the first size of the class it picks: a third of
/// the draws are 0 or 1 (bytes run out) and a fifth past 1 MiB, each an
/// attack skipped.
fn attack_size(drawn: usize) -> usize {
    match (16..=1 << 20).contains(&drawn) {
        true => drawn,
        false => attack_sizes::first_of(drawn),
    }
}

/// Extra bytes an in-place resize asks for on top.
const EXTRAS: [usize; 5] = [0, 1, 16, 4096, 64 << 10];
/// Purge delays: at once, soon, later, never.
const DELAYS: [PurgeDelay; 4] = [
    PurgeDelay::Immediate,
    PurgeDelay::Millis(10),
    PurgeDelay::Millis(1000),
    PurgeDelay::Never,
];

#[derive(Arbitrary)]
enum ArbHeapOp {
    Basic(ArbBasicOp),
    New,
    Delete(u8),
    Destroy(u8),
    Alloc(u8, ArbSize, ArbAlign, bool),
    Collect(u8, bool),
    Visit(u8),
    /// Race sections in `heap_api`: a heap's blocks freed from other
    /// threads while the heap lives on (and, racing them, allocations).
    Race(ArbHeapRaceOp),
}

/// `mt_ops`' ops. The contention ops (where allocator races live: remote
/// frees into one owner, a thread exiting while others free its blocks,
/// every thread in one size class) are three in ten, each one op.
#[derive(Arbitrary)]
enum ArbThreadOp {
    Basic(ArbBasicOp),
    WorkerAlloc(u8, ArbSize, ArbAlign),
    WorkerFree(u8, u8),
    WorkerRealloc(u8, u8, ArbNewSize),
    WorkerCheck(u8, u8),
    ThreadExit(u8, bool),
    /// An `exit-free` of the slot when the flag is set, else an
    /// `exit-alloc`, when the first byte is below [`EXIT_BELOW`]; else the
    /// same call by the worker while it lives: each exit costs a thread.
    ExitCall(u8, u8, u8, ArbSize, ArbAlign, bool),
    Race(ArbRaceOp),
    RemoteFree(u8, u8, ArbSize, ArbAlign, u8),
    Exit(u8, ArbSize, ArbAlign, u8),
    Churn(ArbSize, ArbAlign, u8),
    /// A fork when its first byte is below [`FORK_BELOW`], else a churn:
    /// a fork costs a process's page tables.
    Fork(u8, u8, ArbSize, ArbAlign),
}

/// Of `ArbThreadOp::Fork`'s draws, those whose gate byte is below this
/// fork (1 in 32): each costs about 9 ms under ASan, 20 churns' time, and
/// drawn as often as the other thread ops they took `mt_ops` from about
/// 1,000 to 136 programs a second.
const FORK_BELOW: u8 = 8;

/// Of `ArbThreadOp::ExitCall`'s draws, those whose gate byte is below
/// this end the thread (1 in 16): a thread's start and end under ASan
/// take about 2 ms, 20 to 50 other ops' time (50 `exit-alloc`s 0.18 s
/// against 50 `worker-alloc`s 0.06 s on system), and drawn as often as
/// the other thread ops they took a 30-s `mt_ops` pass on dlmalloc, rlsf
/// and arena from 2,300-3,300 programs a second to 1,500-2,300.
const EXIT_BELOW: u8 = 16;

/// The race ops of `heap_api`: those a heap's blocks take from another
/// thread (a free, and a plain realloc where the heap API has one: its own
/// would allocate in the heap, bound to its thread). With `mt_ops`'
/// remote-free too, running the seeds took 2.0–2.3 s instead of 1.2 s.
#[derive(Arbitrary)]
enum ArbHeapRaceOp {
    Alloc(u8, ArbSize, ArbAlign),
    Free(u8, u8),
    Realloc(u8, u8, ArbNewSize),
}

/// One step of a race section, queued on its worker: the three calls
/// every allocator has, then the zeroed, sized, in-place and usable-size
/// ones (each skipped where the allocator lacks it).
#[derive(Arbitrary)]
enum ArbRaceOp {
    Alloc(u8, ArbSize, ArbAlign),
    Free(u8, u8),
    Realloc(u8, u8, ArbNewSize),
    AllocZeroed(u8, ArbSize, ArbAlign),
    FreeSized(u8, u8),
    ResizeInPlace(u8, u8, ArbNewSize, u8),
    UsableSize(u8, u8),
}

impl ArbBasicOp {
    fn lower(self, h: &mut History) -> Op {
        match self {
            ArbBasicOp::Alloc(size, align) | ArbBasicOp::AllocZeroed(size, align) => {
                let zeroed = matches!(self, ArbBasicOp::AllocZeroed(..));
                let (size, align) = size_align(size, align, h);
                Op::Alloc {
                    size,
                    align,
                    zeroed,
                }
            }
            ArbBasicOp::Free(slot) => Op::Free {
                slot: slot_of(slot),
            },
            ArbBasicOp::Realloc(slot, to) => Op::Realloc {
                slot: slot_of(slot),
                to: to.resolve(h),
            },
            ArbBasicOp::UsableSize(slot) => Op::UsableSize {
                slot: slot_of(slot),
            },
            ArbBasicOp::Calloc(count, size) => {
                let size = size.resolve(h);
                Op::Calloc {
                    count: count.resolve(size),
                    size,
                }
            }
            ArbBasicOp::More(op) => op.lower(h),
        }
    }
}

impl ArbMoreOp {
    fn lower(self, h: &mut History) -> Op {
        match self {
            ArbMoreOp::BulkAlloc(size, align, n) => {
                let (size, align) = size_align(size, align, h);
                Op::BulkAlloc {
                    size,
                    align,
                    count: bulk_count(n),
                }
            }
            ArbMoreOp::BulkFree(slot, n, order) => Op::BulkFree {
                slot: slot_of(slot),
                count: bulk_count(n),
                order,
            },
            ArbMoreOp::ReallocZeroed(slot, to) => Op::ReallocZeroed {
                slot: slot_of(slot),
                to: to.resolve(h),
            },
            ArbMoreOp::ResizeInPlace(slot, to, extra) => Op::ResizeInPlace {
                slot: slot_of(slot),
                to: to.resolve(h),
                extra: EXTRAS[usize::from(extra) % EXTRAS.len()],
            },
            ArbMoreOp::FreeSized(slot) => Op::FreeSized {
                slot: slot_of(slot),
            },
            ArbMoreOp::ReallocPlain(slot, to) => Op::ReallocPlain {
                slot: slot_of(slot),
                to: to.resolve(h),
            },
            ArbMoreOp::ReallocNull(size) => Op::ReallocNull {
                size: size.resolve(h),
            },
            ArbMoreOp::FreeNull(gate, attack, size) if gate < ATTACK_BELOW => Op::Attack {
                attack: Attack::ALL[usize::from(attack) % Attack::ALL.len()],
                size: attack_size(size.resolve(h)),
            },
            ArbMoreOp::FreeNull(..) => Op::FreeNull,
            ArbMoreOp::HookFree(slot) => Op::HookFree {
                slot: slot_of(slot),
            },
            ArbMoreOp::OsFail(ops) => Op::OsFail {
                ops: 1 + usize::from(ops % 4),
            },
            ArbMoreOp::Purge(delay, force) => Op::Purge {
                delay: DELAYS[usize::from(delay) % DELAYS.len()],
                force,
            },
        }
    }
}

impl ArbHeapOp {
    fn lower(self, history: &mut History) -> Op {
        match self {
            ArbHeapOp::Basic(op) => op.lower(history),
            ArbHeapOp::New => Op::HeapNew,
            ArbHeapOp::Delete(h) => Op::HeapDelete { heap: h.into() },
            ArbHeapOp::Destroy(h) => Op::HeapDestroy { heap: h.into() },
            ArbHeapOp::Alloc(h, size, align, zeroed) => {
                let (size, align) = size_align(size, align, history);
                Op::HeapAlloc {
                    heap: h.into(),
                    size,
                    align,
                    zeroed,
                }
            }
            ArbHeapOp::Collect(h, force) => Op::HeapCollect {
                heap: h.into(),
                force,
            },
            ArbHeapOp::Visit(h) => Op::HeapVisit { heap: h.into() },
            ArbHeapOp::Race(ArbHeapRaceOp::Alloc(w, size, align)) => {
                ArbRaceOp::Alloc(w, size, align).lower(history)
            }
            ArbHeapOp::Race(ArbHeapRaceOp::Free(w, s)) => ArbRaceOp::Free(w, s).lower(history),
            ArbHeapOp::Race(ArbHeapRaceOp::Realloc(w, s, to)) => {
                ArbRaceOp::Realloc(w, s, to).lower(history)
            }
        }
    }
}

impl ArbThreadOp {
    fn lower(self, h: &mut History) -> Op {
        match self {
            ArbThreadOp::Basic(op) => op.lower(h),
            ArbThreadOp::Race(op) => op.lower(h),
            ArbThreadOp::WorkerAlloc(..)
            | ArbThreadOp::WorkerFree(..)
            | ArbThreadOp::WorkerRealloc(..)
            | ArbThreadOp::WorkerCheck(..)
            | ArbThreadOp::ThreadExit(..)
            | ArbThreadOp::ExitCall(..) => self.lower_worker(h),
            ArbThreadOp::RemoteFree(..)
            | ArbThreadOp::Exit(..)
            | ArbThreadOp::Churn(..)
            | ArbThreadOp::Fork(..) => self.lower_contention(h),
        }
    }

    /// A worker's op, or its thread's exit, lowered; `self` is one of
    /// them.
    fn lower_worker(self, h: &mut History) -> Op {
        match self {
            ArbThreadOp::WorkerAlloc(w, size, align) => {
                let (size, align) = size_align(size, align, h);
                Op::WorkerAlloc {
                    worker: w.into(),
                    size,
                    align,
                }
            }
            ArbThreadOp::WorkerFree(w, s) => Op::WorkerFree {
                worker: w.into(),
                slot: slot_of(s),
            },
            ArbThreadOp::WorkerRealloc(w, s, to) => Op::WorkerRealloc {
                worker: w.into(),
                slot: slot_of(s),
                to: to.resolve(h),
            },
            ArbThreadOp::WorkerCheck(w, s) => Op::WorkerCheck {
                worker: w.into(),
                slot: slot_of(s),
            },
            ArbThreadOp::ThreadExit(w, restart) => Op::ThreadExit {
                worker: w.into(),
                restart,
            },
            ArbThreadOp::ExitCall(gate, w, s, size, align, free) => {
                let (worker, slot) = (w.into(), slot_of(s));
                match (gate < EXIT_BELOW, free) {
                    (true, true) => Op::ExitFree { worker, slot },
                    (false, true) => Op::WorkerFree { worker, slot },
                    (exits, false) => {
                        let (size, align) = size_align(size, align, h);
                        match exits {
                            true => Op::ExitAlloc {
                                worker,
                                size,
                                align,
                            },
                            false => Op::WorkerAlloc {
                                worker,
                                size,
                                align,
                            },
                        }
                    }
                }
            }
            _ => unreachable!("`lower` hands lower_worker only a worker's op"),
        }
    }

    /// A contention op (remote frees, a thread's exit while others free
    /// its blocks, churn, a fork), lowered; `self` is one of them.
    fn lower_contention(self, h: &mut History) -> Op {
        match self {
            ArbThreadOp::RemoteFree(freer, owner, size, align, count) => {
                let (size, align) = size_align(size, align, h);
                Op::RaceRemoteFree {
                    freer: freer.into(),
                    owner: owner.into(),
                    size,
                    align,
                    count: usize::from(count % 32) + 1,
                }
            }
            ArbThreadOp::Exit(worker, size, align, count) => {
                let (size, align) = size_align(size, align, h);
                Op::RaceExit {
                    worker: worker.into(),
                    size,
                    align,
                    count: usize::from(count % 32) + 1,
                }
            }
            ArbThreadOp::Churn(size, align, count) => {
                let (size, align) = size_align(size, align, h);
                Op::RaceChurn {
                    size,
                    align,
                    count: usize::from(count % 32) + 1,
                }
            }
            ArbThreadOp::Fork(gate, worker, size, align) => {
                let (size, align) = size_align(size, align, h);
                match gate < FORK_BELOW {
                    true => Op::RaceFork {
                        worker: worker.into(),
                        size,
                        align,
                    },
                    false => Op::RaceChurn {
                        size,
                        align,
                        count: usize::from(worker % 32) + 1,
                    },
                }
            }
            _ => unreachable!("`lower` hands lower_contention only a contention op"),
        }
    }
}

impl ArbRaceOp {
    fn lower(self, h: &mut History) -> Op {
        match self {
            ArbRaceOp::Alloc(w, size, align) | ArbRaceOp::AllocZeroed(w, size, align) => {
                let zeroed = matches!(self, ArbRaceOp::AllocZeroed(..));
                let (size, align) = size_align(size, align, h);
                Op::RaceAlloc {
                    worker: w.into(),
                    size,
                    align,
                    zeroed,
                }
            }
            ArbRaceOp::Free(w, s) | ArbRaceOp::FreeSized(w, s) => Op::RaceFree {
                worker: w.into(),
                slot: slot_of(s),
                sized: matches!(self, ArbRaceOp::FreeSized(..)),
            },
            ArbRaceOp::Realloc(w, s, to) => Op::RaceRealloc {
                worker: w.into(),
                slot: slot_of(s),
                to: to.resolve(h),
            },
            ArbRaceOp::ResizeInPlace(w, s, to, extra) => Op::RaceResize {
                worker: w.into(),
                slot: slot_of(s),
                to: to.resolve(h),
                extra: EXTRAS[usize::from(extra) % EXTRAS.len()],
            },
            ArbRaceOp::UsableSize(w, s) => Op::RaceUsableSize {
                worker: w.into(),
                slot: slot_of(s),
            },
        }
    }
}
