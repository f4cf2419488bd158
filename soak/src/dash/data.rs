//! What the dashboard shows, read from the store: the overview (the same
//! as `allocsoak status`), the slots' numbers over time, the crash groups
//! and the drift series. Everything here is `Serialize`: the pages, the
//! JSON the charts poll, the export and `/metrics` read the same values.

use anyhow::Result;
use rusqlite::params;
use serde::Serialize;

use crate::foundation::state::StateDir;
use crate::foundation::store::Store;
use crate::rss::{series, table};
use crate::running::status::{self, Overview};

/// Chart ranges: a name, and how far back in seconds (`None`: all).
pub const RANGES: [(&str, Option<i64>); 4] = [
    ("hour", Some(3600)),
    ("night", Some(12 * 3600)),
    ("week", Some(7 * 86_400)),
    ("all", None),
];

/// The range named `name`, or the night.
pub fn range(name: Option<&str>) -> (&'static str, Option<i64>) {
    RANGES
        .iter()
        .copied()
        .find(|(n, _)| Some(*n) == name)
        .unwrap_or(RANGES[1])
}

/// The numbers the fuzz slots' slices ended with, over time, aligned for
/// uPlot: one time axis, a value (or null) per slot per time.
#[derive(Clone, Debug, Serialize)]
pub struct Timeline {
    pub range: &'static str,
    /// `target/allocator` of each slot, in the order of the value rows.
    pub slots: Vec<String>,
    /// Unix seconds at which a slice ended.
    pub times: Vec<i64>,
    /// Per metric (`execs`, `cov`, `ft`, `corpus`, `rss_mb`), per slot,
    /// per time.
    pub execs: Vec<Vec<Option<f64>>>,
    pub cov: Vec<Vec<Option<f64>>>,
    pub ft: Vec<Vec<Option<f64>>>,
    pub corpus: Vec<Vec<Option<f64>>>,
    pub rss_mb: Vec<Vec<Option<f64>>>,
    /// All slots together, per time: executions so far in the range, and
    /// the corpus inputs of every slot (each slot's last count).
    pub total_execs: Vec<f64>,
    pub total_corpus: Vec<f64>,
    /// Crash groups filed so far, at each group's first sighting.
    pub group_times: Vec<i64>,
    pub groups: Vec<f64>,
}

pub fn timeline(store: &Store, range_name: Option<&str>) -> Result<Timeline> {
    let (name, back) = range(range_name);
    let since = back.map_or(0, |b| crate::foundation::store::now() - b);
    let slots: Vec<(i64, String)> = store
        .slots()?
        .into_iter()
        .filter(|s| s.engine != "drift")
        .map(|s| {
            let label = format!("{}/{}", s.target, s.allocator);
            (s.id, status::shown_label(&label, &s.engine))
        })
        .collect();
    let mut stmt = store.conn().prepare(
        "SELECT slot_id, ended, execs_per_sec, cov, ft, corpus_size, peak_rss_mb, execs FROM slice
         WHERE ended IS NOT NULL AND ended >= ?1 ORDER BY ended, id",
    )?;
    let rows = stmt.query_map(params![since], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, i64>(1)?,
            [
                r.get::<_, Option<f64>>(2)?,
                r.get::<_, Option<f64>>(3)?,
                r.get::<_, Option<f64>>(4)?,
                r.get::<_, Option<f64>>(5)?,
                r.get::<_, Option<f64>>(6)?,
            ],
            r.get::<_, Option<f64>>(7)?,
        ))
    })?;
    let mut times = Vec::new();
    let mut metrics: [Vec<Vec<Option<f64>>>; 5] = Default::default();
    for m in &mut metrics {
        *m = vec![Vec::new(); slots.len()];
    }
    let (mut total_execs, mut total_corpus) = (Vec::new(), Vec::new());
    let (mut execs_so_far, mut corpus_now) = (0.0, vec![0.0; slots.len()]);
    for row in rows {
        let (slot_id, ended, values, execs) = row?;
        let Some(i) = slots.iter().position(|(id, _)| *id == slot_id) else {
            continue;
        };
        times.push(ended);
        execs_so_far += execs.unwrap_or(0.0);
        total_execs.push(execs_so_far);
        corpus_now[i] = values[3].unwrap_or(corpus_now[i]);
        total_corpus.push(corpus_now.iter().sum());
        for (m, value) in metrics.iter_mut().zip(values) {
            for (j, per_slot) in m.iter_mut().enumerate() {
                per_slot.push(if j == i { value } else { None });
            }
        }
    }
    let mut stmt = store.conn().prepare(
        "SELECT first_seen, (SELECT COUNT(*) FROM crash_group g2 WHERE g2.first_seen <= g.first_seen)
         FROM crash_group g WHERE first_seen >= ?1 ORDER BY first_seen",
    )?;
    let found: Vec<(i64, f64)> = stmt
        .query_map(params![since], |r| Ok((r.get(0)?, r.get(1)?)))?
        .collect::<rusqlite::Result<_>>()?;
    // The count holds until now: the line runs to the right edge.
    let mut found = found;
    let total = found.last().map_or(0.0, |f| f.1);
    found.push((crate::foundation::store::now(), total));
    let [execs, cov, ft, corpus, rss_mb] = metrics;
    Ok(Timeline {
        range: name,
        slots: slots.into_iter().map(|(_, label)| label).collect(),
        times,
        execs,
        cov,
        ft,
        corpus,
        rss_mb,
        total_execs,
        total_corpus,
        group_times: found.iter().map(|f| f.0).collect(),
        groups: found.iter().map(|f| f.1).collect(),
    })
}

