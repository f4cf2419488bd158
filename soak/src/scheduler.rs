//! Which slot runs next: a weighted draw, weights following yield.
//!
//! As ClusterFuzz does, a slot's weight is its configured weight times a
//! yield factor kept in the store: slots that find new coverage or new
//! bugs go up, slots that stay flat or keep hitting known crashes,
//! timeouts or OOMs go down, never below [`FLOOR`]. A slot with fewer than
//! [`NEW_SLICES`] slices is new and counts double.

use crate::store::SliceStats;

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
    let mut f = factor;
    if y.new_groups > 0 {
        f *= 1.5;
    }
    if y.stats.merged_units > 0 {
        f *= 1.25;
    } else {
        f *= 0.8;
    }
    if y.repeats > 0 {
        f *= 0.5;
    }
    f.clamp(FLOOR, CEILING)
}

/// The draw weight of a slot.
pub fn weight(configured: f64, factor: f64, slices: usize) -> f64 {
    let boost = if slices < NEW_SLICES { 2.0 } else { 1.0 };
    configured * factor * boost
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
