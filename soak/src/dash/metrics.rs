//! `/metrics`: the soak in Prometheus' text exposition format (0.0.4), for
//! a team that scrapes it into Grafana (`dashboards/grafana/`).

use std::fmt::Write;

use anyhow::Result;

use super::data::DriftSeries;
use crate::foundation::store::Store;
use crate::running::status::{Overview, SlotStatus};

/// The exposition: slots' numbers, totals, groups by status and kind,
/// drift series.
pub fn render(store: &Store, o: &Overview, drift: &[DriftSeries]) -> Result<String> {
    let mut out = String::new();
    run_families(&mut out, o);
    slot_families(&mut out, o);
    total_families(&mut out, &slot_totals(store)?);
    group_families(&mut out, store)?;
    drift_families(&mut out, drift);
    Ok(out)
}

/// Writes one family to `out`: its `# HELP` and `# TYPE` lines, then a
/// line per sample (labels, value).
fn family(out: &mut String, name: &str, kind: &str, help: &str, samples: Vec<(String, f64)>) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
    for (labels, value) in samples {
        let _ = writeln!(out, "{name}{labels} {}", number(value));
    }
}

/// Writes the run's families: whether a soak runs, and its duty cycle.
fn run_families(out: &mut String, o: &Overview) {
    family(
        out,
        "allocsoak_up",
        "gauge",
        "1 while a soak runs in this state dir.",
        vec![(String::new(), f64::from(u8::from(o.state == "running")))],
    );
    family(
        out,
        "allocsoak_duty_cycle",
        "gauge",
        "Core-seconds inside engines and drift replays over the run's core-seconds.",
        o.duty_cycle
            .map(|d| vec![(String::new(), d)])
            .unwrap_or_default(),
    );
}

/// The labels of a slot: its `target/allocator` label split, and its engine.
fn slot_labels(label: &str, engine: &str) -> String {
    let (target, allocator) = label.split_once('/').unwrap_or((label, ""));
    labels(&[
        ("target", target),
        ("allocator", allocator),
        ("engine", engine),
    ])
}

/// Writes the gauges each slot's status has: exec/s, coverage, features,
/// corpus and weight.
fn slot_families(out: &mut String, o: &Overview) {
    let per_slot = |f: &dyn Fn(&SlotStatus) -> f64| {
        o.slots
            .iter()
            .map(|s| (slot_labels(&s.label, &s.engine), f(s)))
            .collect::<Vec<_>>()
    };
    family(
        out,
        "allocsoak_execs_per_second",
        "gauge",
        "The slot's exec/s: its running slice's, else its last slice's.",
        per_slot(&|s| s.execs_per_sec),
    );
    family(
        out,
        "allocsoak_coverage",
        "gauge",
        "Coverage counters hit (libFuzzer's cov).",
        per_slot(&|s| s.cov as f64),
    );
    family(
        out,
        "allocsoak_features",
        "gauge",
        "Coverage features (libFuzzer's ft).",
        per_slot(&|s| s.ft as f64),
    );
    family(
        out,
        "allocsoak_corpus_inputs",
        "gauge",
        "Inputs in the slot's corpus.",
        per_slot(&|s| s.corpus as f64),
    );
    family(
        out,
        "allocsoak_weight",
        "gauge",
        "The scheduler's weight for the slot.",
        per_slot(&|s| s.weight),
    );
}

/// Writes the families of each fuzz slot's ended slices, summed.
fn total_families(out: &mut String, totals: &[SlotTotals]) {
    let total = |f: &dyn Fn(&SlotTotals) -> f64| {
        totals
            .iter()
            .map(|t| (slot_labels(&t.label, &t.engine), f(t)))
            .collect::<Vec<_>>()
    };
    family(
        out,
        "allocsoak_slices_total",
        "counter",
        "Slices the slot ran to their end.",
        total(&|t| t.slices as f64),
    );
    family(
        out,
        "allocsoak_execs_total",
        "counter",
        "Executions in the slot's ended slices.",
        total(&|t| t.execs as f64),
    );
    family(
        out,
        "allocsoak_peak_rss_bytes",
        "gauge",
        "The largest peak RSS of the slot's slices.",
        total(&|t| t.peak_rss_mb as f64 * 1024.0 * 1024.0),
    );
}

