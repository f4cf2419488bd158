//! The soak's progress table, read from the store and the running slices'
//! logs: what the daemon prints and what `allocsoak status` shows.

use std::fmt::Write;
use std::time::Duration;

use anyhow::Result;
use rusqlite::params;
use serde::Serialize;

use crate::foundation::state::StateDir;
use crate::foundation::store::Store;

/// A soak's progress: the header line's facts and a row per slot. What
/// `allocsoak status` prints and the dashboard shows.
#[derive(Clone, Debug, Serialize)]
pub struct Overview {
    /// `running`, `stopped` or `never`.
    pub state: &'static str,
    pub pid: Option<i64>,
    /// Seconds since the last soak started, and left until its deadline
    /// (while it runs).
    pub elapsed_secs: Option<u64>,
    pub remaining_secs: Option<u64>,
    /// When the last soak ended (Unix seconds), if it ended cleanly.
    pub ended: Option<i64>,
    pub groups: i64,
    pub crashes: i64,
    /// Of the last run, 0 to 1.
    pub duty_cycle: Option<f64>,
    /// Fuzz slots, in the order they were first run.
    pub slots: Vec<SlotStatus>,
    /// Drift series whose allocator × workload no fuzz slot has:
    /// (`target/allocator`, verdict).
    pub drift_only: Vec<(String, String)>,
}

/// One fuzz slot's row: its last slice's numbers, or the running one's.
#[derive(Clone, Debug, Serialize)]
pub struct SlotStatus {
    pub id: i64,
    /// `target/allocator`.
    pub label: String,
    pub engine: String,
    pub weight: f64,
    /// Slices ended.
    pub slices: i64,
    pub execs_per_sec: f64,
    pub cov: i64,
    pub ft: i64,
    pub corpus: i64,
    pub groups: i64,
    pub crashes: i64,
    /// Of its race sections (`mt_ops`', `heap_api`'s) in every ended slice, the share
    /// with two or more workers inside the allocator at once (None
    /// without any), and the most inside at once.
    pub race_share: Option<f64>,
    pub most_inside: i64,
    /// The drift column: `flat`, `drifts`, `filed`, `-` or empty.
    pub drift: String,
    /// A slice of it is running now.
    pub fuzzing: bool,
}

/// The table. `clock` is (elapsed, remaining) when the caller is the soak
/// itself; otherwise the last run's row says whether one is running.
/// `drift` is the soak's `[drift]` rules, for the drift column.
pub fn render(
    state: &StateDir,
    store: &Store,
    clock: Option<(Duration, Duration)>,
    drift: &drift::TrendConfig,
) -> Result<String> {
    let o = overview(state, store, clock, drift)?;
    let mut out = String::new();
    write_header(&mut out, state, &o, clock)?;
    write_slots(&mut out, &o)?;
    Ok(out)
}

/// Writes the table's first line into `out`: whether a soak runs (and
/// its clock), the crash groups, the duty cycle, and what waits for the
/// next start. `clock` as for [`render`].
fn write_header(
    out: &mut String,
    state: &StateDir,
    o: &Overview,
    clock: Option<(Duration, Duration)>,
) -> std::fmt::Result {
    let hms_or = |secs: Option<u64>| hms(secs.unwrap_or(0));
    match o.state {
        "running" => match (clock, o.pid) {
            (None, Some(pid)) => write!(
                out,
                "soak: running (pid {pid}), elapsed {} remaining {}",
                hms_or(o.elapsed_secs),
                hms_or(o.remaining_secs)
            )?,
            _ => write!(
                out,
                "soak: elapsed {} remaining {}",
                hms_or(o.elapsed_secs),
                hms_or(o.remaining_secs)
            )?,
        },
        "stopped" => {
            let ended = o.ended.map_or_else(
                || "was killed".to_string(),
                |t| format!("ended {}", crate::foundation::store::utc(t)),
            );
            write!(out, "soak: not running (last soak {ended})")?;
        }
        _ => write!(out, "soak: never ran in {}", state.root().display())?,
    }
    write!(
        out,
        ", {} crash groups from {} crashes",
        o.groups, o.crashes
    )?;
    if let Some(duty) = o.duty_cycle {
        write!(out, ", duty cycle {:.1}%", duty * 100.0)?;
    }
    let pending = crate::running::pending::count(state);
    if pending > 0 {
        write!(out, ", {pending} filings pending")?;
    }
    // A stop leaves its slices' new inputs in their scratch; the next
    // soak on the state dir merges them first.
    let unmerged = std::fs::read_dir(state.slices()).map_or(0, |d| d.count());
    if o.state != "running" && unmerged > 0 {
        write!(out, ", {unmerged} slices to merge at the next start")?;
    }
    writeln!(out)
}

