//! The code paths each code-path group's crashes came by (see
//! `migrations/0007_group_paths.sql`).

use anyhow::Result;
use report::Signature;
use rusqlite::params;

use super::db::Store;

impl Store {
    /// Keeps `sig`'s path among group `group_id`'s, when it is a code path.
    pub fn add_group_path(&self, group_id: &str, sig: &Signature) -> Result<()> {
        if sig.path {
            self.conn.execute(
                "INSERT OR IGNORE INTO group_path (group_id, signature) VALUES (?1, ?2)",
                params![group_id, sig.key()],
            )?;
        }
        Ok(())
    }

    /// Every group's crash paths, as signatures, oldest group first.
    pub fn group_paths(&self) -> Result<Vec<(String, Signature)>> {
        let mut stmt = self.conn.prepare(
            "SELECT p.group_id, p.signature FROM group_path p
               JOIN crash_group g ON g.id = p.group_id
              ORDER BY g.first_seen, g.id",
        )?;
        let rows = stmt.query_map([], |r| Ok((r.get::<_, String>(0)?, r.get::<_, String>(1)?)))?;
        let mut paths = Vec::new();
        for row in rows {
            let (group, key) = row?;
            if let Some(sig) = Signature::from_key(&key, true) {
                paths.push((group, sig));
            }
        }
        Ok(paths)
    }
}
