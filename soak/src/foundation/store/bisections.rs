//! What `allocsoak bisect` found for a group (the `bisect` tool finds it).

use anyhow::Result;
use rusqlite::params;

use super::db::Store;

/// A bisection's result as the store keeps it.
#[derive(Clone, Debug, PartialEq)]
pub struct BisectionRow {
    pub group_id: String,
    /// `cause` (the first commit that reproduces) or `fix` (the first
    /// that no longer does).
    pub direction: String,
    pub commit: String,
    pub subject: String,
    /// Revisions built, those that failed to build included.
    pub builds: i64,
    /// Revisions skipped: they did not build, or their replays disagreed.
    pub skipped: i64,
    pub at: i64,
}

impl BisectionRow {
    /// One line for pages and lists: `cause 1a2b3c4d5e6f "subject" (4 builds, 1 skipped)`.
    pub fn line(&self) -> String {
        let short = &self.commit[..self.commit.len().min(12)];
        format!(
            "{} {short} \"{}\" ({} builds, {} skipped)",
            self.direction, self.subject, self.builds, self.skipped
        )
    }
}

impl Store {
    /// Keeps `row`, replacing the group's earlier bisection of its direction.
    pub fn set_bisection(&self, row: &BisectionRow) -> Result<()> {
        self.conn.execute(
            "INSERT OR REPLACE INTO bisection
               (group_id, direction, commit_id, subject, builds, skipped, at)
             VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)",
            params![
                row.group_id,
                row.direction,
                row.commit,
                row.subject,
                row.builds,
                row.skipped,
                row.at
            ],
        )?;
        Ok(())
    }

    /// The group's bisections, cause first.
    pub fn bisections(&self, group_id: &str) -> Result<Vec<BisectionRow>> {
        let mut stmt = self.conn.prepare(
            "SELECT group_id, direction, commit_id, subject, builds, skipped, at
               FROM bisection WHERE group_id = ?1 ORDER BY direction",
        )?;
        let rows = stmt.query_map(params![group_id], |r| {
            Ok(BisectionRow {
                group_id: r.get(0)?,
                direction: r.get(1)?,
                commit: r.get(2)?,
                subject: r.get(3)?,
                builds: r.get(4)?,
                skipped: r.get(5)?,
                at: r.get(6)?,
            })
        })?;
        Ok(rows.collect::<rusqlite::Result<_>>()?)
    }
}