/// Writes the table's slot rows into `out`: a line of column names, a
/// row per fuzz slot, and one per drift-only series.
fn write_slots(out: &mut String, o: &Overview) -> std::fmt::Result {
    writeln!(
        out,
        "{:<34} {:>6} {:>7} {:>8} {:>6} {:>7} {:>7} {:>8} {:>8}  {:<6} now",
        "slot", "weight", "slices", "exec/s", "cov", "ft", "corpus", "findings", "races", "drift"
    )?;
    for r in &o.slots {
        let slot = shown_label(&r.label, &r.engine);
        // `41%/4`: 41 % of its race sections had two or more workers inside
        // the allocator at once, 4 at most.
        let races = r
            .race_share
            .map(|s| format!("{:.0}%/{}", s * 100.0, r.most_inside))
            .unwrap_or_default();
        writeln!(
            out,
            "{:<34} {:>6.2} {:>7} {:>8.0} {:>6} {:>7} {:>7} {:>8} {:>8}  {:<6} {}",
            slot,
            r.weight,
            r.slices,
            r.execs_per_sec,
            r.cov,
            r.ft,
            r.corpus,
            format!("{}/{}", r.groups, r.crashes),
            races,
            r.drift,
            if r.fuzzing { "fuzzing" } else { "" }
        )?;
    }
    for (label, verdict) in &o.drift_only {
        writeln!(out, "{label:<34} {:>68}  {verdict:<6} drift only", "")?;
    }
    Ok(())
}

/// A slot as the table and the dashboard show it: `target/allocator`
/// for libFuzzer's, with its engine after it for another's
/// (`alloc_ops/system (honggfuzz)`).
pub fn shown_label(label: &str, engine: &str) -> String {
    match engine {
        "libfuzzer" => label.to_string(),
        engine => format!("{label} ({engine})"),
    }
}

/// The soak's progress now, from the store and the running slices' logs.
/// Arguments as for [`render`].
pub fn overview(
    state: &StateDir,
    store: &Store,
    clock: Option<(Duration, Duration)>,
    drift: &drift::TrendConfig,
) -> Result<Overview> {
    let conn = store.conn();
    let run = last_run(store);
    let mut o = Overview {
        state: "never",
        pid: None,
        elapsed_secs: None,
        remaining_secs: None,
        ended: None,
        groups: conn.query_row("SELECT COUNT(*) FROM crash_group", [], |r| r.get(0))?,
        crashes: conn.query_row("SELECT COUNT(*) FROM crash", [], |r| r.get(0))?,
        duty_cycle: None,
        slots: Vec::new(),
        drift_only: Vec::new(),
    };
    set_clock(&mut o, clock, run.as_ref());
    let running = o.state == "running";
    if let Some(run) = &run {
        o.duty_cycle = duty_cycle(store, run.id)?;
    }
    let mut drift = drift_verdicts(store, drift)?;
    o.slots = slot_statuses(state, store, running, &mut drift)?;
    o.drift_only = drift.into_iter().collect();
    Ok(o)
}

/// The last run's row, as [`overview`] reads it.
struct LastRun {
    id: i64,
    started: i64,
    deadline: i64,
    ended: Option<i64>,
    pid: i64,
}

/// The store's last run, if any ran.
fn last_run(store: &Store) -> Option<LastRun> {
    store
        .conn()
        .query_row(
            "SELECT id, started, deadline, ended, pid FROM run ORDER BY id DESC LIMIT 1",
            [],
            |r| {
                Ok(LastRun {
                    id: r.get(0)?,
                    started: r.get(1)?,
                    deadline: r.get(2)?,
                    ended: r.get(3)?,
                    pid: r.get(4)?,
                })
            },
        )
        .ok()
}

