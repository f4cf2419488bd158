//! The fit: Theil–Sen's slope of retained bytes against ops, Sen's
//! interval for it, Mann–Kendall's test, and the step check.

use statrs::distribution::{ContinuousCDF, Normal};

use crate::{segments, Bucket, Sample};

/// The rules [`trend`] decides by. `Default` gives the values below.
#[derive(Clone, Debug, PartialEq)]
pub struct TrendConfig {
    /// The alarm line, in bytes per 1,000 ops: memory drifts when the
    /// lower end of the slope's interval, or of the step's, is above it.
    ///
    /// Default 32. A leak of 64 B/kop must alarm and one of 16 B/kop must
    /// not; the lower end of an interval lies below the true slope, so a
    /// line at 64 would miss a 64 B/kop leak about as often as it caught
    /// it. 32 is the two rates' geometric middle: a 64 B/kop leak clears
    /// it as soon as the interval is narrower than ±32, and a 16 B/kop
    /// one stays under it.
    pub threshold: f64,
    /// Two-sided confidence of the intervals. Default 0.95, so a flat
    /// series clears the line by chance less than 2.5% of the time even
    /// with a line at 0; with the line at 32 far less.
    pub confidence: f64,
    /// Warm-up as a share of a segment's ops: a segment's points before
    /// `max(warmup_fraction × its last ops, warmup_ops)` are left out, as
    /// caches and arenas fill there. Default 0.1.
    pub warmup_fraction: f64,
    /// The least warm-up, in ops. Default 1,000,000: allocator warm-up is
    /// counted in ops, so it does not shrink with a short run. The share
    /// decides for runs past 10 million ops.
    pub warmup_ops: u64,
    /// The fewest points after warm-up for a verdict. Default 20:
    /// Mann–Kendall's normal approximation holds from about 10.
    pub min_points: usize,
    /// The fewest ops after warm-up (summed over segments) for a verdict.
    /// Default 1,000,000: over fewer ops, 32 KiB of wobble (8 pages)
    /// would be a slope of 32 B/kop by itself.
    pub min_ops: u64,
    /// Points fitted at most (2 or more). More are thinned evenly, every
    /// k-th point kept, so the n²/2 pairs stay near 2 million for the
    /// default 2,000 and a week of 10-second samples fits in well under a
    /// second.
    pub max_points: usize,
    /// The least growth, in bytes, that drifts: the growth the lower end
    /// of an interval vouches for within one replay process (see
    /// [`Trend::growth`]) must reach it. Default 512 KiB. A correct
    /// allocator may map one more chunk late in a run and keep it
    /// (jemalloc 150 KiB at 750,000 ops, mimalloc 200 KiB at 2.4 million,
    /// each in an otherwise flat series); over a short window that one-off
    /// cost reads as a slope, and a leak is told from it only once it has
    /// grown past what such a cost could be. A leak of 64 B/kop gets there
    /// about 8 million ops after warm-up (zoo:slow-leak: 8.2 million).
    pub min_growth_bytes: f64,
}

impl Default for TrendConfig {
    fn default() -> TrendConfig {
        TrendConfig {
            threshold: 32.0,
            confidence: 0.95,
            warmup_fraction: 0.1,
            warmup_ops: 1_000_000,
            min_points: 20,
            min_ops: 1_000_000,
            max_points: 2_000,
            min_growth_bytes: 512.0 * 1024.0,
        }
    }
}

/// What [`trend`] found. Rates are in bytes per 1,000 ops; they are NaN
/// when there was nothing to compute them from.
#[derive(Clone, Debug, PartialEq)]
pub struct Trend {
    /// Points fitted: after warm-up, one per distinct ops count (readings
    /// at the same count are one point, their median), after thinning.
    pub points: usize,
    /// Ops after warm-up, summed over segments.
    pub ops: u64,
    /// Theil–Sen's slope: the median of the slopes between every two
    /// points of one segment.
    pub slope_bytes_per_kop: f64,
    /// The lower end of the slope's interval (Sen 1968): the pairwise
    /// slopes ranked, cut where the variance of Kendall's S puts the
    /// confidence, ties in retained bytes counted.
    pub lower: f64,
    /// The upper end of that interval.
    pub upper: f64,
    /// The lower end of the step check's interval.
    ///
    /// A step (memory jumps once after warm-up, then stays) must alarm,
    /// but in a steady process Theil–Sen shrugs it off: the pairs on one
    /// side of it are at least half of all pairs and say flat. The step
    /// check takes only the slopes from a point in the first third of a
    /// segment's ops after warm-up to one in its last third, and ranks
    /// them as Sen does, with Mann–Whitney's variance for two groups.
    /// A step between 1/6 and 5/6 of the way through is crossed by most
    /// of those pairs, and a step of H bytes over W ops reads as about
    /// H / (2W/3). Checked as the run goes on, a step passes through that
    /// middle as the window grows past it; once the window is long
    /// enough the same step weighs too little to alarm, like any one-off
    /// cost.
    pub step_lower: f64,
    /// The growth in bytes the lower ends vouch for within one process,
    /// the larger of two: `lower` times the longest segment's ops after
    /// warm-up, and the step's least height, `step_lower` times two
    /// thirds of them.
    pub growth: f64,
    /// Mann–Kendall's S: pairs that rise minus pairs that fall.
    pub mk_s: i64,
    /// S over its standard deviation, continuity corrected.
    pub mk_z: f64,
    /// The two-sided p-value of `mk_z`.
    pub mk_p: f64,
    /// The decision.
    pub verdict: Verdict,
}

