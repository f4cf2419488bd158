//! The engines room: what builds and runs the fuzz targets. The project
//! layout and its builds ([`project`]), the fuzz engines a slot can run
//! ([`libfuzzer`], [`honggfuzz`]), Miri's replay of a Rust allocator's
//! programs ([`miri`]), and proof of what a build holds
//! ([`instrumentation`], [`provenance`]). It stands on the foundation
//! only; what an engine run found flows up from here into the crash
//! pipeline.
//!
//! The engines a slot can run are read back here in the same terms: a
//! slice's progress, its findings, what ended it. Both engines run the
//! same target code; a finding of either is replayed, signed and
//! minimized on the libFuzzer ASan build (by the pipeline's intake), so
//! one bug is one group whichever engine found it.

pub mod harness;
pub mod honggfuzz;
pub mod instrumentation;
pub mod libfuzzer;
pub mod miri;
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
        let log = end_of_log(&scratch.join("fuzz.log"))?;
        match self {
            Engine::LibFuzzer => libfuzzer::progress(&log),
            Engine::Honggfuzz => {
                let stats = end_of_log(&honggfuzz::stats_file(scratch)).unwrap_or_default();
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

/// The last [`TAIL_BYTES`] of a log (all of a shorter one), from the first
/// whole line in them: what a progress line is read from. A slice's log
/// grows to megabytes over hours; the daemon and `status` read a live
/// slice's progress every few seconds.
fn end_of_log(path: &Path) -> Option<String> {
    use std::io::{Read, Seek, SeekFrom};
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let from = len.saturating_sub(TAIL_BYTES);
    file.seek(SeekFrom::Start(from)).ok()?;
    let mut bytes = Vec::with_capacity((len - from) as usize);
    file.read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    Some(match from {
        0 => text.into_owned(),
        _ => text
            .split_once('\n')
            .map_or("", |(_, rest)| rest)
            .to_string(),
    })
}

/// Bytes of a log [`end_of_log`] reads: hundreds of libFuzzer progress lines
/// (`running::slice`'s `LogTail` instead follows a log as it grows).
const TAIL_BYTES: u64 = 64 << 10;

#[cfg(test)]
mod tests {
    use super::*;

    /// A log far longer than the tail: its last progress line is read,
    /// and a line the tail cuts into is dropped, not misread.
    #[test]
    fn progress_is_read_from_the_tail_of_a_long_log() {
        let dir = tempfile::tempdir().unwrap();
        let mut log = String::new();
        for i in 0..20_000u64 {
            log.push_str(&format!(
                "#{i}\tNEW    cov: {} ft: 9 corp: 3/1Kb exec/s: 7 rss: 40Mb\n",
                100 + i
            ));
        }
        assert!(log.len() as u64 > 4 * TAIL_BYTES);
        std::fs::write(dir.path().join("fuzz.log"), &log).unwrap();
        let p = Engine::LibFuzzer.progress(dir.path()).unwrap();
        assert_eq!((p.execs, p.cov), (19_999, 20_099));
        let tail = end_of_log(&dir.path().join("fuzz.log")).unwrap();
        assert!(
            tail.len() as u64 <= TAIL_BYTES && tail.starts_with('#'),
            "{}",
            &tail[..40]
        );
    }
}
