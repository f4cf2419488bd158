//! The store itself: its connection, its migrations, and the slots,
//! slices and crash groups; the files beside it add the rest of its
//! tables to [`Store`].

use std::path::Path;

use anyhow::{bail, Context, Result};
use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

/// Schema migrations, applied in order; `PRAGMA user_version` counts them.
const MIGRATIONS: &[&str] = &[
    include_str!("../../../migrations/0001_init.sql"),
    include_str!("../../../migrations/0002_tolerance_key.sql"),
    include_str!("../../../migrations/0003_drift.sql"),
    include_str!("../../../migrations/0004_paths.sql"),
    include_str!("../../../migrations/0005_alt_titles.sql"),
    include_str!("../../../migrations/0006_merged_groups.sql"),
    include_str!("../../../migrations/0007_group_paths.sql"),
    include_str!("../../../migrations/0008_bisections.sql"),
    include_str!("../../../migrations/0009_race_tally.sql"),
];

pub struct Store {
    pub(super) conn: Connection,
}

/// A slot as the store keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct SlotRow {
    pub id: i64,
    pub target: String,
    pub allocator: String,
    pub engine: String,
    pub weight: f64,
}

/// What one slice did, recorded when it ends.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct SliceStats {
    pub fuzz_secs: f64,
    pub execs: u64,
    pub cov: u64,
    pub ft: u64,
    pub corpus_size: u64,
    pub new_units: u64,
    pub merged_units: u64,
    pub peak_rss_mb: u64,
    pub findings: u64,
    pub tolerated: u64,
    /// Its race sections (`mt_ops`' and `heap_api`'s; zero for the others).
    pub races: shadow::tally::Tally,
    pub outcome: String,
}

/// A crash group as the store keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct GroupRow {
    pub id: String,
    pub signature: String,
    pub kind: String,
    pub title: String,
    pub tolerance_key: Option<String>,
    pub slot_id: i64,
    pub first_seen: i64,
    pub last_seen: i64,
    pub count: i64,
    pub status: String,
    pub minimized: Option<String>,
    pub repro: String,
    /// The signature's frames are a code path ([`report::Signature::path`]).
    pub path: bool,
    /// The alternative titles of the crashes filed into it
    /// ([`report::Signature::alt`]), sorted.
    pub alt_titles: Vec<String>,
}

impl GroupRow {
    /// The signature the group was filed under, with the alternative
    /// titles of every crash filed into it.
    pub fn signature(&self) -> Option<report::Signature> {
        let mut sig = report::Signature::from_key(&self.signature, self.path)?;
        sig.alt = self.alt_titles.clone();
        Some(sig)
    }

    /// Whether a replay signed `sig` shows this group's bug: its id, or
    /// the same bug ([`report::Signature::same_bug`]: one code path
    /// containing the other, or an alternative title in common).
    pub fn shown_by(&self, sig: &report::Signature) -> bool {
        sig.id() == self.id || self.signature().is_some_and(|g| g.same_bug(sig))
    }
}

pub fn now() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs() as i64)
}

