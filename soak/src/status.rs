//! The soak's progress table, read from the store and the running slices'
//! logs: what the daemon prints and what `allocsoak status` shows.

use std::fmt::Write;
use std::time::Duration;

use anyhow::Result;
use rusqlite::params;

use crate::libfuzzer;
use crate::state::StateDir;
use crate::store::Store;

/// The table. `clock` is (elapsed, remaining) when the caller is the soak
/// itself; otherwise the last run's row says whether one is running.
/// `drift` is the soak's `[drift]` rules, for the drift column.
pub fn render(
    state: &StateDir,
    store: &Store,
    clock: Option<(Duration, Duration)>,
    drift: &drift::TrendConfig,
) -> Result<String> {
    let conn = store.conn();
    let mut out = String::new();
    let run: Option<(i64, i64, i64, Option<i64>, i64)> = conn
        .query_row(
            "SELECT id, started, deadline, ended, pid FROM run ORDER BY id DESC LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )
        .ok();
    let groups: i64 = conn.query_row("SELECT COUNT(*) FROM crash_group", [], |r| r.get(0))?;
    let crashes: i64 = conn.query_row("SELECT COUNT(*) FROM crash", [], |r| r.get(0))?;
    let now = crate::store::now();
    let running = match (clock, run) {
        (Some((elapsed, remaining)), _) => {
            write!(
                out,
                "soak: elapsed {} remaining {}",
                hms(elapsed.as_secs()),
                hms(remaining.as_secs())
            )?;
            true
        }
        (None, Some((_, started, deadline, None, pid))) if alive(pid) => {
            write!(
                out,
                "soak: running (pid {pid}), elapsed {} remaining {}",
                hms((now - started).max(0) as u64),
                hms((deadline - now).max(0) as u64)
            )?;
            true
        }
        (None, Some((_, _, _, ended, _))) => {
            let ended = ended.map_or_else(
                || "was killed".to_string(),
                |t| format!("ended {}", crate::group_page::utc(t)),
            );
            write!(out, "soak: not running (last soak {ended})")?;
            false
        }
        (None, None) => {
            write!(out, "soak: never ran in {}", state.root().display())?;
            false
        }
    };
    write!(out, ", {groups} crash groups from {crashes} crashes")?;
    if let Some((run_id, ..)) = run {
        if let Some(duty) = duty_cycle(store, run_id)? {
            write!(out, ", duty cycle {:.1}%", duty * 100.0)?;
        }
    }
    writeln!(out)?;
    writeln!(
        out,
        "{:<34} {:>6} {:>7} {:>8} {:>6} {:>7} {:>7} {:>8}  {:<6} now",
        "slot", "weight", "slices", "exec/s", "cov", "ft", "corpus", "findings", "drift"
    )?;
    let mut stmt = conn.prepare(
        "SELECT s.id, s.target || '/' || s.allocator, s.weight,
            (SELECT COUNT(*) FROM slice WHERE slot_id = s.id AND ended IS NOT NULL),
            (SELECT COUNT(*) FROM crash_group WHERE slot_id = s.id),
            (SELECT COUNT(*) FROM crash WHERE slot_id = s.id)
         FROM slot s WHERE s.engine != 'drift' ORDER BY s.id",
    )?;
    let mut drift = drift_verdicts(store, drift)?;
    let slots = stmt.query_map([], |r| {
        Ok((
            r.get::<_, i64>(0)?,
            r.get::<_, String>(1)?,
            r.get::<_, f64>(2)?,
            r.get::<_, i64>(3)?,
            r.get::<_, i64>(4)?,
            r.get::<_, i64>(5)?,
        ))
    })?;
    for slot in slots {
        let (id, label, weight, slices, groups, crashes) = slot?;
        let last: Option<(f64, i64, i64, i64)> = conn
            .query_row(
                "SELECT execs_per_sec, cov, ft, corpus_size FROM slice
                 WHERE slot_id = ?1 AND ended IS NOT NULL ORDER BY id DESC LIMIT 1",
                params![id],
                |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
            )
            .ok();
        let live_slice: Option<i64> = if running {
            conn.query_row(
                "SELECT id FROM slice WHERE slot_id = ?1 AND ended IS NULL ORDER BY id DESC LIMIT 1",
                params![id],
                |r| r.get(0),
            )
            .ok()
        } else {
            None
        };
        let live = live_slice.and_then(|s| {
            let log = std::fs::read_to_string(state.slice(s).join("fuzz.log")).ok()?;
            libfuzzer::progress(&log)
        });
        let (execs, cov, ft, corpus) = match (live, last) {
            (Some(p), _) => (
                p.execs_per_sec as f64,
                p.cov as i64,
                p.ft as i64,
                p.corpus as i64,
            ),
            (None, Some(l)) => l,
            (None, None) => (0.0, 0, 0, 0),
        };
        writeln!(
            out,
            "{:<34} {:>6.2} {:>7} {:>8.0} {:>6} {:>7} {:>7} {:>8}  {:<6} {}",
            label,
            weight,
            slices,
            execs,
            cov,
            ft,
            corpus,
            format!("{groups}/{crashes}"),
            drift.remove(&label).unwrap_or_default(),
            if live_slice.is_some() { "fuzzing" } else { "" }
        )?;
    }
    // Series whose allocator × workload no fuzz slot has.
    for (label, verdict) in drift {
        writeln!(out, "{label:<34} {:>59}  {verdict:<6} drift only", "")?;
    }
    Ok(out)
}

/// Each drift series' verdict so far by `target/allocator`: `flat`,
/// `drifts`, `filed` (an rss-drift group holds it) or `-` (too few
/// readings yet), by `config` (the soak's `[drift]` rules). `allocsoak
/// drift` has the numbers.
fn drift_verdicts(
    store: &Store,
    config: &drift::TrendConfig,
) -> Result<std::collections::BTreeMap<String, String>> {
    let mut verdicts = std::collections::BTreeMap::new();
    for slot in store.slots()?.into_iter().filter(|s| s.engine == "drift") {
        let label = format!("{}/{}", slot.target, slot.allocator);
        let filed = store
            .group(&report::Signature::rss_drift(&label).id())?
            .is_some_and(|g| g.status != "fixed");
        let points = crate::rss::series::fitted(store, slot.id, &label)?;
        let trend = drift::trend_downsampled(&crate::rss::series::buckets(&points), config);
        let verdict = match (filed, trend.verdict) {
            (true, _) => "filed",
            (false, drift::Verdict::Drifts) => "drifts",
            (false, drift::Verdict::Flat) => "flat",
            (false, drift::Verdict::TooFewSamples) => "-",
        };
        verdicts.insert(label, verdict.to_string());
    }
    Ok(verdicts)
}

/// Core-seconds inside fuzz engines and drift replays over the wall
/// core-seconds the run gave them (`jobs` cores, plus the drift share),
/// for one run of the soak (so far, while it runs).
pub fn duty_cycle(store: &Store, run_id: i64) -> Result<Option<f64>> {
    let (started, ended, jobs, drift_share): (i64, Option<i64>, i64, f64) =
        store.conn().query_row(
            "SELECT started, ended, jobs, drift_share FROM run WHERE id = ?1",
            params![run_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )?;
    // Each replay process's CPU time is its last reading's.
    let drift_ms: i64 = store.conn().query_row(
        "SELECT COALESCE(SUM(cpu), 0) FROM (
            SELECT MAX(p.cpu_ms) AS cpu FROM drift_point p
            JOIN drift_segment s ON s.id = p.segment_id
            WHERE s.run_id = ?1 GROUP BY s.id)",
        params![run_id],
        |r| r.get(0),
    )?;
    let engine: f64 = store.conn().query_row(
        // A running slice counts from its start (it is fuzzing, or filing
        // what it found); an ended one by its engine's own time.
        "SELECT COALESCE(SUM(CASE WHEN ended IS NULL THEN ?2 - started ELSE fuzz_secs END), 0)
         FROM slice WHERE run_id = ?1",
        params![run_id, crate::store::now()],
        |r| r.get(0),
    )?;
    let wall =
        (ended.unwrap_or_else(crate::store::now) - started) as f64 * (jobs as f64 + drift_share);
    Ok((wall >= 1.0).then(|| (engine + drift_ms as f64 / 1000.0) / wall))
}

fn alive(pid: i64) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

fn hms(secs: u64) -> String {
    format!("{}:{:02}:{:02}", secs / 3600, secs % 3600 / 60, secs % 60)
}
