//! RSS drift: does an allocator's retained memory grow with the ops it
//! does? A correct allocator plateaus once warm; a leaking one keeps
//! growing with ops.
//!
//! This crate is the statistics half and does no I/O. The caller samples a
//! replay process (a [`Reading`], printed by it and read back by the
//! soak; its [`Sample`] is what the fit needs); [`trend`] decides from a
//! series whether retained memory drifts, and [`downsample`] thins old
//! samples into [`Bucket`]s that [`trend_downsampled`] decides from just
//! as well.
//!
//! - The fit is against ops, not time: time without ops (a pause) is not
//!   growth, and a faster or slower machine gives the same slope.
//! - The slope is Theil–Sen's (the median of pairwise slopes), with Sen's
//!   interval for it and Mann–Kendall's test beside it; the rules and
//!   defaults are on [`TrendConfig`], the verdict on [`Trend`].
//!
//! ```
//! use drift::{trend, Sample, TrendConfig, Verdict};
//!
//! // A reading every 10 s, 100,000 ops apart: 1 MiB held live by the
//! // programs, 8 MiB of caches, and 100 bytes more per 1,000 ops.
//! let samples: Vec<Sample> = (0..200u64)
//!     .map(|i| {
//!         let ops = i * 100_000;
//!         let live = 1 << 20;
//!         let rss = live + (8 << 20) + ops / 10;
//!         Sample { secs: 1_700_000_000 + 10 * i, ops, rss, live }
//!     })
//!     .collect();
//! let found = trend(&samples, &TrendConfig::default());
//! assert_eq!(found.verdict, Verdict::Drifts);
//! assert_eq!(found.slope_bytes_per_kop, 100.0);
//! ```
//!
//! # Gaps
//!
//! A series may hold restarts: the replay process stopped and a new one
//! began, with memory back at its cold size. A gap lies between two
//! consecutive samples when `ops` went down ([`is_gap`]); that is the one
//! mark of a restart, so `Sample::ops` must count from the start of the
//! process that `rss` is read from. The samples between gaps are a
//! segment ([`segments`]); a downsampled series marks the first bucket of
//! each segment with [`Bucket::restart`], as no bucket spans a gap.
//!
//! Each segment is fitted on its own ops axis with its own warm-up, and
//! only pairs within one segment are compared (the seasonal Kendall test
//! of Hirsch, Slack and Smith 1982, with segments for seasons): a restart
//! is neither a drop nor a jump, a leak shows in each segment, and the
//! segments' evidence adds up.
//!
//! A jump forward in time is not a gap: with ops for the axis, a pause or
//! a sampler that was down for a while costs nothing.
//!
//! # Why not a crate for the fit
//!
//! `statrs` gives the normal quantile and CDF. For the rest, crates.io had
//! `mann_kendall` (a single 0.1 release from 2022, built around a C
//! interface, with no slope) and Theil–Sen slopes in `robust-rs` and
//! `std-dev` (the slope only: no Sen interval, no ties correction, no
//! pairs kept within segments). What is needed here is a hundred lines
//! over one list of pairwise slopes, so it is written here.

#![deny(missing_docs)]

mod downsample;
mod reading;
mod trend;

#[cfg(test)]
mod tests;

pub use downsample::{downsample, rethin, Bucket, HOUR_AFTER_SECS, MINUTE_AFTER_SECS};
pub use reading::{Curve, Mark, Reading};
pub use trend::{trend, trend_downsampled, Trend, TrendConfig, Verdict};

/// One reading of a replay process.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    /// When it was read: unix time, in seconds.
    pub secs: u64,
    /// Ops the process has done since it started. A restart starts it
    /// again, which is how a gap shows (see [the crate docs](crate#gaps)).
    pub ops: u64,
    /// The process's resident set size, in bytes.
    pub rss: u64,
    /// Bytes the replayed programs held live at the reading.
    pub live: u64,
}

impl Sample {
    /// Bytes resident beyond what the programs hold: the allocator's own
    /// overhead, caches and leaks. This is what drifts or not.
    pub fn retained(&self) -> u64 {
        self.rss.saturating_sub(self.live)
    }
}

/// Whether a gap (a restart) lies between two consecutive samples: `ops`
/// went down.
pub fn is_gap(prev: &Sample, next: &Sample) -> bool {
    next.ops < prev.ops
}

/// The runs of samples between gaps, in order.
pub fn segments(samples: &[Sample]) -> impl Iterator<Item = &[Sample]> {
    samples.chunk_by(|a, b| !is_gap(a, b))
}
