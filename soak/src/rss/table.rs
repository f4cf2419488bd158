//! `allocsoak drift`: every drift series in a state dir, one line each.

use std::fmt::Write;

use anyhow::Result;
use drift::{TrendConfig, Verdict};

use super::series;
use crate::store::Store;

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
    for slot in store.slots()?.into_iter().filter(|s| s.engine == "drift") {
        let points = series::points(store, slot.id)?;
        let segments = points.chunk_by(|a, b| a.segment_id == b.segment_id).count();
        let readings: u64 = points.iter().map(|p| u64::from(p.bucket.samples)).sum();
        let ops: u64 = points
            .chunk_by(|a, b| a.segment_id == b.segment_id)
            .map(|s| s.last().map_or(0, |p| p.last.ops))
            .sum();
        let label = format!("{}/{}", slot.target, slot.allocator);
        let fitted = series::fitted(store, slot.id, &label)?;
        let trend = drift::trend_downsampled(&series::buckets(&fitted), config);
        let (rss, retained) = points.last().map_or((0.0, 0.0), |p| {
            (mib(p.last.rss), mib(p.last.sample().retained()))
        });
        let slope = if trend.slope_bytes_per_kop.is_nan() {
            "-".to_string()
        } else {
            format!(
                "{:.1} [{:.1}, {:.1}]",
                trend.slope_bytes_per_kop, trend.lower, trend.upper
            )
        };
        let verdict = match trend.verdict {
            Verdict::Drifts => "drifts",
            Verdict::Flat => "flat",
            Verdict::TooFewSamples => "too few samples",
        };
        writeln!(
            out,
            "{:<34} {:>8} {:>7} {:>8} {:>10} {:>9.1} {:>9.1} {:>24}  {verdict}",
            label,
            segments,
            points.len(),
            readings,
            ops,
            rss,
            retained,
            slope
        )?;
    }
    Ok(out)
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1 << 20) as f64
}
