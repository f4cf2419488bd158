//! What the harness inside a fuzz process is told through its
//! environment, whichever engine runs it: the files it reads and writes,
//! one variable each.

use std::path::PathBuf;
use std::process::Command;

/// The harness's files, each set as its variable when given.
#[derive(Clone, Debug, Default)]
pub struct HarnessFiles {
    /// A file of violation keys to get past (`ALLOCSOAK_TOLERATE`).
    pub tolerate: Option<PathBuf>,
    /// Where the engine keeps the inputs it ran last (`ALLOCSOAK_HISTORY`).
    pub history: Option<PathBuf>,
    /// Where violations that leave the heap sound are saved, so the
    /// process goes on past them (`ALLOCSOAK_FINDINGS`); without it the
    /// first one ends the run as a crash.
    pub findings: Option<PathBuf>,
    /// The folder where every process fuzzing the allocator claims the
    /// keys it saves (`ALLOCSOAK_CLAIMS`): one input per key in the soak.
    pub claims: Option<PathBuf>,
    /// Where each process counts its race sections (`ALLOCSOAK_TALLY`).
    pub tally: Option<PathBuf>,
}

impl HarnessFiles {
    /// Sets the variable of each file given on `cmd`.
    pub fn set(&self, cmd: &mut Command) {
        let files = [
            ("ALLOCSOAK_TOLERATE", &self.tolerate),
            ("ALLOCSOAK_HISTORY", &self.history),
            ("ALLOCSOAK_FINDINGS", &self.findings),
            ("ALLOCSOAK_CLAIMS", &self.claims),
            ("ALLOCSOAK_TALLY", &self.tally),
        ];
        for (var, file) in files {
            if let Some(f) = file {
                cmd.env(var, f);
            }
        }
    }
}
