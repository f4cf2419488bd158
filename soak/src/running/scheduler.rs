//! Which slot runs next: a weighted draw, weights following yield.
//!
//! As ClusterFuzz does, a slot's weight is its configured weight times a
//! yield factor kept in the store: slots that find new coverage or new
//! bugs go up, slots that stay flat or keep hitting known crashes,
//! timeouts or OOMs go down, never below [`FLOOR`]. A slot with fewer than
//! [`NEW_SLICES`] slices is new and counts double, and one that never ran
//! goes before any that did ([`drawable`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Condvar, Mutex};
use std::time::Duration;

use crate::foundation::lock::lock;
use crate::foundation::store::SliceStats;

/// Runs `each` on every item, `jobs` at a time; the results in the
/// items' order.
pub fn in_parallel<C: Sync, T: Send>(
    items: &[C],
    jobs: usize,
    each: impl Fn(&C) -> T + Sync,
) -> Vec<T> {
    let next = Mutex::new(0usize);
    let results: Mutex<Vec<Option<T>>> = Mutex::new(items.iter().map(|_| None).collect());
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, items.len().max(1)) {
            s.spawn(|| loop {
                let i = {
                    let mut n = lock(&next);
                    *n += 1;
                    *n - 1
                };
                let Some(item) = items.get(i) else { break };
                let result = each(item);
                lock(&results)[i] = Some(result);
            });
        }
    });
    let results = results.into_inner().unwrap_or_else(|e| e.into_inner());
    results
        .into_iter()
        .map(|r| r.expect("every item ran"))
        .collect()
}

/// The soak's cores (its `--jobs`), which running slices hold: a slot
/// with `cores = N` takes N (at most all of them) for its slice, so the
/// soak never runs more engine processes than it has cores.
pub struct Cores {
    free: Mutex<usize>,
    freed: Condvar,
    all: usize,
}

impl Cores {
    pub fn new(all: usize) -> Cores {
        Cores {
            free: Mutex::new(all.max(1)),
            freed: Condvar::new(),
            all: all.max(1),
        }
    }

    /// The cores the soak holds (its `--jobs`).
    pub fn all(&self) -> usize {
        self.all
    }

    /// Waits until `n` cores (at most all) are free and takes them;
    /// returns how many it took, or None when `stop` was set first.
    pub fn take(&self, n: usize, stop: &AtomicBool) -> Option<usize> {
        let n = n.clamp(1, self.all);
        let mut free = lock(&self.free);
        while *free < n {
            if stop.load(Ordering::Relaxed) {
                return None;
            }
            free = self
                .freed
                .wait_timeout(free, Duration::from_millis(200))
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
        *free -= n;
        Some(n)
    }

    /// Gives back what [`Cores::take`] took.
    pub fn give(&self, n: usize) {
        *lock(&self.free) += n;
        self.freed.notify_all();
    }
}

/// The lowest yield factor: a slot is slowed down, never starved.
pub const FLOOR: f64 = 0.05;
const CEILING: f64 = 4.0;
/// Slices a slot stays "new" for.
pub const NEW_SLICES: usize = 2;

/// How a slice ended, as the scheduler sees it.
pub struct Yield<'a> {
    pub stats: &'a SliceStats,
    /// New crash groups it filed.
    pub new_groups: usize,
    /// Crashes it hit that went into known groups, plus timeouts and OOMs.
    pub repeats: usize,
}

/// The yield factor after a slice.
pub fn next_factor(factor: f64, y: &Yield) -> f64 {
    let f = if y.stats.merged_units > 0 {
        factor * 1.25
    } else {
        factor * 0.8
    };
    filing_factor(f, y.new_groups, y.repeats)
}

/// The yield factor once a slice's findings are filed (the intake worker
/// files them after the slice): a new group raises it, crashes into known
/// groups lower it.
pub fn filing_factor(factor: f64, new_groups: usize, repeats: usize) -> f64 {
    let mut f = factor;
    if new_groups > 0 {
        f *= 1.5;
    }
    if repeats > 0 {
        f *= 0.5;
    }
    f.clamp(FLOOR, CEILING)
}

/// The draw weight of a slot.
pub fn weight(configured: f64, factor: f64, slices: usize) -> f64 {
    let boost = if slices < NEW_SLICES { 2.0 } else { 1.0 };
    configured * factor * boost
}

/// A slot as the draw sees it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Candidate {
    pub id: i64,
    pub weight: f64,
    /// It has run a slice (in this soak or one before on the state dir).
    pub ran: bool,
    /// A slice of it is running now.
    pub busy: bool,
    /// Every part it runs is built (`--build` builds beside the slices).
    pub built: bool,
}

