//! The fuzz engines a slot can run, and what the soak reads back from
//! each in the same terms: a slice's progress, its findings, what ended
//! it. Both engines run the same target code; a finding of either is
//! replayed, signed and minimized on the libFuzzer ASan build
//! ([`crate::pipeline::intake`]), so one bug is one group whichever engine found it.

pub mod honggfuzz;
pub mod instrumentation;
pub mod libfuzzer;
pub mod project;
pub mod provenance;

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};

use crate::engines::libfuzzer::Progress;

/// A fuzz engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// libFuzzer through cargo-fuzz, with ASan: the default.
    LibFuzzer,
    /// honggfuzz through honggfuzz-rs, persistent mode, no sanitizer.
    Honggfuzz,
}

impl Engine {
    pub const ALL: [Engine; 2] = [Engine::LibFuzzer, Engine::Honggfuzz];

    /// The name a config and the store use.
    pub fn name(self) -> &'static str {
        match self {
            Engine::LibFuzzer => "libfuzzer",
            Engine::Honggfuzz => "honggfuzz",
        }
    }

    /// The engine of a name; `Err` is a one-line message naming the known ones.
    pub fn parse(name: &str) -> Result<Engine> {
        match Engine::ALL.into_iter().find(|e| e.name() == name) {
            Some(e) => Ok(e),
            None => {
                let names: Vec<&str> = Engine::ALL.iter().map(|e| e.name()).collect();
                bail!("unknown engine `{name}`; use one of: {}", names.join(", "))
            }
        }
    }

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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_a_bad_one_says_what_is_known() {
        for e in Engine::ALL {
            assert_eq!(Engine::parse(e.name()).unwrap(), e);
        }
        let e = Engine::parse("afl").unwrap_err().to_string();
        assert_eq!(e, "unknown engine `afl`; use one of: libfuzzer, honggfuzz");
    }
}
