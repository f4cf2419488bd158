//! The typed violation record: what the harness raised, as it raised it.
//!
//! The harness writes one [`Record`] per violation it saves (JSON, next to
//! the input in a slice's findings folder) and, in a replay, the violation
//! that ended the run (the file `ALLOCSOAK_RECORD` names). The crash
//! pipeline signs that record ([`crate::Signature::from_record`]) instead
//! of reading the violation line back out of the log: the line is for
//! people, the record for the pipeline.

use serde::{Deserialize, Serialize};

/// One violation, as the executor raised it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Record {
    /// The violation's kind (`alignment`, `overlap`, `panic`, ...).
    pub kind: String,
    /// Its key ([`crate::key`]): what tolerance lists and signatures group
    /// on. Built from the typed violation, never parsed from the line.
    pub key: String,
    /// The allocator the violation belongs to: the one under test, or, on
    /// the reference side of `diff_mimalloc`, the reference.
    pub allocator: String,
    /// Raised by the reference side of `diff_mimalloc`.
    pub reference: bool,
    /// The op's index in its program.
    pub op_index: usize,
    /// The op as text (`alloc size=41 align=64`).
    pub op: String,
    /// The allocator call and the block's size and alignment tiers
    /// (`alloc size 0..64 align 32..`).
    pub site: String,
    /// Whether the heap is still sound after it, so a program can go on.
    pub sound: bool,
    /// The whole violation line, for people.
    pub line: String,
    /// For a violation of what one op's allocator calls returned, the
    /// allocator's own functions those calls ran (sorted names, see
    /// `shadow::coverage`); empty when no replay probe ran or the violation
    /// is not of a call's result. The signature keys on it when present.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub path: Vec<String>,
    /// The key without the site: `<kind>: <message, numbers as N>` (and who
    /// raised it, for the reference), what a path-keyed signature keeps.
    #[serde(default)]
    pub what: String,
    /// The key with the call alone for its site (`<kind> in <call>:
    /// <message>`, [`crate::key::family`]): what a signature without a
    /// code path keeps, so one call's bug met at several sizes is one
    /// group. Empty in records from before it.
    #[serde(default)]
    pub family: String,
}

impl Record {
    /// The record as one line of JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a record always serializes")
    }

    /// A record read back from [`Record::to_json`]'s text; `Err` says what
    /// was wrong with it.
    pub fn from_json(text: &str) -> Result<Record, serde_json::Error> {
        serde_json::from_str(text)
    }
}

/// What ended a fuzz process, as it leaves it in its findings folder
/// (`ending-<pid>.json`): the soak's next slices of that allocator get past
/// it at once, while its crash waits to be filed.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Ending {
    /// Its tolerance key: a violation's key, or a sanitizer report's.
    pub key: String,
    /// The violation's kind when it is of what one op's calls returned
    /// (so its group will be keyed by the allocator's code path): the next
    /// slices save every other key of that kind as a finding, whose replay
    /// tells another way to this bug from another bug, instead of ending
    /// on each one. `None` for a panic, a sanitizer report, and a
    /// violation without a call's path.
    #[serde(default)]
    pub path_kind: Option<String>,
}