/// Sets `o`'s state and clock: `running`, by `clock` when the caller is
/// the soak, or by the last `run` when its process is alive; `stopped`
/// when a run is over; else `never`, as it is.
fn set_clock(o: &mut Overview, clock: Option<(Duration, Duration)>, run: Option<&LastRun>) {
    let now = crate::foundation::store::now();
    match (clock, run) {
        (Some((elapsed, remaining)), _) => {
            o.state = "running";
            o.elapsed_secs = Some(elapsed.as_secs());
            o.remaining_secs = Some(remaining.as_secs());
        }
        (None, Some(run)) if run.ended.is_none() && alive(run.pid) => {
            o.state = "running";
            o.pid = Some(run.pid);
            o.elapsed_secs = Some((now - run.started).max(0) as u64);
            o.remaining_secs = Some((run.deadline - now).max(0) as u64);
        }
        (None, Some(run)) => {
            o.state = "stopped";
            o.ended = run.ended;
        }
        (None, None) => {}
    }
}

/// A fuzz slot's row in the store, with its counts.
struct SlotCounts {
    id: i64,
    /// `target/allocator`.
    label: String,
    engine: String,
    weight: f64,
    /// Slices ended.
    slices: i64,
    groups: i64,
    crashes: i64,
}

/// Every fuzz slot's row, by id; each takes its drift column from `drift`
/// (what is left there has no fuzz slot). `running` as for [`slot_status`].
fn slot_statuses(
    state: &StateDir,
    store: &Store,
    running: bool,
    drift: &mut std::collections::BTreeMap<String, String>,
) -> Result<Vec<SlotStatus>> {
    let mut stmt = store.conn().prepare(
        "SELECT s.id, s.target || '/' || s.allocator, s.engine, s.weight,
            (SELECT COUNT(*) FROM slice WHERE slot_id = s.id AND ended IS NOT NULL),
            (SELECT COUNT(*) FROM crash_group WHERE slot_id = s.id),
            (SELECT COUNT(*) FROM crash WHERE slot_id = s.id)
         FROM slot s WHERE s.engine != 'drift' ORDER BY s.id",
    )?;
    let slots = stmt.query_map([], |r| {
        Ok(SlotCounts {
            id: r.get(0)?,
            label: r.get(1)?,
            engine: r.get(2)?,
            weight: r.get(3)?,
            slices: r.get(4)?,
            groups: r.get(5)?,
            crashes: r.get(6)?,
        })
    })?;
    let mut statuses = Vec::new();
    for slot in slots {
        let slot = slot?;
        let drift = drift.remove(&slot.label).unwrap_or_default();
        statuses.push(slot_status(state, store, running, slot, drift)?);
    }
    Ok(statuses)
}

/// One fuzz slot's row: the numbers of its slice running now (read from
/// its scratch, when `running`, the soak runs), else of its last ended
/// one, its race sections over every ended slice, and `drift`, its drift
/// column.
fn slot_status(
    state: &StateDir,
    store: &Store,
    running: bool,
    slot: SlotCounts,
    drift: String,
) -> Result<SlotStatus> {
    let conn = store.conn();
    let last: Option<(f64, i64, i64, i64)> = conn
        .query_row(
            "SELECT execs_per_sec, cov, ft, corpus_size FROM slice
             WHERE slot_id = ?1 AND ended IS NOT NULL ORDER BY id DESC LIMIT 1",
            params![slot.id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?)),
        )
        .ok();
    let races = race_tally(store, slot.id)?;
    let live_slice: Option<i64> = if running {
        conn.query_row(
            "SELECT id FROM slice WHERE slot_id = ?1 AND ended IS NULL ORDER BY id DESC LIMIT 1",
            params![slot.id],
            |r| r.get(0),
        )
        .ok()
    } else {
        None
    };
    let live = live_slice.and_then(|s| {
        crate::engines::Engine::parse(&slot.engine)
            .ok()?
            .progress(&state.slice(s))
    });
    let (execs_per_sec, cov, ft, corpus) = match (live, last) {
        (Some(p), _) => (
            p.execs_per_sec as f64,
            p.cov as i64,
            p.ft as i64,
            p.corpus as i64,
        ),
        (None, Some(l)) => l,
        (None, None) => (0.0, 0, 0, 0),
    };
    Ok(SlotStatus {
        id: slot.id,
        drift,
        label: slot.label,
        engine: slot.engine,
        weight: slot.weight,
        slices: slot.slices,
        execs_per_sec,
        cov,
        ft,
        corpus,
        groups: slot.groups,
        crashes: slot.crashes,
        race_share: races.share(),
        most_inside: races.most_inside as i64,
        fuzzing: live_slice.is_some(),
    })
}

