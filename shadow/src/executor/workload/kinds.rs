//! The stress programs' shapes, one function per [`Kind`], each the body
//! of one thread (our own code, after the shapes of mimalloc-bench's
//! programs). Each stops at the run's first violation that leaves memory
//! in doubt, and otherwise frees everything it holds before it returns.

use std::sync::atomic::Ordering;

use super::{Block, Shared, Worker};
use crate::op::workload::Kind;
use crate::violation::Site;

/// How many steps a thread takes between looks at its inbox.
const DRAIN_EVERY: usize = 64;
/// Generations of threads a `churn` run starts at most.
const GENERATIONS: usize = 32;

/// Runs the workload's threads (one after another on this thread when
/// the allocator is single-threaded).
pub(super) fn run(shared: &Shared, single: bool) {
    let w = shared.workload.expect("a workload's run");
    match w.kind {
        Kind::Churn => {
            let generations = (w.ops / w.slots.max(1)).clamp(1, GENERATIONS);
            for generation in 0..generations {
                if shared.stopped() || shared.late() {
                    break;
                }
                threads(shared, single, churn, generation);
            }
        }
        Kind::Scratch => {
            // Each thread's first block is allocated here, by another
            // thread than the one that frees it.
            let mut main = Worker::new(shared, w.threads);
            for id in 0..w.threads {
                let size = w.min;
                match main.alloc_of(size) {
                    Some(b) => shared.send(id, b),
                    None => break,
                }
            }
            threads(shared, single, scratch, 0);
        }
        Kind::Xmalloc => {
            shared
                .producing
                .store(w.threads.div_ceil(2), Ordering::SeqCst);
            threads(shared, single, xmalloc, 0);
        }
        Kind::Larson => threads(shared, single, larson, 0),
        Kind::Frag => threads(shared, single, frag, 0),
        Kind::Mix => threads(shared, single, mix, 0),
    }
}

/// Runs `body` on each of the workload's threads, at once (or in order);
/// each `churn` generation's threads draw sizes of their own.
fn threads(shared: &Shared, single: bool, body: fn(&mut Worker), generation: usize) {
    let n = shared.inboxes.len();
    let worker = |id| Worker::of_generation(shared, id, generation);
    if single {
        // Even threads first: `xmalloc`'s producers, before the
        // consumers that wait for them.
        for id in (0..n).step_by(2).chain((1..n).step_by(2)) {
            body(&mut worker(id));
        }
        return;
    }
    std::thread::scope(|s| {
        for id in 0..n {
            s.spawn(move || body(&mut worker(id)));
        }
    });
}

/// Frees every block in `blocks`, then what was handed to this thread.
fn free_all(w: &mut Worker, blocks: impl IntoIterator<Item = Block>) {
    for b in blocks {
        if !w.free(b) {
            return;
        }
    }
    w.drain();
}

/// larson: replace a random slot's block; one in eight old blocks goes
/// to another thread to free.
fn larson(w: &mut Worker) {
    let n = w.w().slots;
    let mut slots: Vec<Option<Block>> = (0..n).map(|_| w.alloc()).collect();
    for step in 0..w.w().ops {
        if w.stopped() {
            return;
        }
        if w.shared.late() {
            break;
        }
        let k = w.below(n);
        if let Some(b) = slots[k].take() {
            match w.below(8) {
                0 => w.send_away(b),
                _ if !w.free(b) => return,
                _ => {}
            }
        }
        slots[k] = w.alloc();
        if step.is_multiple_of(DRAIN_EVERY) && !w.drain() {
            return;
        }
    }
    free_all(w, slots.into_iter().flatten());
}

/// xmalloc: even threads produce (allocate and hand on to the next
/// thread), odd ones consume (check and free). A producer whose consumer
/// holds `slots` blocks already frees its block itself.
fn xmalloc(w: &mut Worker) {
    let threads = w.w().threads;
    let producer = w.id.is_multiple_of(2);
    if producer {
        let to = (w.id + 1) % threads;
        for step in 0..w.w().ops {
            if w.stopped() || w.shared.late() {
                break;
            }
            let Some(b) = w.alloc() else { continue };
            let queued = w.shared.inboxes[to]
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .len();
            if queued < w.w().slots {
                w.shared.send(to, b);
            } else if !w.free(b) {
                break;
            }
            if to == w.id && step % DRAIN_EVERY == 0 && !w.drain() {
                break;
            }
        }
        w.shared.producing.fetch_sub(1, Ordering::SeqCst);
        // What is handed to it later, the run's end frees.
        w.drain();
        return;
    }
    // A consumer frees what it gets until no producer runs.
    loop {
        let done = w.shared.producing.load(Ordering::SeqCst) == 0;
        if !w.drain() || done {
            return;
        }
        std::thread::yield_now();
    }
}

