//! An `rss-drift` finding: one crash group per series, filed like any
//! other (folder built aside and renamed into place, then the store), with
//! the series (`series.csv`), a chart (`chart.svg`), the fit
//! (`drift.toml`) and the culprit programs (`culprits/`) narrowed down.

use std::fmt::Write;
use std::path::Path;

use anyhow::{Context, Result};
use plotters::prelude::*;

use super::narrow;
use super::series::{self, Point};
use super::watch::Watch;
use crate::foundation::config::Series;
use crate::foundation::state;
use crate::foundation::store;
use crate::pipeline::page::DriftFile;
use crate::pipeline::record::GroupFile;

/// Files the series' drift (`trend` from the fit, `None` for a process
/// over its RSS limit); returns the group id.
pub fn file(
    w: &Watch,
    series: &Series,
    slot_id: i64,
    trend: Option<&drift::Trend>,
) -> Result<String> {
    let sig = report::Signature::rss_drift(&series.label());
    let id = sig.id();
    let dir = w.state.crash_group(&id);
    if w.lock_store().group(&id)?.is_some() || dir.is_dir() {
        record_drift(w, slot_id, &id)?;
        return Ok(id);
    }
    let work = state::tmp_path(&dir);
    if work.exists() {
        state::remove_scratch(&work)?;
    }
    std::fs::create_dir_all(work.join("culprits"))
        .with_context(|| format!("failed to create {}", work.display()))?;
    let narrowed = narrow::narrow(w, series)?;
    for (i, program) in narrowed.programs.iter().enumerate() {
        let name = program
            .file_name()
            .map_or_else(|| format!("{i}"), |n| n.to_string_lossy().into_owned());
        state::copy_atomic(program, &work.join("culprits").join(name))?;
    }
    let points = series::points(&w.lock_store(), slot_id)?;
    state::write_atomic(&work.join("series.csv"), csv(&points).as_bytes())?;
    chart(&points, &work.join("chart.svg"))?;
    let nan = f64::NAN;
    let fit = DriftFile {
        why: if trend.is_some() { "fit" } else { "rss-limit" }.into(),
        slope_bytes_per_kop: trend.map_or(nan, |t| t.slope_bytes_per_kop),
        lower: trend.map_or(nan, |t| t.lower),
        upper: trend.map_or(nan, |t| t.upper),
        mk_p: trend.map_or(nan, |t| t.mk_p),
        points: trend.map_or(points.len(), |t| t.points),
        ops: trend.map_or(0, |t| t.ops),
        growth_kib: trend.map_or(nan, |t| t.growth / 1024.0),
        threshold: w.config.drift.threshold,
        rss_limit_mb: w.config.drift.rss_limit_mb,
        narrowed: narrowed.summary(),
    };
    state::write_atomic(&work.join("drift.toml"), toml::to_string(&fit)?.as_bytes())?;
    let record = GroupFile {
        signature: sig.key(),
        kind: sig.kind.clone(),
        title: sig.title(),
        tolerance_key: None,
        target: series.work(),
        allocator: series.allocator.clone(),
        engine: "drift".into(),
        first_seen: store::now(),
        minimized: Some(dir.join("culprits").to_string_lossy().into_owned()),
        repro: format!("allocsoak repro {id}"),
        race_rate: None,
        history: 0,
        history_shrunk: None,
        minimized_ops: Some(narrowed.summary()),
        path: false,
        alt_titles: Vec::new(),
    };
    state::write_atomic(
        &work.join("group.toml"),
        toml::to_string(&record)?.as_bytes(),
    )?;
    std::fs::rename(&work, &dir)
        .with_context(|| format!("failed to rename {} to {}", work.display(), dir.display()))?;
    record_drift(w, slot_id, &id)?;
    Ok(id)
}

/// Records one more drift of the group `id`, whose folder is in place, in
/// the store (a `fixed` group back is `regressed`), and writes its page.
fn record_drift(w: &Watch, slot_id: i64, id: &str) -> Result<()> {
    let store = w.lock_store();
    crate::pipeline::intake::refill(w.state, &store, id)?;
    let culprits = w.state.crash_group(id).join("culprits");
    store.add_crash(id, slot_id, None, &culprits.to_string_lossy(), true)?;
    crate::pipeline::intake::met_again(w.state, &store, id, true)
}

/// The series as CSV: one row per point.
fn csv(points: &[Point]) -> String {
    let mut out = String::from(
        "segment,secs,last_secs,samples,ops,retained_min,retained_median,retained_max,rss,anon,live,cpu_ms,programs\n",
    );
    for p in points {
        let (b, r) = (&p.bucket, &p.last);
        let _ = writeln!(
            out,
            "{},{},{},{},{},{},{},{},{},{},{},{},{}",
            p.segment_id,
            b.secs,
            b.last_secs,
            b.samples,
            b.ops,
            b.min,
            b.median,
            b.max,
            r.rss,
            r.anon,
            r.live,
            r.cpu_ms,
            r.programs
        );
    }
    out
}

/// Retained MiB against hours since the first point, one line per
/// segment, written to `path` as SVG.
fn chart(points: &[Point], path: &Path) -> Result<()> {
    let Some(first) = points.first() else {
        return Ok(());
    };
    let x = |p: &Point| (p.bucket.secs.saturating_sub(first.bucket.secs)) as f64 / 3600.0;
    let y = |p: &Point| p.bucket.median as f64 / (1 << 20) as f64;
    let x_max = points.iter().map(x).fold(1e-3, f64::max);
    let y_max = points.iter().map(y).fold(1e-3, f64::max) * 1.1;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (800, 400)).into_drawing_area();
        root.fill(&WHITE).map_err(plot_error)?;
        let mut chart = ChartBuilder::on(&root)
            .margin(10)
            .x_label_area_size(40)
            .y_label_area_size(60)
            .build_cartesian_2d(0.0..x_max, 0.0..y_max)
            .map_err(plot_error)?;
        chart
            .configure_mesh()
            .x_desc("hours")
            .y_desc("retained MiB")
            .draw()
            .map_err(plot_error)?;
        for segment in points.chunk_by(|a, b| a.segment_id == b.segment_id) {
            chart
                .draw_series(LineSeries::new(segment.iter().map(|p| (x(p), y(p))), &BLUE))
                .map_err(plot_error)?;
        }
        root.present().map_err(plot_error)?;
    }
    state::write_atomic(path, svg.as_bytes())
}

fn plot_error<E: std::fmt::Debug>(e: E) -> anyhow::Error {
    anyhow::anyhow!("failed to draw the drift chart: {e:?}")
}
