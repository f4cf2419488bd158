//! Runs a race section ([`super::race`]): every worker with a script
//! starts at once, each runs its steps ([`super::race_steps`]), and the
//! main thread waits for all.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Arc, Mutex};

use super::claims::Claims;
use super::heap_table::HeapCalls;
use super::race::{Done, Inside, Section, Step};
use crate::allocator::Allocator;
use crate::workers::WorkerPool;

/// What a section did: each step's result, worker 0's script first, the
/// most workers that were inside the allocator at once, and how many
/// allocator calls the workers made.
pub struct Ran {
    pub results: Vec<(Step, Done)>,
    pub most_inside: usize,
    pub calls: usize,
}

/// Race sections run one worker after another (each exit done before the
/// next worker starts) when set: the serial replay of a program whose
/// finding came from a race, which must run clean when the race was the
/// bug ([`serial_races`]).
static SERIAL: AtomicBool = AtomicBool::new(false);

/// Runs every race section of this process serially (`true`), or at once
/// as fuzzing does (`false`, the default). Same steps, same checks, no
/// contention.
pub fn serial_races(serial: bool) {
    SERIAL.store(serial, Ordering::Relaxed);
}

/// Runs the section: every worker with a script, or an exit, starts at
/// once (one after another under [`serial_races`]); a worker that exits
/// ends its thread after its script, and the section is over once that
/// thread is gone. `live`: the bytes the shadow's blocks own, `(start,
/// end)`; a worker handed bytes a live block owns stops there
/// ([`Done::Overlap`]).
pub fn run(
    section: Section,
    live: impl IntoIterator<Item = (usize, usize)>,
    pool: &mut WorkerPool,
    alloc: &'static dyn Allocator,
    heaps: HeapCalls,
) -> Ran {
    let claims = Arc::new(Claims::new(live.into_iter().chain(section.held())));
    let exits = section.exits;
    let starts = |w: usize, script: &Vec<Step>| !script.is_empty() || exits[w];
    let busy = section
        .scripts
        .iter()
        .enumerate()
        .filter(|(w, s)| starts(*w, s))
        .count();
    let gate = Arc::new(AtomicUsize::new(0));
    let (tx, rx) = channel();
    let shared = Shared {
        alloc,
        heaps,
        inside: Arc::new(Inside::default()),
        claims,
        results: Arc::new(Mutex::new(Vec::new())),
        tx,
    };
    let left = Arc::new(AtomicUsize::new(busy));
    let serial = SERIAL.load(Ordering::Relaxed);
    for (worker, script) in section.scripts.into_iter().enumerate() {
        if !starts(worker, &script) {
            continue;
        }
        let start = match serial {
            true => Start {
                gate: Arc::new(AtomicUsize::new(0)),
                together: 1,
                left: Arc::new(AtomicUsize::new(1)),
            },
            false => Start {
                gate: gate.clone(),
                together: busy,
                left: left.clone(),
            },
        };
        let job = shared.clone().job(worker, script, start);
        match exits[worker] {
            true => pool.start_last(worker, job),
            false => pool.start(worker, job),
        }
        if serial {
            // The next worker starts once this one is done (and gone).
            rx.recv().expect("a worker thread died in a race section");
            pool.reap();
        }
    }
    drop(shared.tx);
    if !serial {
        rx.recv().expect("a worker thread died in a race section");
    }
    let results = std::mem::take(&mut *shared.results.lock().unwrap_or_else(|e| e.into_inner()));
    assert_eq!(
        results.len(),
        busy,
        "a worker thread died in a race section"
    );
    // The exits' thread-local destructors may still run, racing the
    // others' last steps: the section ends when they are done.
    pool.reap();
    in_order(results, &shared.inside)
}

/// What every worker of a section shares: the allocator and heap calls
/// its steps make, the count of workers inside the allocator, the claims
/// on live bytes, where it leaves its results (with its index), and the
/// channel on which the last to finish wakes the main thread.
#[derive(Clone)]
struct Shared {
    alloc: &'static dyn Allocator,
    heaps: HeapCalls,
    inside: Arc<Inside>,
    claims: Arc<Claims>,
    results: Arc<Mutex<Results>>,
    tx: Sender<()>,
}

/// What each worker's steps did, with its index, in the order they
/// finished.
type Results = Vec<(usize, Vec<(Step, Done)>)>;

/// When a worker starts and whether it is the last to finish: it waits
/// at `gate` until `together` workers are there, and `left` counts the
/// workers of its run still running.
struct Start {
    gate: Arc<AtomicUsize>,
    together: usize,
    left: Arc<AtomicUsize>,
}

impl Shared {
    /// Worker `worker`'s job: it waits for the others at `start`, runs
    /// `script`, leaves its results, and wakes the main thread if it is
    /// the last of its run to finish (once, not once per worker, each
    /// wakeup taking a CPU from the workers still racing).
    fn job(self, worker: usize, script: Vec<Step>, start: Start) -> impl FnOnce() + Send + 'static {
        move || {
            wait_for_all(&start.gate, start.together);
            let done = self.steps(script);
            self.results
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((worker, done));
            if start.left.fetch_sub(1, Ordering::AcqRel) == 1 {
                let _ = self.tx.send(());
            }
        }
    }

    /// Runs `script`'s steps in order, up to the first handed bytes a
    /// live block owns ([`Done::Overlap`]); returns each with what it did.
    fn steps(&self, script: Vec<Step>) -> Vec<(Step, Done)> {
        let mut done = Vec::with_capacity(script.len());
        for s in script {
            let d = super::race_steps::step(
                self.alloc,
                self.heaps.get(),
                &s,
                &self.inside,
                &self.claims,
            );
            let overlapped = matches!(d, Done::Overlap { .. });
            done.push((s, d));
            if overlapped {
                break;
            }
        }
        done
    }
}

/// What the section did, from each worker's results and `inside`'s
/// counts: the steps' results, worker 0's script first.
fn in_order(mut results: Results, inside: &Inside) -> Ran {
    results.sort_by_key(|(worker, _)| *worker);
    let (most_inside, calls) = inside.counts();
    Ran {
        results: results.into_iter().flat_map(|(_, done)| done).collect(),
        most_inside,
        calls,
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
