//! The ways a group's bug was reached: its variants table (the violation
//! key, the allocator call with the block's tiers, the target, how often,
//! the first input).

use anyhow::Result;
use rusqlite::params;

use super::db::{group_row, now, GroupRow, Store, GROUP_SELECT};

/// One way a group's bug was reached (a row of its variants table).
#[derive(Clone, Debug, PartialEq)]
pub struct VariantRow {
    pub group_id: String,
    /// The violation's key, which the group's slices tolerate.
    pub key: String,
    /// The allocator call and the block's tiers (`alloc size 0..64 align 32..`).
    pub site: String,
    pub target: String,
    pub count: i64,
    pub first_input: String,
}

impl Store {
    /// Counts one more of `v`'s way to its group (its input the first, when new).
    pub fn add_variant(&self, v: &VariantRow) -> Result<()> {
        self.conn.execute(
            "INSERT INTO variant (group_id, key, site, target, count, first_input, first_seen)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)
             ON CONFLICT (group_id, key, target) DO UPDATE SET count = count + excluded.count",
            params![
                v.group_id,
                v.key,
                v.site,
                v.target,
                v.count,
                v.first_input,
                now()
            ],
        )?;
        Ok(())
    }

    /// A group's variants, most frequent first.
    pub fn variants(&self, group_id: &str) -> Result<Vec<VariantRow>> {
        let mut stmt = self.conn.prepare(
            "SELECT group_id, key, site, target, count, first_input FROM variant
             WHERE group_id = ?1 ORDER BY count DESC, site, target",
        )?;
        let rows = stmt.query_map([group_id], |r| {
            Ok(VariantRow {
                group_id: r.get(0)?,
                key: r.get(1)?,
                site: r.get(2)?,
                target: r.get(3)?,
                count: r.get(4)?,
                first_input: r.get(5)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }

    /// The groups a violation key is a variant of, or the tolerance key
    /// of (a group filed before signatures dropped the size tiers was
    /// keyed by it), of any allocator: the caller checks whose, a
    /// reference's key names the reference.
    pub fn groups_of_variant(&self, key: &str) -> Result<Vec<GroupRow>> {
        let mut stmt = self.conn.prepare(&format!(
            "{GROUP_SELECT} WHERE id IN (SELECT group_id FROM variant WHERE key = ?1)
               OR tolerance_key = ?1 ORDER BY id"
        ))?;
        let rows = stmt.query_map([key], group_row)?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}