/// The slots a draw picks from, among the built ones: the idle ones that
/// never ran while there are any (so a first soak shorter than its slots'
/// turns still runs each one, whatever the first slices filed), else the
/// idle ones, else all; none while parts are still `building` and every
/// built slot is busy (a second slice of a busy slot waits for them).
pub fn drawable(candidates: &[Candidate], building: bool) -> Vec<Candidate> {
    let built: Vec<Candidate> = candidates.iter().filter(|c| c.built).copied().collect();
    let idle = built.iter().filter(|c| !c.busy);
    let unran: Vec<Candidate> = idle.clone().filter(|c| !c.ran).copied().collect();
    let idle: Vec<Candidate> = idle.copied().collect();
    match (unran.is_empty(), idle.is_empty()) {
        (false, _) => unran,
        (true, false) => idle,
        (true, true) if building => Vec::new(),
        (true, true) => built,
    }
}

/// Picks an index by weight with `roll` in [0, 1).
pub fn pick(weights: &[f64], roll: f64) -> Option<usize> {
    let total: f64 = weights.iter().sum();
    if weights.is_empty() || total <= 0.0 {
        return None;
    }
    let mut at = roll * total;
    for (i, w) in weights.iter().enumerate() {
        if at < *w {
            return Some(i);
        }
        at -= w;
    }
    Some(weights.len() - 1)
}

/// A small PRNG for draws (xorshift64*); seeded per soak.
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed | 1)
    }

    /// A number in [0, 1).
    pub fn roll(&mut self) -> f64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        (self.0.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 11) as f64 / (1u64 << 53) as f64
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stats(merged: u64) -> SliceStats {
        SliceStats {
            merged_units: merged,
            ..SliceStats::default()
        }
    }

    #[test]
    fn yield_moves_weights_and_never_to_zero() {
        let flat = stats(0);
        let mut f = 1.0;
        for _ in 0..100 {
            f = next_factor(
                f,
                &Yield {
                    stats: &flat,
                    new_groups: 0,
                    repeats: 3,
                },
            );
        }
        assert_eq!(f, FLOOR);
        let growing = stats(12);
        let up = next_factor(
            1.0,
            &Yield {
                stats: &growing,
                new_groups: 1,
                repeats: 0,
            },
        );
        assert!(up > 1.0);
        assert!(
            next_factor(
                1.0,
                &Yield {
                    stats: &flat,
                    new_groups: 0,
                    repeats: 0
                }
            ) < 1.0
        );
        assert!(weight(1.0, 1.0, 0) > weight(1.0, 1.0, NEW_SLICES));
    }

    #[test]
    fn every_slot_runs_once_before_any_runs_twice() {
        let slot = |id, weight, ran, busy| Candidate {
            id,
            weight,
            ran,
            busy,
            built: true,
        };
        // A slot whose first slice filed bugs weighs 4; one that never ran
        // goes first all the same.
        let slots = [
            slot(1, 4.0, true, false),
            slot(2, 2.0, false, false),
            slot(3, 2.0, false, true),
        ];
        assert_eq!(drawable(&slots, false), [slots[1]]);
        let ran = [slot(1, 4.0, true, false), slot(2, 1.0, true, true)];
        assert_eq!(drawable(&ran, false), [ran[0]]);
        let busy = [slot(1, 4.0, true, true), slot(2, 1.0, false, true)];
        assert_eq!(drawable(&busy, false), busy);
    }

    #[test]
    fn a_slot_is_drawn_once_built_and_a_busy_one_waits_for_the_build() {
        let slot = |id, busy, built| Candidate {
            id,
            weight: 1.0,
            ran: false,
            busy,
            built,
        };
        let slots = [slot(1, false, false), slot(2, false, true)];
        assert_eq!(drawable(&slots, true), [slots[1]]);
        let busy = [slot(1, false, false), slot(2, true, true)];
        assert_eq!(drawable(&busy, true), []);
        assert_eq!(drawable(&busy, false), [busy[1]]);
        assert_eq!(drawable(&[slot(1, false, false)], false), []);
    }

    #[test]
    fn cores_are_held_until_given_back() {
        let cores = Cores::new(2);
        let stop = AtomicBool::new(false);
        assert_eq!(cores.take(8, &stop), Some(2));
        stop.store(true, Ordering::Relaxed);
        assert_eq!(cores.take(1, &stop), None);
        cores.give(2);
        assert_eq!(cores.take(1, &stop), Some(1));
        assert_eq!(cores.take(1, &stop), Some(1));
    }

    #[test]
    fn draws_follow_weights() {
        let weights = [1.0, 3.0, 0.0];
        let mut rng = Rng::new(7);
        let mut counts = [0; 3];
        for _ in 0..4000 {
            counts[pick(&weights, rng.roll()).unwrap()] += 1;
        }
        assert_eq!(counts[2], 0);
        assert!((2600..3400).contains(&counts[1]), "{counts:?}");
        assert_eq!(pick(&[], 0.5), None);
    }
}