/// Whether memory drifts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// `lower` is above the threshold and the growth it vouches for is at
    /// least `min_growth_bytes`; or the same for `step_lower`.
    Drifts,
    /// Enough points and ops, and neither is.
    Flat,
    /// Fewer points or ops after warm-up than the config asks for; the
    /// numbers are still filled in where they could be computed.
    TooFewSamples,
}

/// Whether retained memory drifts with ops over `samples`, in the order
/// they were taken. Restarts are handled as the [crate docs](crate#gaps)
/// say.
pub fn trend(samples: &[Sample], config: &TrendConfig) -> Trend {
    let segments = segments(samples)
        .map(|segment| points(segment.iter().map(|s| (s.ops, s.retained() as f64))))
        .collect();
    fit(segments, config)
}

/// [`trend`] over a downsampled series: each bucket is one point, its
/// median retained bytes at its median ops.
pub fn trend_downsampled(buckets: &[Bucket], config: &TrendConfig) -> Trend {
    let segments = buckets
        .chunk_by(|_, next| !next.restart)
        .map(|segment| points(segment.iter().map(|b| (b.ops, b.median as f64))))
        .collect();
    fit(segments, config)
}

/// A point: ops, retained bytes.
type Point = (u64, f64);

/// One point per distinct ops count, the median of the readings at it.
/// Within a segment ops never go down, so equal counts are neighbours.
fn points(readings: impl Iterator<Item = Point>) -> Vec<Point> {
    let readings: Vec<Point> = readings.collect();
    readings
        .chunk_by(|a, b| a.0 == b.0)
        .map(|run| {
            let mut ys: Vec<f64> = run.iter().map(|r| r.1).collect();
            (run[0].0, median(&mut ys))
        })
        .collect()
}

fn fit(mut segments: Vec<Vec<Point>>, config: &TrendConfig) -> Trend {
    for segment in &mut segments {
        let Some(&(last, _)) = segment.last() else {
            continue;
        };
        let start = warmup_end(last, config);
        segment.retain(|&(ops, _)| ops >= start);
    }
    segments.retain(|segment| !segment.is_empty());
    let ops = segments.iter().map(|s| s[s.len() - 1].0 - s[0].0).sum();
    let n: usize = segments.iter().map(Vec::len).sum();
    if n > config.max_points {
        let stride = n.div_ceil(config.max_points.max(2));
        for segment in &mut segments {
            *segment = segment.iter().copied().step_by(stride).collect();
        }
    }
    let points = segments.iter().map(Vec::len).sum();

    let z = Normal::standard().inverse_cdf(0.5 + config.confidence / 2.0);
    let (mut slopes, mk_s, var_s) = pairwise(&segments);
    let (slope, lower, upper) = interval(&mut slopes, var_s, z);
    let (mut steps, var_step) = outer_thirds(&segments);
    let (_, step_lower, _) = interval(&mut steps, var_step, z);
    let (mk_z, mk_p) = mann_kendall(mk_s, var_s);

    let kop = |rate: f64| rate * 1000.0;
    // Each process starts afresh: growth counts within one segment.
    let span = segments
        .iter()
        .map(|s| s[s.len() - 1].0 - s[0].0)
        .max()
        .unwrap_or(0) as f64;
    let (slope_growth, step_growth) = (lower * span, step_lower * span * 2.0 / 3.0);
    let alarm =
        |rate: f64, growth: f64| kop(rate) > config.threshold && growth >= config.min_growth_bytes;
    let verdict = if points < config.min_points || ops < config.min_ops {
        Verdict::TooFewSamples
    } else if alarm(lower, slope_growth) || alarm(step_lower, step_growth) {
        Verdict::Drifts
    } else {
        Verdict::Flat
    };
    Trend {
        points,
        ops,
        slope_bytes_per_kop: kop(slope),
        lower: kop(lower),
        upper: kop(upper),
        step_lower: kop(step_lower),
        growth: slope_growth.max(step_growth),
        mk_s,
        mk_z,
        mk_p,
        verdict,
    }
}

