//! Runs a race section ([`super::race`]): every worker with a script
//! starts at once, each runs its steps ([`super::race_steps`]), and the
//! main thread waits for all.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::mpsc::channel;
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
    let inside = Arc::new(Inside::default());
    // Each worker leaves its results here; the last of a run to finish
    // wakes the main thread, once (not once per worker, each wakeup
    // taking a CPU from the workers still racing).
    let results = Arc::new(Mutex::new(Vec::new()));
    let left = Arc::new(AtomicUsize::new(busy));
    let (tx, rx) = channel();
    let serial = SERIAL.load(Ordering::Relaxed);
    for (worker, script) in section.scripts.into_iter().enumerate() {
        if !starts(worker, &script) {
            continue;
        }
        let (inside, claims, tx, heaps, results) = (
            inside.clone(),
            claims.clone(),
            tx.clone(),
            heaps.clone(),
            results.clone(),
        );
        let (gate, together, left) = match serial {
            true => (
                Arc::new(AtomicUsize::new(0)),
                1,
                Arc::new(AtomicUsize::new(1)),
            ),
            false => (gate.clone(), busy, left.clone()),
        };
        let job = move || {
            wait_for_all(&gate, together);
            let mut done = Vec::with_capacity(script.len());
            for s in script {
                let d = super::race_steps::step(alloc, heaps.get(), &s, &inside, &claims);
                let overlapped = matches!(d, Done::Overlap { .. });
                done.push((s, d));
                if overlapped {
                    break;
                }
            }
            results
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push((worker, done));
            if left.fetch_sub(1, Ordering::AcqRel) == 1 {
                let _ = tx.send(());
            }
        };
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
    drop(tx);
    if !serial {
        rx.recv().expect("a worker thread died in a race section");
    }
    let mut results = std::mem::take(&mut *results.lock().unwrap_or_else(|e| e.into_inner()));
    assert_eq!(
        results.len(),
        busy,
        "a worker thread died in a race section"
    );
    // The exits' thread-local destructors may still run, racing the
    // others' last steps: the section ends when they are done.
    pool.reap();
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
