//! Groups merged into another: what one group of a bug found from two
//! entry points first becomes, once a third crash shows the code they
//! share (see `migrations/0006_merged_groups.sql`).

use anyhow::Result;
use rusqlite::{params, OptionalExtension};
use serde::{Deserialize, Serialize};

use super::db::Store;

/// A group merged into another, as a known-groups file carries it: a
/// crash with its id, or a path beside its signature's, files into the
/// group it is part of.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MergedGroup {
    pub id: String,
    pub signature: String,
    /// Its signature's frames are a code path.
    pub path: bool,
}

impl Store {
    /// Merges group `from` into group `into`: its crashes, variants,
    /// alternative titles, crash paths and tolerated counts become `into`'s, its count
    /// adds to `into`'s, and its row leaves `crash_group` for
    /// `merged_group` (as do groups merged into it before). One
    /// transaction: a kill leaves both groups or the merged one.
    pub fn merge_group(&mut self, from: &str, into: &str) -> Result<()> {
        let tx = self.conn.transaction()?;
        let (signature, path): (String, bool) = tx.query_row(
            "SELECT signature, path FROM crash_group WHERE id = ?1",
            [from],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )?;
        tx.execute(
            "UPDATE crash SET group_id = ?2 WHERE group_id = ?1",
            params![from, into],
        )?;
        tx.execute(
            "INSERT INTO variant (group_id, key, site, target, count, first_input, first_seen)
             SELECT ?2, key, site, target, count, first_input, first_seen
               FROM variant WHERE group_id = ?1
             ON CONFLICT (group_id, key, target) DO UPDATE SET count = count + excluded.count",
            params![from, into],
        )?;
        tx.execute(
            "INSERT INTO tolerated (slice_id, group_id, count)
             SELECT slice_id, ?2, count FROM tolerated WHERE group_id = ?1
             ON CONFLICT (slice_id, group_id) DO UPDATE SET count = count + excluded.count",
            params![from, into],
        )?;
        tx.execute(
            "INSERT OR IGNORE INTO alt_title (group_id, title)
             SELECT ?2, title FROM alt_title WHERE group_id = ?1",
            params![from, into],
        )?;
        tx.execute(
            "INSERT OR IGNORE INTO group_path (group_id, signature)
             SELECT ?2, signature FROM group_path WHERE group_id = ?1",
            params![from, into],
        )?;
        tx.execute(
            "UPDATE crash_group SET
                count = count + (SELECT count FROM crash_group WHERE id = ?1),
                first_seen = MIN(first_seen, (SELECT first_seen FROM crash_group WHERE id = ?1)),
                last_seen = MAX(last_seen, (SELECT last_seen FROM crash_group WHERE id = ?1))
              WHERE id = ?2",
            params![from, into],
        )?;
        tx.execute(
            "UPDATE merged_group SET into_id = ?2 WHERE into_id = ?1",
            params![from, into],
        )?;
        tx.execute(
            "INSERT INTO merged_group (id, into_id, signature, path) VALUES (?1, ?2, ?3, ?4)",
            params![from, into, signature, path],
        )?;
        for table in ["variant", "tolerated", "alt_title", "group_path"] {
            tx.execute(&format!("DELETE FROM {table} WHERE group_id = ?1"), [from])?;
        }
        tx.execute("DELETE FROM crash_group WHERE id = ?1", [from])?;
        tx.commit()?;
        Ok(())
    }

    /// The group that group `id` was merged into, if it was.
    pub fn merged_into(&self, id: &str) -> Result<Option<String>> {
        Ok(self
            .conn
            .query_row(
                "SELECT into_id FROM merged_group WHERE id = ?1",
                [id],
                |r| r.get(0),
            )
            .optional()?)
    }

    /// The groups merged into group `into`, oldest id first.
    pub fn merged_groups_of(&self, into: &str) -> Result<Vec<MergedGroup>> {
        let mut stmt = self.conn.prepare(
            "SELECT id, signature, path FROM merged_group WHERE into_id = ?1 ORDER BY id",
        )?;
        let rows = stmt.query_map([into], |r| {
            Ok(MergedGroup {
                id: r.get(0)?,
                signature: r.get(1)?,
                path: r.get(2)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// Records `merged` as part of group `into` (from a known-groups file
    /// or another state dir); a merge already recorded is kept as it is.
    pub fn add_merged_group(&self, merged: &MergedGroup, into: &str) -> Result<()> {
        self.conn.execute(
            "INSERT OR IGNORE INTO merged_group (id, into_id, signature, path) VALUES (?1, ?2, ?3, ?4)",
            params![merged.id, into, merged.signature, merged.path],
        )?;
        Ok(())
    }

    /// The code-path signatures of merged groups, each with the group it
    /// is now part of.
    pub fn merged_paths(&self) -> Result<Vec<(String, report::Signature)>> {
        let mut stmt = self
            .conn
            .prepare("SELECT into_id, signature FROM merged_group WHERE path = 1 ORDER BY id")?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
        let mut out = Vec::new();
        for row in rows {
            let (into, key) = row?;
            if let Some(sig) = report::Signature::from_key(&key, true) {
                out.push((into, sig));
            }
        }
        Ok(out)
    }
}
