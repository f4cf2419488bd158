//! Old samples thinned into per-minute and per-hour buckets.

use crate::{is_gap, Sample};

/// Samples older than this (seconds before `now`) go into per-minute
/// buckets; newer ones stay raw. One hour.
pub const MINUTE_AFTER_SECS: u64 = 60 * 60;

/// Samples older than this go into per-hour buckets. One day.
pub const HOUR_AFTER_SECS: u64 = 24 * 60 * 60;

/// Consecutive samples of one tier's interval, summarised. A raw sample
/// is a bucket of one.
///
/// Intervals are aligned to the clock (minute `secs / 60`, hour
/// `secs / 3600`), and a bucket never spans a gap: a restart inside an
/// interval starts a new bucket there, marked `restart`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Bucket {
    /// Time of the first sample in it.
    pub secs: u64,
    /// Time of the last sample in it.
    pub last_secs: u64,
    /// How many samples it holds.
    pub samples: u32,
    /// The median of their ops: the bucket's place on the fit's axis.
    pub ops: u64,
    /// The least retained bytes among them.
    pub min: u64,
    /// The median of their retained bytes: the bucket's value in the fit.
    pub median: u64,
    /// The most retained bytes among them.
    pub max: u64,
    /// A gap lies between this bucket and the one before: it starts a
    /// segment.
    pub restart: bool,
}

/// `samples`, in the order taken, thinned by age at `now_secs`:
///
/// - younger than [`MINUTE_AFTER_SECS`] (the last hour): raw, a bucket
///   each;
/// - younger than [`HOUR_AFTER_SECS`] (the last day): per minute;
/// - older: per hour.
///
/// A week of 10-second samples (60,480) becomes at most 360 raw, 1,380
/// minute and 144 hour buckets, plus one per tier boundary or restart
/// that splits an interval. [`trend_downsampled`](crate::trend_downsampled)
/// fits the buckets' medians.
pub fn downsample(samples: &[Sample], now_secs: u64) -> Vec<Bucket> {
    let raw: Vec<Bucket> = samples
        .iter()
        .enumerate()
        .map(|(i, s)| Bucket::of(s, i > 0 && is_gap(&samples[i - 1], s)))
        .collect();
    rethin(&raw, now_secs)
}

impl Bucket {
    /// One raw reading as a bucket of one; `restart` when a gap lies
    /// before it.
    pub fn of(sample: &Sample, restart: bool) -> Bucket {
        let retained = sample.retained();
        Bucket {
            secs: sample.secs,
            last_secs: sample.secs,
            samples: 1,
            ops: sample.ops,
            min: retained,
            median: retained,
            max: retained,
            restart,
        }
    }
}

/// `buckets` (a stored series: raw readings as buckets of one, older ones
/// already thinned), thinned again by age at `now_secs` with the tiers of
/// [`downsample`]: what a store does as its series age, so minute buckets
/// become hour buckets after a day.
///
/// Buckets of one tier interval merge unless one starts a segment
/// (`restart`): the merged bucket's `min` and `max` are exact, its `ops`
/// and `median` are the medians of its buckets' (exact for raw readings,
/// a median of medians for buckets of buckets), its `samples` the sum. A
/// bucket is placed by its first reading's time.
pub fn rethin(buckets: &[Bucket], now_secs: u64) -> Vec<Bucket> {
    let interval = |b: &Bucket| match now_secs.saturating_sub(b.secs) {
        age if age < MINUTE_AFTER_SECS => (0, b.secs),
        age if age < HOUR_AFTER_SECS => (60, b.secs / 60),
        _ => (3600, b.secs / 3600),
    };
    let together = |a: &Bucket, b: &Bucket| {
        let key = interval(a);
        key.0 != 0 && key == interval(b) && !b.restart
    };
    buckets
        .chunk_by(together)
        .map(|run| {
            let mut ops: Vec<u64> = run.iter().map(|b| b.ops).collect();
            let mut medians: Vec<u64> = run.iter().map(|b| b.median).collect();
            ops.sort_unstable();
            medians.sort_unstable();
            Bucket {
                secs: run[0].secs,
                last_secs: run[run.len() - 1].last_secs,
                samples: run.iter().map(|b| b.samples).fold(0, u32::saturating_add),
                ops: median(&ops),
                min: run.iter().map(|b| b.min).min().unwrap_or(0),
                median: median(&medians),
                max: run.iter().map(|b| b.max).max().unwrap_or(0),
                restart: run[0].restart,
            }
        })
        .collect()
}

/// The median of sorted, non-empty `values`; the middle two's midpoint
/// (rounded down) for an even count.
fn median(values: &[u64]) -> u64 {
    let n = values.len();
    let (low, high) = (values[(n - 1) / 2], values[n / 2]);
    low + (high - low) / 2
}
