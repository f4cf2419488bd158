//! A drift series in the store: its segments (one per replay process),
//! its points (readings, thinned as they age), and what the fit reads.

use anyhow::Result;
use drift::{Bucket, Reading};
use rusqlite::{params, Connection};

use crate::foundation::store::{self, Store};

/// One stored point: a bucket of readings and its last reading's figures.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub segment_id: i64,
    pub bucket: Bucket,
    /// The last reading in it (its `secs`, `ops` are that reading's).
    pub last: Reading,
}

/// Starts a segment of the series `slot_id` in soak run `run_id`.
pub fn start_segment(store: &Store, slot_id: i64, run_id: Option<i64>) -> Result<i64> {
    store.conn().execute(
        "INSERT INTO drift_segment (slot_id, run_id, started) VALUES (?1, ?2, ?3)",
        params![slot_id, run_id, store::now()],
    )?;
    Ok(store.conn().last_insert_rowid())
}

/// Ends a segment with what ended its process.
pub fn end_segment(store: &Store, segment_id: i64, outcome: &str) -> Result<()> {
    store.conn().execute(
        "UPDATE drift_segment SET ended = ?2, outcome = ?3 WHERE id = ?1",
        params![segment_id, store::now(), outcome],
    )?;
    Ok(())
}

/// Adds one raw reading, committed at once (a kill loses none written).
pub fn add_reading(store: &Store, segment_id: i64, r: &Reading) -> Result<()> {
    let bucket = Bucket::of(&r.sample(), false);
    insert(store.conn(), segment_id, &bucket, r)
}

fn insert(conn: &Connection, segment_id: i64, b: &Bucket, r: &Reading) -> Result<()> {
    let figures: Vec<String> = r.figures.iter().map(|(k, v)| format!("{k}={v}")).collect();
    conn.execute(
        "INSERT INTO drift_point (segment_id, secs, last_secs, samples, ops, min, median, max,
            rss, anon, live, cpu_ms, programs, figures)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14)",
        params![
            segment_id,
            b.secs as i64,
            b.last_secs as i64,
            b.samples,
            b.ops as i64,
            b.min as i64,
            b.median as i64,
            b.max as i64,
            r.rss as i64,
            r.anon as i64,
            r.live as i64,
            r.cpu_ms as i64,
            r.programs as i64,
            figures.join(" "),
        ],
    )?;
    Ok(())
}

/// Every point of the series, oldest first; the first point of each
/// segment after the first is marked `restart`.
pub fn points(store: &Store, slot_id: i64) -> Result<Vec<Point>> {
    let mut stmt = store.conn().prepare(
        "SELECT p.segment_id, p.secs, p.last_secs, p.samples, p.ops, p.min, p.median, p.max,
                p.rss, p.anon, p.live, p.cpu_ms, p.programs, p.figures
         FROM drift_point p JOIN drift_segment s ON s.id = p.segment_id
         WHERE s.slot_id = ?1 ORDER BY p.segment_id, p.secs, p.id",
    )?;
    let rows = stmt.query_map([slot_id], |r| {
        let u = |i| r.get::<_, i64>(i).map(|v| v.max(0) as u64);
        let figures: String = r.get(13)?;
        Ok(Point {
            segment_id: r.get(0)?,
            bucket: Bucket {
                secs: u(1)?,
                last_secs: u(2)?,
                samples: r.get(3)?,
                ops: u(4)?,
                min: u(5)?,
                median: u(6)?,
                max: u(7)?,
                restart: false,
            },
            last: Reading {
                secs: u(2)?,
                ops: u(4)?,
                rss: u(8)?,
                anon: u(9)?,
                live: u(10)?,
                cpu_ms: u(11)?,
                programs: u(12)?,
                figures: figures
                    .split(' ')
                    .filter_map(|f| {
                        let (k, v) = f.split_once('=')?;
                        Some((k.to_string(), v.parse().ok()?))
                    })
                    .collect(),
            },
        })
    })?;
    let mut points: Vec<Point> = rows.collect::<rusqlite::Result<_>>()?;
    for i in 1..points.len() {
        points[i].bucket.restart = points[i].segment_id != points[i - 1].segment_id;
    }
    Ok(points)
}

/// The points the fit reads: every point, or once the series' rss-drift
/// group (`label`'s) is fixed, only those after the segment that filed
/// it. The fixed allocator starts afresh; the growth it was filed for
/// would otherwise file it again at once.
pub fn fitted(store: &Store, slot_id: i64, label: &str) -> Result<Vec<Point>> {
    since_fix(store, slot_id, label, points(store, slot_id)?)
}