/// Writes the crash groups' families: groups, and crashes filed into
/// them, by status and kind.
fn group_families(out: &mut String, store: &Store) -> Result<()> {
    let mut stmt = store.conn().prepare(
        "SELECT status, kind, COUNT(*), SUM(count) FROM crash_group
         GROUP BY status, kind ORDER BY status, kind",
    )?;
    let groups: Vec<(String, String, i64, i64)> = stmt
        .query_map([], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)))?
        .collect::<rusqlite::Result<_>>()?;
    family(
        out,
        "allocsoak_crash_groups",
        "gauge",
        "Crash groups by status and kind.",
        groups
            .iter()
            .map(|g| (labels(&[("status", &g.0), ("kind", &g.1)]), g.2 as f64))
            .collect(),
    );
    family(
        out,
        "allocsoak_crashes_total",
        "counter",
        "Crashes filed into groups, by status and kind of the group.",
        groups
            .iter()
            .map(|g| (labels(&[("status", &g.0), ("kind", &g.1)]), g.3 as f64))
            .collect(),
    );
    Ok(())
}

/// Writes the drift series' families: retained bytes, slope and ops.
fn drift_families(out: &mut String, drift: &[DriftSeries]) {
    let series = |f: &dyn Fn(&DriftSeries) -> f64| {
        drift
            .iter()
            .map(|d| {
                let (target, allocator) = d.row.label.split_once('/').unwrap_or((&d.row.label, ""));
                (
                    labels(&[("target", target), ("allocator", allocator)]),
                    f(d),
                )
            })
            .collect::<Vec<_>>()
    };
    family(
        out,
        "allocsoak_drift_retained_bytes",
        "gauge",
        "Retained memory (anonymous resident minus live) of the series' last reading.",
        series(&|d| d.row.retained_mib * 1024.0 * 1024.0),
    );
    family(
        out,
        "allocsoak_drift_slope_bytes_per_kop",
        "gauge",
        "Theil-Sen slope of retained bytes per 1,000 ops (NaN before a fit).",
        series(&|d| d.row.slope),
    );
    family(
        out,
        "allocsoak_drift_ops_total",
        "counter",
        "Ops the series' replays did.",
        series(&|d| d.row.ops as f64),
    );
}

/// A fuzz slot's ended slices, summed.
struct SlotTotals {
    /// `target/allocator`.
    label: String,
    engine: String,
    slices: i64,
    execs: i64,
    peak_rss_mb: i64,
}

fn slot_totals(store: &Store) -> Result<Vec<SlotTotals>> {
    let mut stmt = store.conn().prepare(
        "SELECT s.target || '/' || s.allocator, s.engine, COUNT(l.id), COALESCE(SUM(l.execs), 0),
            COALESCE(MAX(l.peak_rss_mb), 0)
         FROM slot s JOIN slice l ON l.slot_id = s.id
         WHERE s.engine != 'drift' AND l.ended IS NOT NULL GROUP BY s.id ORDER BY s.id",
    )?;
    let rows = stmt.query_map([], |r| {
        Ok(SlotTotals {
            label: r.get(0)?,
            engine: r.get(1)?,
            slices: r.get(2)?,
            execs: r.get(3)?,
            peak_rss_mb: r.get(4)?,
        })
    })?;
    Ok(rows.collect::<rusqlite::Result<_>>()?)
}

/// `{a="x",b="y"}`, values escaped as the format asks (`\\`, `\"`, `\n`).
fn labels(pairs: &[(&str, &str)]) -> String {
    let inner: Vec<String> = pairs
        .iter()
        .map(|(k, v)| {
            let v = v
                .replace('\\', "\\\\")
                .replace('"', "\\\"")
                .replace('\n', "\\n");
            format!("{k}=\"{v}\"")
        })
        .collect();
    format!("{{{}}}", inner.join(","))
}

/// A sample value: Go's float syntax, `NaN` and `+Inf` spelled as the
/// format wants.
fn number(v: f64) -> String {
    if v.is_nan() {
        "NaN".into()
    } else if v.is_infinite() {
        if v > 0.0 { "+Inf" } else { "-Inf" }.into()
    } else {
        format!("{v}")
    }
}
