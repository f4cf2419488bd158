//! The engines room: what builds and runs the fuzz targets. The project
//! layout and its builds ([`project`]), the fuzz engines a slot can run
//! ([`libfuzzer`], [`honggfuzz`]), and proof of what a build holds
//! ([`instrumentation`], [`provenance`]). It stands on the foundation
//! only; what an engine run found flows up from here into the crash
//! pipeline.
//!
//! The engines a slot can run are read back here in the same terms: a
//! slice's progress, its findings, what ended it. Both engines run the
//! same target code; a finding of either is replayed, signed and
//! minimized on the libFuzzer ASan build (by the pipeline's intake), so
//! one bug is one group whichever engine found it.

pub mod honggfuzz;
pub mod instrumentation;
pub mod libfuzzer;
pub mod project;
pub mod provenance;

use std::path::{Path, PathBuf};

use anyhow::Result;

pub use crate::foundation::config::Engine;
use libfuzzer::Progress;

impl Engine {
    /// The last progress of a slice's engine, read from its scratch
    /// folder (`fuzz.log`, and honggfuzz's stats file); None before it
    /// printed any.
    pub fn progress(self, scratch: &Path) -> Option<Progress> {
        let log = std::fs::read_to_string(scratch.join("fuzz.log")).ok()?;
        match self {
            Engine::LibFuzzer => libfuzzer::progress(&log),
            Engine::Honggfuzz => {
                let stats =
                    std::fs::read_to_string(honggfuzz::stats_file(scratch)).unwrap_or_default();
                honggfuzz::progress(&log, &stats)
            }
        }
    }

    /// The findings a slice's engine left in `dir` (its artifacts folder).
    pub fn artifacts(self, dir: &Path) -> Result<Vec<PathBuf>> {
        match self {
            Engine::LibFuzzer => libfuzzer::artifacts(dir),
            Engine::Honggfuzz => honggfuzz::artifacts(dir),
        }
    }

    /// Whether the engine's log `text` says it has run its corpus and is
    /// fuzzing: libFuzzer's `INITED` line, or `-fork`'s `starting to fuzz
    /// in` once its merge of the corpus is done. honggfuzz prints nothing
    /// a soak can rely on, so all of its run counts.
    pub fn past_seeds(self, text: &str) -> bool {
        match self {
            Engine::LibFuzzer => text.contains("INITED") || text.contains("starting to fuzz in"),
            Engine::Honggfuzz => true,
        }
    }

    /// What ended a run that was neither stopped nor killed: the kind of
    /// the finding its log reports, `crash` for a honggfuzz crash its log
    /// does not explain (a signal without a message), else `time`.
    pub fn outcome(self, log: &str, findings: u64) -> String {
        match (report::kind(log), self) {
            (Some(kind), _) => kind,
            (None, Engine::Honggfuzz) if findings > 0 => "crash".into(),
            (None, _) => "time".into(),
        }
    }
}