/// One crash group as the tables list it.
#[derive(Clone, Debug, Serialize)]
pub struct GroupLine {
    pub id: String,
    pub kind: String,
    pub title: String,
    pub target: String,
    pub allocator: String,
    pub count: i64,
    pub status: String,
    pub first_seen: String,
    pub last_seen: String,
    pub repro: String,
    /// What `allocsoak bisect` found (`cause 1a2b… "subject" (…)`), one per direction.
    pub bisected: Vec<String>,
}

pub fn groups(
    state: &StateDir,
    store: &Store,
    filter: &crate::pipeline::groups::Filter,
) -> Result<Vec<GroupLine>> {
    crate::pipeline::groups::matching(state, store, filter)?
        .into_iter()
        .map(|g| {
            Ok(GroupLine {
                bisected: store
                    .bisections(&g.row.id)?
                    .iter()
                    .map(|b| b.line())
                    .collect(),
                id: g.row.id,
                kind: g.row.kind,
                title: g.row.title,
                target: g.slot.target,
                allocator: g.slot.allocator,
                count: g.row.count,
                status: g.row.status,
                first_seen: crate::foundation::store::utc(g.row.first_seen),
                last_seen: crate::foundation::store::utc(g.row.last_seen),
                repro: g.row.repro,
            })
        })
        .collect()
}

/// A drift series: its row in `allocsoak drift` and its retained memory
/// against ops, for a chart: one chart per work (a target's programs or
/// a trace), each allocator's line beside its peers' on the same work.
#[derive(Clone, Debug, Serialize)]
pub struct DriftSeries {
    #[serde(flatten)]
    pub row: table::SeriesRow,
    /// What it replays: a target, or `trace:<file>`.
    pub work: String,
    pub allocator: String,
    /// Ops counted across segments (each segment goes on from the last).
    pub ops: Vec<f64>,
    pub retained_mib: Vec<f64>,
}

pub fn drift(store: &Store, config: &drift::TrendConfig) -> Result<Vec<DriftSeries>> {
    let mut out = Vec::new();
    for slot in table::drift_slots(store)? {
        let points = series::points(store, slot.id)?;
        let (mut ops, mut retained) = (Vec::new(), Vec::new());
        let mut base = 0;
        for segment in points.chunk_by(|a, b| a.segment_id == b.segment_id) {
            for p in segment {
                ops.push((base + p.bucket.ops) as f64);
                retained.push(p.bucket.median as f64 / (1 << 20) as f64);
            }
            base += segment.last().map_or(0, |p| p.bucket.ops);
        }
        out.push(DriftSeries {
            row: table::row(store, &slot, &points, config)?,
            work: slot.target.clone(),
            allocator: slot.allocator.clone(),
            ops,
            retained_mib: retained,
        });
    }
    Ok(out)
}

/// The overview as `allocsoak status` reads it.
pub fn overview(state: &StateDir, store: &Store, config: &drift::TrendConfig) -> Result<Overview> {
    status::overview(state, store, None, config)
}

/// The last `allocsoak coverage` report as the overview shows it, and
/// every report's region coverage per allocator, aligned for uPlot.
#[derive(Clone, Debug, Default, Serialize)]
pub struct SourceCoverage {
    pub rows: Vec<CoverageRow>,
    /// The command that makes a report of this state dir.
    pub make: String,
    /// The chart: one series per allocator, percent of regions covered.
    pub allocators: Vec<String>,
    pub times: Vec<i64>,
    pub regions: Vec<Vec<Option<f64>>>,
}

/// One allocator's line of the last report.
#[derive(Clone, Debug, Serialize)]
pub struct CoverageRow {
    pub allocator: String,
    pub functions: String,
    pub lines: String,
    pub regions: String,
    pub branches: String,
    pub never_run: usize,
    /// Its HTML report, under the state dir (served under `files/`).
    pub html: String,
}

pub fn source_coverage(state: &StateDir) -> Result<SourceCoverage> {
    let mut out = SourceCoverage {
        make: format!("allocsoak coverage --state {}", state.root().display()),
        ..SourceCoverage::default()
    };
    if let Some(report) = crate::coverage::last(state)? {
        out.rows = report
            .allocators
            .iter()
            .map(|a| {
                let t = a.coverage.totals;
                CoverageRow {
                    allocator: a.allocator.clone(),
                    functions: t.functions.to_string(),
                    lines: t.lines.to_string(),
                    regions: t.regions.to_string(),
                    branches: t.branches.to_string(),
                    never_run: a.coverage.never_run_count(),
                    html: a
                        .html
                        .strip_prefix(state.root())
                        .unwrap_or(&a.html)
                        .to_string_lossy()
                        .into_owned(),
                }
            })
            .collect();
    }
    let points = crate::coverage::history(state)?;
    for p in &points {
        if !out.allocators.contains(&p.allocator) {
            out.allocators.push(p.allocator.clone());
        }
        if out.times.last() != Some(&p.at) {
            out.times.push(p.at);
        }
    }
    out.regions = vec![vec![None; out.times.len()]; out.allocators.len()];
    for p in &points {
        let a = out.allocators.iter().position(|n| *n == p.allocator);
        let t = out.times.iter().position(|t| *t == p.at);
        if let (Some(a), Some(t)) = (a, t) {
            out.regions[a][t] = Some(p.totals.regions.percent());
        }
    }
    Ok(out)
}