/// churn (one generation's thread): allocate, free half of what the
/// generation before left, free half of one's own, and exit owning the
/// rest, which the next generation frees.
fn churn(w: &mut Worker) {
    let n = w.w().slots;
    let mut own: Vec<Block> = (0..n).filter_map(|_| w.alloc()).collect();
    let inherited: Vec<Block> = {
        let mut pool = w.shared.pool.lock().unwrap_or_else(|e| e.into_inner());
        let from = pool.len().saturating_sub(n / 2 + 1);
        pool.drain(from..).collect()
    };
    for b in inherited {
        if !w.free(b) {
            return;
        }
    }
    let keep = own.split_off(own.len() / 2);
    for b in own {
        if !w.free(b) {
            return;
        }
    }
    w.shared
        .pool
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .extend(keep);
}

/// frag: mixed sizes with random lifetimes; reallocs grow and shrink
/// them; one freed block in sixteen goes to another thread.
fn frag(w: &mut Worker) {
    let most = w.w().slots;
    let mut live: Vec<Block> = Vec::new();
    for step in 0..w.w().ops {
        if w.stopped() {
            return;
        }
        if w.shared.late() {
            break;
        }
        let roll = w.below(10);
        if live.is_empty() || (roll < 5 && live.len() < most) {
            live.extend(w.alloc());
        } else if roll < 7 {
            let k = w.below(live.len());
            let to = match w.below(3) {
                0 => live[k].size * 2,
                1 => live[k].size.div_ceil(2),
                _ => w.size(),
            };
            if !w.realloc(&mut live[k], to.clamp(1, crate::op::workload::MAX_SIZE)) {
                return;
            }
        } else {
            let b = live.swap_remove(w.below(live.len()));
            match w.below(16) {
                0 => w.send_away(b),
                _ if !w.free(b) => return,
                _ => {}
            }
        }
        if step.is_multiple_of(DRAIN_EVERY) && !w.drain() {
            return;
        }
    }
    free_all(w, live);
}

/// mix: half the slots hold long-lived blocks the whole run (one checked
/// in place every few bursts); bursts of short-lived ones come and go
/// beside them.
fn mix(w: &mut Worker) {
    let long: Vec<Block> = (0..w.w().slots.div_ceil(2))
        .filter_map(|_| w.alloc())
        .collect();
    let mut step = 0;
    while step < w.w().ops && !w.stopped() && !w.shared.late() {
        let burst = 1 + w.below(32);
        let mut short: Vec<Block> = (0..burst).filter_map(|_| w.alloc()).collect();
        while !short.is_empty() {
            let b = short.swap_remove(w.below(short.len()));
            if !w.free(b) {
                return;
            }
        }
        step += 2 * burst;
        if !long.is_empty() && w.below(4) == 0 {
            let b = long[w.below(long.len())];
            if !w.check(&b, "while held", Site::new("alloc", b.size, b.align)) {
                return;
            }
        }
    }
    free_all(w, long);
}

/// cache-scratch: free the block another thread allocated for this one,
/// then allocate blocks of its size and write them over and over.
fn scratch(w: &mut Worker) {
    if !w.drain() {
        return;
    }
    let size = w.w().min;
    let mut step = 0;
    while step < w.w().ops && !w.stopped() && !w.shared.late() {
        let Some(b) = w.alloc_of(size) else {
            step += 1;
            continue;
        };
        for _ in 0..4 {
            // SAFETY: this thread holds the live `size`-byte block `b`;
            // rewriting its pattern leaves what a check expects.
            unsafe { crate::pattern::fill(b.ptr as *mut u8, b.size, b.seed) };
        }
        if !w.free(b) {
            return;
        }
        step += 2;
    }
}
