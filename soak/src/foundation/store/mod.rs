//! The soak's SQLite store: slots and their weights, slices, crash groups,
//! corpus events. WAL, so `allocsoak status` reads while a soak writes;
//! migrations run when it opens.

mod alt_titles;
mod bisections;
mod db;
mod merged;
mod paths;
mod variants;

pub use bisections::BisectionRow;
pub use db::{now, utc, GroupRow, SliceStats, SlotRow, Store};
pub use merged::MergedGroup;
pub use variants::VariantRow;
