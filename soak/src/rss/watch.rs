//! What the drift workers share with the soak, and how a series' replay
//! process is started.

use std::path::PathBuf;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;

use triage::budget::Budget;

use crate::engines::project::Project;
use crate::foundation::config::{Config, Series};
use crate::foundation::lock::lock;
use crate::foundation::state::StateDir;
use crate::foundation::store::Store;

/// The exit status of a replay process over its RSS limit (the `drift`
/// binary's `OVER_RSS_LIMIT`).
pub(super) const OVER_RSS_LIMIT: i32 = 3;
/// What the drift workers share with the soak.
pub struct Watch<'a> {
    pub project: &'a Project,
    pub state: &'a StateDir,
    pub store: &'a Mutex<Store>,
    pub config: &'a Config,
    pub stop: &'a AtomicBool,
    pub run_id: Option<i64>,
    /// The share of one core each series' process may use.
    pub share: f64,
    /// The ids of the groups filed, for the soak's summary.
    pub filed: &'a Mutex<Vec<String>>,
    /// What filing a violation a replay hit may spend: the soak's filing
    /// time.
    pub filing: Budget<'a>,
}

impl Watch<'_> {
    pub fn lock_store(&self) -> std::sync::MutexGuard<'_, Store> {
        lock(self.store)
    }

    /// What a series replays: its trace, or the target's persistent
    /// corpus and its seeds.
    pub fn inputs(&self, series: &Series) -> Vec<PathBuf> {
        match &series.trace {
            Some(trace) => vec![trace.clone()],
            None => vec![
                self.state.corpus(series.target),
                self.project.seeds(series.target),
            ],
        }
    }

    /// The replay command for `inputs`, its CPU share and RSS limit set.
    pub fn command(&self, series: &Series, inputs: &[PathBuf], share: f64) -> Command {
        let mut cmd = Command::new(self.project.drift_binary());
        cmd.arg("--allocator").arg(&series.allocator);
        match series.trace {
            Some(_) => cmd.arg("--trace"),
            None => cmd.arg("--target").arg(series.target.name()),
        };
        cmd.arg(format!("--cpu-share={share}"))
            .arg(format!("--rss-limit-mb={}", self.config.drift.rss_limit_mb))
            .args(inputs);
        cmd
    }

    pub(super) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }
}