/// The race sections of slot `slot_id`'s ended slices, summed, and the
/// most workers inside at once.
fn race_tally(store: &Store, slot_id: i64) -> Result<shadow::tally::Tally> {
    Ok(store.conn().query_row(
        "SELECT COALESCE(SUM(race_sections), 0), COALESCE(SUM(races_together), 0),
                COALESCE(MAX(most_inside), 0)
         FROM slice WHERE slot_id = ?1 AND ended IS NOT NULL",
        params![slot_id],
        |r| {
            Ok(shadow::tally::Tally {
                sections: r.get::<_, i64>(0)? as u64,
                together: r.get::<_, i64>(1)? as u64,
                most_inside: r.get::<_, i64>(2)? as u64,
                ..Default::default() // the slot's execs say how many ran
            })
        },
    )?)
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
    for slot in crate::rss::table::drift_slots(store)? {
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
/// for one run of the soak (so far, while it runs). The run gave them its
/// time up to its deadline, or its end when it stopped sooner: filing
/// after the deadline is not fuzzing time (the elapsed time says how long
/// it took).
pub fn duty_cycle(store: &Store, run_id: i64) -> Result<Option<f64>> {
    let (started, ended, deadline, jobs, drift_share): (i64, Option<i64>, i64, i64, f64) =
        store.conn().query_row(
            "SELECT started, ended, deadline, jobs, drift_share FROM run WHERE id = ?1",
            params![run_id],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)),
        )?;
    let until = ended
        .unwrap_or_else(crate::foundation::store::now)
        .min(deadline);
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
        "SELECT COALESCE(SUM(CASE WHEN ended IS NULL THEN MAX(?2 - started, 0) ELSE fuzz_secs END), 0)
         FROM slice WHERE run_id = ?1",
        params![run_id, until],
        |r| r.get(0),
    )?;
    let wall = (until - started) as f64 * (jobs as f64 + drift_share);
    // The run's times are whole seconds and an engine's are not: a slice
    // that fuzzed the whole window can come out a little over it.
    Ok((wall >= 1.0).then(|| ((engine + drift_ms as f64 / 1000.0) / wall).min(1.0)))
}

fn alive(pid: i64) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

fn hms(secs: u64) -> String {
    format!("{}:{:02}:{:02}", secs / 3600, secs % 3600 / 60, secs % 60)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run of 100 s that filed for 50 s past its deadline: 95 s of
    /// fuzzing on its one core is 95 %, not 63 %.
    #[test]
    fn the_duty_cycle_ends_at_the_deadline() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("store.sqlite")).unwrap();
        let run = store.start_run(1, 0.0, 0).unwrap();
        let sql = "UPDATE run SET started = 1000, deadline = 1100, ended = 1150 WHERE id = ?1";
        store.conn().execute(sql, params![run]).unwrap();
        let slot = store
            .slot("alloc_ops", "system", "libfuzzer", 1.0)
            .unwrap()
            .id;
        store
            .conn()
            .execute(
                "INSERT INTO slice (slot_id, run_id, started, ended, fuzz_secs) VALUES (?1, ?2, 1000, 1100, 95)",
                params![slot, run],
            )
            .unwrap();
        let duty = duty_cycle(&store, run).unwrap().unwrap();
        assert!((duty - 0.95).abs() < 1e-9, "{duty}");
    }
}
