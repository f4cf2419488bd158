//! A crash group's record in its folder, `crashes/<id>/group.toml`:
//! written when the group is filed (by intake, or an RSS drift finding),
//! read by its page and to refill a store.

use serde::{Deserialize, Serialize};

/// The group's own record, kept next to its inputs so a store that lost
/// its last write (a kill) can be refilled from the folder.
#[derive(Serialize, Deserialize)]
pub struct GroupFile {
    pub signature: String,
    pub kind: String,
    pub title: String,
    /// What `ALLOCSOAK_TOLERATE` lists to get past the group's bug.
    #[serde(alias = "violation_key")]
    pub tolerance_key: Option<String>,
    pub target: String,
    pub allocator: String,
    pub engine: String,
    pub first_seen: i64,
    pub minimized: Option<String>,
    pub repro: String,
    /// For a finding from a race section: `<hits> of <tries> replays`.
    #[serde(default)]
    pub race_rate: Option<String>,
    /// How many inputs (in `history/`) replay before the crash input: a
    /// crash that needs the state they leave in the allocator.
    #[serde(default)]
    pub history: usize,
    /// What shrinking the history did (`41 inputs to 1 in 2.3 s (9 replays)`).
    #[serde(default)]
    pub history_shrunk: Option<String>,
    /// What minimizing the program did (`384 ops to 3 in 4.1 s (57 replays)`).
    #[serde(default)]
    pub minimized_ops: Option<String>,
    /// The signature's frames are the violation's code path.
    #[serde(default)]
    pub path: bool,
    /// The signature's alternative titles ([`Signature::alt`](report::Signature::alt)).
    #[serde(default)]
    pub alt_titles: Vec<String>,
}
