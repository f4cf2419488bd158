//! Where an artifact came from: the slot, its binary and the files a
//! replay of it needs.

use std::path::Path;

use anyhow::Result;
use shadow::Target;
use triage::budget::Budget;
use triage::replay::{Replay, Replayer};

use crate::engines::libfuzzer::replay_error;

/// What intake needs to know about the slot an artifact came from.
pub struct Source<'a> {
    pub target: Target,
    pub allocator: &'a str,
    pub engine: &'a str,
    pub slot_id: i64,
    pub slice_id: Option<i64>,
    pub binary: &'a Path,
    /// The tolerate file the slice ran with (replays use it too, so a
    /// known bug earlier in the input does not hide this one).
    pub tolerate: Option<&'a Path>,
    /// The engine's input history (`ALLOCSOAK_HISTORY`), for a crash that
    /// does not reproduce alone.
    pub history: Option<&'a Path>,
    pub timeout_secs: u64,
    pub rss_limit_mb: u64,
    /// When to stop minimizing and shrinking, and to kill a replay
    /// still running.
    pub budget: Budget<'a>,
}

impl Source<'_> {
    pub(super) fn slot_label(&self) -> String {
        format!("{}/{}", self.target, self.allocator)
    }

    pub(super) fn replayer(&self) -> Replayer<'_> {
        Replayer {
            binary: self.binary,
            allocator: self.allocator,
            tolerate: self.tolerate,
            timeout_secs: self.timeout_secs,
            rss_limit_mb: self.rss_limit_mb,
            budget: self.budget,
        }
    }

    pub(super) fn replay(&self, inputs: &[&Path], tolerate: bool) -> Result<Replay> {
        self.replayer()
            .replay(inputs, tolerate)
            .map_err(|e| replay_error(e, self.binary))
    }
}
