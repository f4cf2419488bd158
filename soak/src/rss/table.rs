//! `allocsoak drift`: every drift series in a state dir, one line each.

use std::fmt::Write;

use anyhow::Result;
use drift::{TrendConfig, Verdict};
use serde::Serialize;

use super::series;
use crate::foundation::store::{SlotRow, Store};

/// One drift series as `allocsoak drift` and the dashboard show it.
#[derive(Clone, Debug, Serialize)]
pub struct SeriesRow {
    pub slot_id: i64,
    /// `target/allocator`.
    pub label: String,
    pub segments: usize,
    pub points: usize,
    pub readings: u64,
    pub ops: u64,
    pub rss_mib: f64,
    pub retained_mib: f64,
    /// The fit (of what [`series::fitted`] gives).
    pub slope: f64,
    pub lower: f64,
    pub upper: f64,
    /// `drifts`, `flat` or `too few samples`.
    pub verdict: &'static str,
}

/// Every drift series, fitted by `config` (the soak's `[drift]` rules).
pub fn rows(store: &Store, config: &TrendConfig) -> Result<Vec<SeriesRow>> {
    drift_slots(store)?
        .iter()
        .map(|slot| row(store, slot, &series::points(store, slot.id)?, config))
        .collect()
}

/// The store's drift series (slots with engine `drift`).
pub fn drift_slots(store: &Store) -> Result<Vec<SlotRow>> {
    Ok(store
        .slots()?
        .into_iter()
        .filter(|s| s.engine == "drift")
        .collect())
}

/// The row of the series `slot`, whose `points` are read already.
pub fn row(
    store: &Store,
    slot: &SlotRow,
    points: &[series::Point],
    config: &TrendConfig,
) -> Result<SeriesRow> {
    let label = format!("{}/{}", slot.target, slot.allocator);
    let fitted = series::since_fix(store, slot.id, &label, points.to_vec())?;
    let trend = drift::trend_downsampled(&series::buckets(&fitted), config);
    let (rss_mib, retained_mib) = points.last().map_or((0.0, 0.0), |p| {
        (mib(p.last.rss), mib(p.last.sample().retained()))
    });
    Ok(SeriesRow {
        slot_id: slot.id,
        label,
        segments: points.chunk_by(|a, b| a.segment_id == b.segment_id).count(),
        points: points.len(),
        readings: points.iter().map(|p| u64::from(p.bucket.samples)).sum(),
        ops: points
            .chunk_by(|a, b| a.segment_id == b.segment_id)
            .map(|s| s.last().map_or(0, |p| p.last.ops))
            .sum(),
        rss_mib,
        retained_mib,
        slope: trend.slope_bytes_per_kop,
        lower: trend.lower,
        upper: trend.upper,
        verdict: match trend.verdict {
            Verdict::Drifts => "drifts",
            Verdict::Flat => "flat",
            Verdict::TooFewSamples => "too few samples",
        },
    })
}

/// The table: per series its segments, points, readings, ops, RSS and
/// retained memory now, the slope with its interval, and the verdict by
/// `config` (the soak's `[drift]` rules).
pub fn render(store: &Store, config: &TrendConfig) -> Result<String> {
    let mut out = String::new();
    writeln!(
        out,
        "{:<34} {:>8} {:>7} {:>8} {:>10} {:>9} {:>9} {:>24}  verdict",
        "series",
        "segments",
        "points",
        "readings",
        "ops",
        "rss MiB",
        "retained",
        "B/kop [95% interval]"
    )?;
    for r in rows(store, config)? {
        let slope = if r.slope.is_nan() {
            "-".to_string()
        } else {
            format!("{:.1} [{:.1}, {:.1}]", r.slope, r.lower, r.upper)
        };
        writeln!(
            out,
            "{:<34} {:>8} {:>7} {:>8} {:>10} {:>9.1} {:>9.1} {:>24}  {}",
            r.label,
            r.segments,
            r.points,
            r.readings,
            r.ops,
            r.rss_mib,
            r.retained_mib,
            slope,
            r.verdict
        )?;
    }
    Ok(out)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}