/// The first ops count past warm-up in a segment whose last is `last`.
pub(crate) fn warmup_end(last: u64, config: &TrendConfig) -> u64 {
    ((last as f64 * config.warmup_fraction) as u64).max(config.warmup_ops)
}

/// The slopes between every two points of one segment, Kendall's S over
/// the same pairs, and S's variance with ties in retained bytes counted
/// (Kendall 1975), summed over segments.
fn pairwise(segments: &[Vec<Point>]) -> (Vec<f64>, i64, f64) {
    let (mut slopes, mut s, mut var) = (Vec::new(), 0, 0.0);
    for segment in segments {
        for (i, &(x0, y0)) in segment.iter().enumerate() {
            for &(x1, y1) in &segment[i + 1..] {
                slopes.push((y1 - y0) / (x1 - x0) as f64);
                s += sign(y1 - y0);
            }
        }
        let mut ys: Vec<f64> = segment.iter().map(|p| p.1).collect();
        ys.sort_by(f64::total_cmp);
        let term = |t: f64| t * (t - 1.0) * (2.0 * t + 5.0);
        let ties: f64 = ys
            .chunk_by(|a, b| a == b)
            .map(|run| term(run.len() as f64))
            .sum();
        var += (term(segment.len() as f64) - ties) / 18.0;
    }
    (slopes, s, var)
}

/// The slopes from each point in the first third of a segment's ops to
/// each point in its last third, and the variance of the matching sign
/// sum (Mann–Whitney: m·n·(m+n+1)/3 for groups of m and n, ties not
/// counted, which only widens the interval), summed over segments.
fn outer_thirds(segments: &[Vec<Point>]) -> (Vec<f64>, f64) {
    let (mut slopes, mut var) = (Vec::new(), 0.0);
    for segment in segments {
        let (first, last) = (segment[0].0, segment[segment.len() - 1].0);
        let third = (last - first) / 3;
        if third == 0 {
            continue;
        }
        let early: Vec<Point> = segment
            .iter()
            .copied()
            .filter(|p| p.0 - first <= third)
            .collect();
        let late: Vec<Point> = segment
            .iter()
            .copied()
            .filter(|p| last - p.0 <= third)
            .collect();
        for &(x0, y0) in &early {
            for &(x1, y1) in &late {
                slopes.push((y1 - y0) / (x1 - x0) as f64);
            }
        }
        let (m, n) = (early.len() as f64, late.len() as f64);
        var += m * n * (m + n + 1.0) / 3.0;
    }
    (slopes, var)
}

/// The median of `slopes` and the interval Sen (1968) gives for it: with
/// N slopes and c = z·√var, the ends are the round((N − c)/2)-th and the
/// (round((N + c)/2) + 1)-th smallest (as SciPy's `theilslopes` does).
fn interval(slopes: &mut [f64], var: f64, z: f64) -> (f64, f64, f64) {
    let n = slopes.len();
    if n == 0 {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    let c = z * var.sqrt();
    let low = (((n as f64 - c) / 2.0).round() as usize).saturating_sub(1);
    let high = (((n as f64 + c) / 2.0).round() as usize).min(n - 1);
    let mid = median(slopes);
    (mid, nth(slopes, low), nth(slopes, high))
}

/// Mann–Kendall's z (continuity corrected) and two-sided p from S and its
/// variance.
fn mann_kendall(s: i64, var: f64) -> (f64, f64) {
    if var <= 0.0 {
        return (f64::NAN, f64::NAN);
    }
    let z = (s - s.signum()) as f64 / var.sqrt();
    let p = 2.0 * Normal::standard().cdf(-z.abs());
    (z, p.min(1.0))
}

fn sign(d: f64) -> i64 {
    if d > 0.0 {
        1
    } else if d < 0.0 {
        -1
    } else {
        0
    }
}

/// The `k`-th smallest (from 0), reordering `values`.
fn nth(values: &mut [f64], k: usize) -> f64 {
    *values.select_nth_unstable_by(k, f64::total_cmp).1
}

/// The median, reordering `values`; the mean of the middle two for an even
/// count. `values` must not be empty.
fn median(values: &mut [f64]) -> f64 {
    let n = values.len();
    let upper = nth(values, n / 2);
    if n % 2 == 1 {
        return upper;
    }
    // After selecting n/2, the lower middle is the largest below it.
    let lower = values[..n / 2]
        .iter()
        .copied()
        .fold(f64::NEG_INFINITY, f64::max);
    (lower + upper) / 2.0
}