/// `YYYY-MM-DD HH:MM:SS UTC` from unix seconds.
pub fn utc(secs: i64) -> String {
    let days = secs.div_euclid(86_400);
    let rem = secs.rem_euclid(86_400);
    // Howard Hinnant's civil_from_days.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02} {:02}:{:02}:{:02} UTC",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

impl Store {
    /// Opens (creating) the store at `path` and migrates it. A file that is
    /// not a store, or is damaged, is an error and is left as it is.
    pub fn open(path: &Path) -> Result<Store> {
        let corrupt = |e: rusqlite::Error| {
            anyhow::anyhow!(
                "the store {} is unreadable ({e}); move it aside and restart (corpus/ and crashes/ are kept and re-read)",
                path.display()
            )
        };
        let conn = Connection::open(path).map_err(corrupt)?;
        conn.busy_timeout(std::time::Duration::from_secs(30))
            .map_err(corrupt)?;
        let check: String = conn
            .query_row("PRAGMA quick_check", [], |r| r.get(0))
            .map_err(corrupt)?;
        if check != "ok" {
            bail!(
                "the store {} is corrupt ({check}); move it aside and restart (corpus/ and crashes/ are kept and re-read)",
                path.display()
            );
        }
        conn.pragma_update(None, "journal_mode", "WAL")
            .map_err(corrupt)?;
        conn.pragma_update(None, "synchronous", "NORMAL")
            .map_err(corrupt)?;
        conn.pragma_update(None, "foreign_keys", "ON")
            .map_err(corrupt)?;
        let mut store = Store { conn };
        store.migrate(path)?;
        Ok(store)
    }

    /// Opens the store at `path` to read only (the dashboard): it writes
    /// nothing, and in WAL mode its reads never block the soak's writes.
    /// The store must be at this allocsoak's schema version.
    pub fn open_read_only(path: &Path) -> Result<Store> {
        let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
        let conn = Connection::open_with_flags(path, flags).with_context(|| {
            format!(
                "failed to open the store {} to read; pass the --state a soak ran with",
                path.display()
            )
        })?;
        conn.busy_timeout(std::time::Duration::from_secs(5))?;
        let version: usize = conn.query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version != MIGRATIONS.len() {
            bail!(
                "the store {} has schema version {version}, this allocsoak reads {}; run `allocsoak status` with this allocsoak once to migrate it, or use the allocsoak that wrote it",
                path.display(),
                MIGRATIONS.len()
            );
        }
        Ok(Store { conn })
    }

    fn migrate(&mut self, path: &Path) -> Result<()> {
        let version: usize = self
            .conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))?;
        if version > MIGRATIONS.len() {
            bail!(
                "the store {} has schema version {version}, newer than this allocsoak knows ({}); use a newer allocsoak",
                path.display(),
                MIGRATIONS.len()
            );
        }
        for (i, sql) in MIGRATIONS.iter().enumerate().skip(version) {
            let tx = self.conn.transaction()?;
            tx.execute_batch(sql)
                .with_context(|| format!("migration {} of {}", i + 1, path.display()))?;
            tx.pragma_update(None, "user_version", i + 1)?;
            tx.commit()?;
        }
        Ok(())
    }

    /// The slot's row, created with `weight` on first sight.
    pub fn slot(
        &self,
        target: &str,
        allocator: &str,
        engine: &str,
        weight: f64,
    ) -> Result<SlotRow> {
        self.conn.execute(
            "INSERT OR IGNORE INTO slot (target, allocator, engine, weight) VALUES (?1, ?2, ?3, ?4)",
            params![target, allocator, engine, weight],
        )?;
        Ok(self.conn.query_row(
            "SELECT id, target, allocator, engine, weight FROM slot WHERE target = ?1 AND allocator = ?2 AND engine = ?3",
            params![target, allocator, engine],
            slot_row,
        )?)
    }

    pub fn slot_by_id(&self, id: i64) -> Result<SlotRow> {
        Ok(self.conn.query_row(
            "SELECT id, target, allocator, engine, weight FROM slot WHERE id = ?1",
            [id],
            slot_row,
        )?)
    }

    pub fn slots(&self) -> Result<Vec<SlotRow>> {
        let mut stmt = self
            .conn
            .prepare("SELECT id, target, allocator, engine, weight FROM slot ORDER BY id")?;
        let rows = stmt.query_map([], slot_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    pub fn set_weight(&self, slot_id: i64, weight: f64) -> Result<()> {
        self.conn.execute(
            "UPDATE slot SET weight = ?2 WHERE id = ?1",
            params![slot_id, weight],
        )?;
        Ok(())
    }

    /// Starts a soak run of `jobs` fuzz workers and drift workers that
    /// share `drift_share` of one core.
    pub fn start_run(&self, jobs: usize, drift_share: f64, deadline: i64) -> Result<i64> {
        self.conn.execute(
            "INSERT INTO run (pid, jobs, drift_share, started, deadline) VALUES (?1, ?2, ?3, ?4, ?5)",
            params![std::process::id(), jobs as i64, drift_share, now(), deadline],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    pub fn end_run(&self, run_id: i64) -> Result<()> {
        self.conn.execute(
            "UPDATE run SET ended = ?2 WHERE id = ?1",
            params![run_id, now()],
        )?;
        Ok(())
    }

    pub fn start_slice(&self, slot_id: i64, run_id: i64) -> Result<i64> {
        self.conn.execute(
            "INSERT INTO slice (slot_id, run_id, started) VALUES (?1, ?2, ?3)",
            params![slot_id, run_id, now()],
        )?;
        Ok(self.conn.last_insert_rowid())
    }

    pub fn end_slice(&self, slice_id: i64, s: &SliceStats) -> Result<()> {
        self.conn.execute(
            // A slice finished again after a restart (or, after a stop,
            // for its merge) keeps what its first finish knew from the
            // engine's log and folders (read once): its time, counts and
            // what ended it.
            "UPDATE slice SET ended = ?2, fuzz_secs = MAX(COALESCE(fuzz_secs, 0), ?3),
                execs = MAX(COALESCE(execs, 0), ?4), execs_per_sec = MAX(COALESCE(execs_per_sec, 0), ?5),
                cov = MAX(COALESCE(cov, 0), ?6), ft = MAX(COALESCE(ft, 0), ?7),
                corpus_size = ?8, new_units = ?9, merged_units = MAX(COALESCE(merged_units, 0), ?10),
                peak_rss_mb = MAX(COALESCE(peak_rss_mb, 0), ?11), findings = MAX(COALESCE(findings, 0), ?12),
                tolerated = MAX(COALESCE(tolerated, 0), ?13), outcome = COALESCE(outcome, ?14),
                race_sections = MAX(COALESCE(race_sections, 0), ?15),
                races_together = MAX(COALESCE(races_together, 0), ?16),
                most_inside = MAX(COALESCE(most_inside, 0), ?17)
             WHERE id = ?1",
            params![
                slice_id,
                now(),
                s.fuzz_secs,
                s.execs as i64,
                if s.fuzz_secs > 0.0 { s.execs as f64 / s.fuzz_secs } else { 0.0 },
                s.cov as i64,
                s.ft as i64,
                s.corpus_size as i64,
                s.new_units as i64,
                s.merged_units as i64,
                s.peak_rss_mb as i64,
                s.findings as i64,
                s.tolerated as i64,
                s.outcome,
                s.races.sections as i64,
                s.races.together as i64,
                s.races.most_inside as i64,
            ],
        )?;
        Ok(())
    }

    /// The last `n` ended slices of a slot, newest first.
    pub fn recent_slices(&self, slot_id: i64, n: usize) -> Result<Vec<SliceStats>> {
        self.ended_slices(slot_id, None, n)
    }

    /// The last ended slice a run gave a slot.
    pub fn run_slice(&self, slot_id: i64, run_id: i64) -> Result<Option<SliceStats>> {
        Ok(self.ended_slices(slot_id, Some(run_id), 1)?.pop())
    }

    fn ended_slices(&self, slot_id: i64, run_id: Option<i64>, n: usize) -> Result<Vec<SliceStats>> {
        let mut stmt = self.conn.prepare(
            "SELECT fuzz_secs, execs, cov, ft, corpus_size, new_units, merged_units, peak_rss_mb,
                    findings, tolerated, outcome, COALESCE(race_sections, 0),
                    COALESCE(races_together, 0), COALESCE(most_inside, 0)
             FROM slice WHERE slot_id = ?1 AND ended IS NOT NULL AND (?3 IS NULL OR run_id = ?3)
             ORDER BY id DESC LIMIT ?2",
        )?;
        let rows = stmt.query_map(params![slot_id, n as i64, run_id], |r| {
            Ok(SliceStats {
                fuzz_secs: r.get(0)?,
                execs: r.get::<_, i64>(1)? as u64,
                cov: r.get::<_, i64>(2)? as u64,
                ft: r.get::<_, i64>(3)? as u64,
                corpus_size: r.get::<_, i64>(4)? as u64,
                new_units: r.get::<_, i64>(5)? as u64,
                merged_units: r.get::<_, i64>(6)? as u64,
                peak_rss_mb: r.get::<_, i64>(7)? as u64,
                findings: r.get::<_, i64>(8)? as u64,
                tolerated: r.get::<_, i64>(9)? as u64,
                outcome: r.get(10)?,
                races: shadow::tally::Tally {
                    sections: r.get::<_, i64>(11)? as u64,
                    together: r.get::<_, i64>(12)? as u64,
                    most_inside: r.get::<_, i64>(13)? as u64,
                    ..Default::default() // `execs` says how many ran
                },
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    pub fn group(&self, id: &str) -> Result<Option<GroupRow>> {
        Ok(self
            .conn
            .query_row(&format!("{GROUP_SELECT} WHERE id = ?1"), [id], group_row)
            .optional()?)
    }

    /// Every group, newest first.
    pub fn groups(&self) -> Result<Vec<GroupRow>> {
        let mut stmt = self
            .conn
            .prepare(&format!("{GROUP_SELECT} ORDER BY last_seen DESC, id"))?;
        let rows = stmt.query_map([], group_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Files a new group (no-op when it exists: a restart may re-file one).
    pub fn insert_group(&self, g: &GroupRow) -> Result<()> {
        self.conn.execute(
            "INSERT OR IGNORE INTO crash_group (id, signature, kind, title, tolerance_key, slot_id,
                first_seen, last_seen, count, status, minimized, repro, path)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13)",
            params![
                g.id,
                g.signature,
                g.kind,
                g.title,
                g.tolerance_key,
                g.slot_id,
                g.first_seen,
                g.last_seen,
                g.count,
                g.status,
                g.minimized,
                g.repro,
                g.path
            ],
        )?;
        self.add_alt_titles(&g.id, &g.alt_titles)
    }

    /// Records one raw crash in its group.
    pub fn add_crash(
        &self,
        group_id: &str,
        slot_id: i64,
        slice_id: Option<i64>,
        input: &str,
        reproduced: bool,
    ) -> Result<()> {
        let t = now();
        self.conn.execute(
            "INSERT INTO crash (group_id, slot_id, slice_id, input, seen, reproduced)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![group_id, slot_id, slice_id, input, t, reproduced],
        )?;
        self.conn.execute(
            "UPDATE crash_group SET count = (SELECT COUNT(*) FROM crash WHERE group_id = ?1),
                last_seen = ?2 WHERE id = ?1",
            params![group_id, t],
        )?;
        Ok(())
    }

    pub fn set_status(&self, group_id: &str, status: &str) -> Result<()> {
        self.conn.execute(
            "UPDATE crash_group SET status = ?2 WHERE id = ?1",
            params![group_id, status],
        )?;
        Ok(())
    }

    /// The violation keys its slices tolerate: those of the allocator's
    /// groups not marked fixed, and of every group a reference allocator
    /// raised (`diff_mimalloc`'s other side), whichever slot found it: such
    /// a key ends `[reference allocator <name>]` and matches only a
    /// violation of that reference, never one of the allocator under test.
    pub fn tolerated_keys(&self, allocator: &str) -> Result<Vec<(String, String)>> {
        // A group's own key, and every variant's.
        let mut stmt = self.conn.prepare(
            "SELECT id, key FROM (
                 SELECT g.id AS id, g.tolerance_key AS key, s.allocator AS allocator, g.status AS status
                   FROM crash_group g JOIN slot s ON s.id = g.slot_id
                 UNION
                 SELECT g.id, v.key, s.allocator, g.status
                   FROM variant v JOIN crash_group g ON g.id = v.group_id
                   JOIN slot s ON s.id = g.slot_id)
             WHERE (allocator = ?1 OR instr(key, ?2) > 0)
               AND key IS NOT NULL AND status != 'fixed'
             ORDER BY id, key",
        )?;
        let rows = stmt.query_map(
            params![allocator, report::key::REFERENCE.trim_start()],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The kinds of the allocator's groups (not fixed) keyed by a code
    /// path that leave memory in doubt: while fuzzing, its slices save a
    /// new way to one of them and go on (`save <kind> in *`).
    pub fn unsound_path_kinds(&self, allocator: &str) -> Result<Vec<String>> {
        let mut stmt = self.conn.prepare(
            "SELECT DISTINCT g.kind FROM crash_group g JOIN slot s ON s.id = g.slot_id
             WHERE g.path = 1 AND s.allocator = ?1 AND g.status != 'fixed' ORDER BY g.kind",
        )?;
        let rows = stmt.query_map([allocator], |r| r.get::<_, String>(0))?;
        let kinds: Vec<String> = rows.collect::<rusqlite::Result<_>>()?;
        Ok(kinds
            .into_iter()
            .filter(|k| !report::key::SOUND_KINDS.contains(&k.as_str()))
            .collect())
    }

    /// Every group keyed by a code path, oldest first.
    pub fn path_groups(&self) -> Result<Vec<GroupRow>> {
        let mut stmt = self.conn.prepare(&format!(
            "{GROUP_SELECT} WHERE path = 1 ORDER BY first_seen, id"
        ))?;
        let rows = stmt.query_map([], group_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// How many of the allocator's groups (not fixed) no harness gets
    /// past: a deadly signal, an assertion, a timeout, an out-of-memory, a
    /// leak (LeakSanitizer's, or one the harness keyed by the call that
    /// lost the block) end the fuzz process each time they recur (RSS
    /// drift is no crash). Such an allocator's slices run libFuzzer's
    /// `-fork`, which goes on past a child's death.
    pub fn ending_groups(&self, allocator: &str) -> Result<i64> {
        Ok(self.conn.query_row(
            "SELECT COUNT(*) FROM crash_group g JOIN slot s ON s.id = g.slot_id
             WHERE s.allocator = ?1 AND (g.tolerance_key IS NULL OR g.kind = 'leak')
               AND g.status != 'fixed' AND g.kind != 'rss-drift'",
            params![allocator],
            |r| r.get(0),
        )?)
    }

    /// How often a run's slices got past a group.
    pub fn tolerated_in_run(&self, group_id: &str, run_id: i64) -> Result<i64> {
        Ok(self.conn.query_row(
            "SELECT COALESCE(SUM(t.count), 0) FROM tolerated t JOIN slice s ON s.id = t.slice_id
             WHERE t.group_id = ?1 AND s.run_id = ?2",
            params![group_id, run_id],
            |r| r.get(0),
        )?)
    }

    pub fn add_tolerated(&self, slice_id: i64, group_id: &str, count: u64) -> Result<()> {
        self.conn.execute(
            "INSERT OR REPLACE INTO tolerated (slice_id, group_id, count) VALUES (?1, ?2, ?3)",
            params![slice_id, group_id, count as i64],
        )?;
        Ok(())
    }

    pub fn corpus_event(
        &self,
        target: &str,
        what: &str,
        before: usize,
        after: usize,
        secs: f64,
    ) -> Result<()> {
        self.conn.execute(
            "INSERT INTO corpus_event (target, at, what, before, after, secs) VALUES (?1, ?2, ?3, ?4, ?5, ?6)",
            params![target, now(), what, before as i64, after as i64, secs],
        )?;
        Ok(())
    }

    /// When `target`'s corpus was last pruned, or else first merged (so
    /// the first prune waits a full cadence); `None` before any merge.
    pub fn last_prune(&self, target: &str) -> Result<Option<i64>> {
        Ok(self.conn.query_row(
            "SELECT COALESCE(
                (SELECT MAX(at) FROM corpus_event WHERE target = ?1 AND what = 'prune'),
                (SELECT MIN(at) FROM corpus_event WHERE target = ?1))",
            [target],
            |r| r.get(0),
        )?)
    }

    pub fn conn(&self) -> &Connection {
        &self.conn
    }

    /// A transaction: what it writes lands whole or not at all.
    pub fn transaction(&mut self) -> Result<rusqlite::Transaction<'_>> {
        Ok(self.conn.transaction()?)
    }
}

pub(super) const GROUP_SELECT: &str =
    "SELECT id, signature, kind, title, tolerance_key, slot_id, first_seen,
    last_seen, count, status, minimized, repro, path,
    (SELECT group_concat(title, char(10)) FROM
        (SELECT title FROM alt_title WHERE group_id = crash_group.id ORDER BY title))
    FROM crash_group";

fn slot_row(r: &rusqlite::Row) -> rusqlite::Result<SlotRow> {
    Ok(SlotRow {
        id: r.get(0)?,
        target: r.get(1)?,
        allocator: r.get(2)?,
        engine: r.get(3)?,
        weight: r.get(4)?,
    })
}

pub(super) fn group_row(r: &rusqlite::Row) -> rusqlite::Result<GroupRow> {
    Ok(GroupRow {
        id: r.get(0)?,
        signature: r.get(1)?,
        kind: r.get(2)?,
        title: r.get(3)?,
        tolerance_key: r.get(4)?,
        slot_id: r.get(5)?,
        first_seen: r.get(6)?,
        last_seen: r.get(7)?,
        count: r.get(8)?,
        status: r.get(9)?,
        minimized: r.get(10)?,
        repro: r.get(11)?,
        path: r.get(12)?,
        alt_titles: r
            .get::<_, Option<String>>(13)?
            .map_or_else(Vec::new, |t| t.split('\n').map(str::to_string).collect()),
    })
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