/// [`fitted`] of the series' `points`, already read.
pub fn since_fix(
    store: &Store,
    slot_id: i64,
    label: &str,
    mut points: Vec<Point>,
) -> Result<Vec<Point>> {
    let fixed = store
        .group(&report::Signature::rss_drift(label).id())?
        .is_some_and(|g| g.status == "fixed");
    if !fixed {
        return Ok(points);
    }
    let filed: Option<i64> = store.conn().query_row(
        "SELECT MAX(id) FROM drift_segment
         WHERE slot_id = ?1 AND outcome IN ('drifts', 'rss-limit')",
        [slot_id],
        |r| r.get(0),
    )?;
    if let Some(filed) = filed {
        points.retain(|p| p.segment_id > filed);
    }
    if let Some(first) = points.first_mut() {
        first.bucket.restart = false;
    }
    Ok(points)
}

/// The buckets the fit reads.
pub fn buckets(points: &[Point]) -> Vec<Bucket> {
    points.iter().map(|p| p.bucket).collect()
}

/// Thins the series' points by age ([`drift::rethin`]), in one
/// transaction: a kill leaves the old points or the new ones, never a mix.
pub fn thin(store: &mut Store, slot_id: i64, now_secs: u64) -> Result<()> {
    let points = points(store, slot_id)?;
    let thinned = drift::rethin(&buckets(&points), now_secs);
    if thinned.len() == points.len() {
        return Ok(());
    }
    let tx = store.transaction()?;
    tx.execute(
        "DELETE FROM drift_point WHERE segment_id IN (SELECT id FROM drift_segment WHERE slot_id = ?1)",
        [slot_id],
    )?;
    // Each thinned bucket is a run of consecutive points, as many samples.
    let mut next = points.iter();
    for bucket in &thinned {
        let mut samples = 0;
        let mut last = None;
        while samples < bucket.samples {
            let Some(p) = next.next() else { break };
            samples = samples.saturating_add(p.bucket.samples);
            last = Some(p);
        }
        if let Some(p) = last {
            insert(&tx, p.segment_id, bucket, &p.last)?;
        }
    }
    tx.commit()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::foundation::store::GroupRow;

    /// A segment of `n` readings 100,000 ops apart, retained memory
    /// growing by `rate` bytes per 1,000 ops.
    fn segment(store: &Store, slot_id: i64, n: u64, rate: u64, outcome: &str) {
        let segment = start_segment(store, slot_id, None).unwrap();
        for i in 0..n {
            let ops = i * 100_000;
            let reading = Reading {
                secs: 1_700_000_000 + i,
                ops,
                rss: (8 << 20) + rate * ops / 1000,
                anon: 0,
                live: 1 << 20,
                cpu_ms: i * 1000,
                programs: i,
                figures: Vec::new(),
            };
            add_reading(store, segment, &reading).unwrap();
        }
        end_segment(store, segment, outcome).unwrap();
    }

    /// Fitted whole, the growth a fix ended would still outvote the fixed
    /// allocator's flat readings and file it again at once.
    #[test]
    fn a_fixed_series_is_fitted_from_after_its_finding() {
        let dir = tempfile::tempdir().unwrap();
        let store = Store::open(&dir.path().join("store.sqlite")).unwrap();
        let slot = store.slot("alloc_ops", "zoo:x", "drift", 1.0).unwrap();
        let label = "alloc_ops/zoo:x";
        segment(&store, slot.id, 40, 1000, "drifts");
        let id = report::Signature::rss_drift(label).id();
        store
            .insert_group(&GroupRow {
                id: id.clone(),
                signature: label.into(),
                kind: "rss-drift".into(),
                title: label.into(),
                tolerance_key: None,
                slot_id: slot.id,
                first_seen: 0,
                last_seen: 0,
                count: 1,
                status: "new".into(),
                minimized: None,
                repro: String::new(),
                path: false,
                alt_titles: Vec::new(),
            })
            .unwrap();
        segment(&store, slot.id, 25, 0, "stop");
        let config = drift::TrendConfig {
            warmup_ops: 0,
            warmup_fraction: 0.0,
            min_ops: 1_000_000,
            ..drift::TrendConfig::default()
        };
        let verdict =
            |points: &[Point]| drift::trend_downsampled(&buckets(points), &config).verdict;

        let open = fitted(&store, slot.id, label).unwrap();
        assert_eq!(open.len(), 65, "an open finding keeps its growth in view");
        assert_eq!(verdict(&open), drift::Verdict::Drifts);

        store.set_status(&id, "fixed").unwrap();
        let fixed = fitted(&store, slot.id, label).unwrap();
        assert_eq!(fixed.len(), 25);
        assert!(!fixed[0].bucket.restart, "{:?}", fixed[0]);
        assert_eq!(verdict(&fixed), drift::Verdict::Flat);
        assert_eq!(
            points(&store, slot.id).unwrap().len(),
            65,
            "nothing is deleted"
        );
    }
}
