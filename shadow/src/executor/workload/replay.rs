//! Replays a recorded program's allocations ([`Trace`]) under an
//! allocator, with a workload's checks: each recorded thread on a thread
//! of its own, each block with its pattern, checked at its free and its
//! realloc (wherever that happens), each alignment and zeroed block as
//! it comes.
//!
//! A thread runs its own calls in their recorded order. A call on a block
//! another thread allocated waits until that thread has allocated it, so
//! a free that crossed threads in the recording crosses them again, and
//! nothing else is serialized: the threads run as freely as the
//! program's did. (No two threads can wait on each other: each waits only
//! for a call recorded before its own.) A single-threaded allocator
//! replays every thread on the calling thread, switching when one waits.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::{Block, Shared, Worker};
use crate::allocator::Allocator;
use crate::executor::{Mode, Stats};
use crate::op::trace::{Step, Trace};

/// Called with `i` as the replay passes `trace.resident[i]` (the steps
/// before it ran, on all threads), from the thread that passed it.
pub type OnMark<'a> = &'a (dyn Fn(usize) + Sync);

/// Replays `trace` (named `name` in reports) on `alloc`; panics with an
/// `allocsoak violation:` line at the first broken invariant. With
/// `on_mark`, says when it passes each reading of the recorded program's
/// memory, so the replay's can be read beside it.
pub fn replay(
    trace: &Trace,
    name: &str,
    alloc: &'static dyn Allocator,
    mode: Mode,
    on_mark: Option<OnMark>,
) -> Stats {
    let threads = trace.threads.len().max(1);
    let op = format!("trace {name}");
    let shared = Shared::new(alloc, mode, op, 0, threads, None);
    let blocks: Vec<Mutex<Option<Live>>> = (0..trace.blocks).map(|_| Mutex::new(None)).collect();
    let run = Replay {
        shared: &shared,
        blocks: &blocks,
        marks: on_mark.map(|on| Marks {
            steps: trace.resident.iter().map(|m| m.steps).collect(),
            on,
            done: AtomicUsize::new(0),
            next: AtomicUsize::new(0),
        }),
    };
    let max_align = alloc.max_align();
    match alloc.single_threaded() {
        true => run.cooperative(&trace.threads, max_align),
        false => std::thread::scope(|s| {
            for (id, steps) in trace.threads.iter().enumerate() {
                let run = &run;
                s.spawn(move || {
                    let mut w = Worker::new(run.shared, id);
                    for step in steps {
                        if run.step(&mut w, step, max_align, true) != Done::Ran {
                            return;
                        }
                    }
                });
            }
        }),
    }
    let calls = shared.end();
    Stats {
        ops: 1,
        calls,
        ..Stats::default()
    }
}

/// A block once its allocation ran: `None` when the allocator refused it
/// (a fixed region that is full), and its free and reallocs are skipped.
type Live = Option<Block>;

/// The bytes a replay of `trace` holds for its own table of blocks, which
/// a measure of the allocator's memory leaves out.
pub fn table_bytes(trace: &Trace) -> usize {
    trace.blocks * std::mem::size_of::<Mutex<Option<Live>>>()
}

struct Replay<'a> {
    shared: &'a Shared,
    /// Each block once its allocation ran, until a step takes it.
    blocks: &'a [Mutex<Option<Live>>],
    marks: Option<Marks<'a>>,
}

/// The recorded readings a replay passes, counted in steps.
struct Marks<'a> {
    /// Steps before each reading.
    steps: Vec<usize>,
    on: OnMark<'a>,
    /// Steps run, on all threads.
    done: AtomicUsize,
    /// The next reading to pass.
    next: AtomicUsize,
}

impl Marks<'_> {
    /// Counts a step run; says so when it passes a reading.
    fn ran(&self) {
        let done = self.done.fetch_add(1, Ordering::Relaxed) + 1;
        let next = self.next.load(Ordering::Relaxed);
        let passed = self.steps.get(next).is_some_and(|&s| done >= s);
        if passed
            && self
                .next
                .compare_exchange(next, next + 1, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            (self.on)(next);
        }
    }
}

#[derive(PartialEq, Eq)]
enum Done {
    Ran,
    /// The block it needs is not allocated yet.
    Waits,
    Stopped,
}

impl Replay<'_> {
    /// Runs one step on `w`'s thread; with `wait`, waits for the block it
    /// needs.
    fn step(&self, w: &mut Worker, step: &Step, max_align: usize, wait: bool) -> Done {
        let mut block = None;
        if let Some(b) = step.needs() {
            loop {
                if self.shared.stopped() {
                    return Done::Stopped;
                }
                block = self.blocks[b]
                    .lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .take();
                if block.is_some() {
                    break;
                }
                if !wait {
                    return Done::Waits;
                }
                std::thread::yield_now();
            }
        }
        let ran = match (*step, block) {
            (
                Step::Alloc {
                    block,
                    size,
                    align,
                    zeroed,
                },
                _,
            ) => {
                // An alignment the allocator does not serve is left to
                // malloc's (the recorded program's allocator served it).
                let align = if align > max_align { 16 } else { align };
                let got = w.alloc_as(size, align, zeroed);
                *self.blocks[block].lock().unwrap_or_else(|e| e.into_inner()) = Some(got);
                !self.shared.stopped()
            }
            (Step::Free { .. }, Some(Some(b))) => w.free(b),
            (Step::Realloc { block, size }, Some(Some(mut b))) => {
                let ok = w.realloc(&mut b, size);
                *self.blocks[block].lock().unwrap_or_else(|e| e.into_inner()) = Some(Some(b));
                ok
            }
            // The allocation was refused: nothing to free or move.
            (Step::Free { .. }, Some(None)) => true,
            (Step::Realloc { block, .. }, Some(None)) => {
                *self.blocks[block].lock().unwrap_or_else(|e| e.into_inner()) = Some(None);
                true
            }
            _ => unreachable!("a step that needs a block has it"),
        };
        if !ran {
            return Done::Stopped;
        }
        if let Some(marks) = &self.marks {
            marks.ran();
        }
        Done::Ran
    }

    /// Every thread's steps on this thread: each runs until it waits for
    /// a block, then the next one goes on.
    fn cooperative(&self, threads: &[Vec<Step>], max_align: usize) {
        let mut workers: Vec<Worker> = (0..threads.len())
            .map(|id| Worker::new(self.shared, id))
            .collect();
        let mut at = vec![0; threads.len()];
        loop {
            let mut moved = false;
            for (id, steps) in threads.iter().enumerate() {
                while let Some(step) = steps.get(at[id]) {
                    match self.step(&mut workers[id], step, max_align, false) {
                        Done::Ran => {
                            at[id] += 1;
                            moved = true;
                        }
                        Done::Waits => break,
                        Done::Stopped => return,
                    }
                }
            }
            if !moved {
                return;
            }
        }
    }
}
