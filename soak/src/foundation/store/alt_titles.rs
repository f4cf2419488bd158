//! A group's alternative titles ([`report::Signature::alt`]), by which a
//! crash whose key differs files into it.

use anyhow::Result;
use rusqlite::{params, OptionalExtension};

use super::db::Store;

impl Store {
    /// Keeps `titles` as alternative titles of group `id` (those it has
    /// already are kept once).
    pub fn add_alt_titles(&self, id: &str, titles: &[String]) -> Result<()> {
        for title in titles {
            self.conn.execute(
                "INSERT OR IGNORE INTO alt_title (group_id, title) VALUES (?1, ?2)",
                params![id, title],
            )?;
        }
        Ok(())
    }

    /// The oldest group of `allocator` with one of `titles` among its
    /// alternative titles.
    pub fn group_by_alt_title(&self, allocator: &str, titles: &[String]) -> Result<Option<String>> {
        let mut found: Option<(i64, String)> = None;
        for title in titles {
            let group = self
                .conn
                .query_row(
                    "SELECT g.first_seen, g.id FROM alt_title a
                       JOIN crash_group g ON g.id = a.group_id
                       JOIN slot s ON s.id = g.slot_id
                      WHERE a.title = ?1 AND s.allocator = ?2
                      ORDER BY g.first_seen, g.id LIMIT 1",
                    params![title, allocator],
                    |r| Ok((r.get::<_, i64>(0)?, r.get::<_, String>(1)?)),
                )
                .optional()?;
            if group.is_some() && (found.is_none() || group < found) {
                found = group;
            }
        }
        Ok(found.map(|(_, id)| id))
    }
}
