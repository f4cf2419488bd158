//! The config's `[drift]` table: the soak's RSS drift workers, and the
//! series they run.

use std::path::PathBuf;

use serde::Deserialize;
use shadow::Target;

/// The soak's RSS drift workers: one replay process per allocator ×
/// workload, sampled into the store (by the `rss` room's workers).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DriftConfig {
    /// Allocators watched (default: those of the soak's slots the drift
    /// build runs: not `dylib:`, declared or a mimalloc flavor).
    pub allocators: Option<Vec<String>>,
    /// Workloads: the targets whose corpus and seeds are replayed
    /// (default: alloc_ops; diff_mimalloc cannot be one).
    #[serde(default = "alloc_ops")]
    pub targets: Vec<String>,
    /// Recorded traces (`allocsoak trace record`), each replayed whole,
    /// over and over, as a series per allocator (paths relative to the
    /// config's folder).
    #[serde(default)]
    pub traces: Vec<PathBuf>,
    /// The share of one core all drift workers use together; 0 (the
    /// default) runs none.
    #[serde(default)]
    pub cpu_share: f64,
    /// Seconds between readings (default 10).
    #[serde(default = "ten_f")]
    pub interval_secs: f64,
    /// The alarm line, bytes per 1,000 ops (default 32; see
    /// `drift::TrendConfig::threshold`).
    #[serde(default = "threshold")]
    pub threshold: f64,
    /// Ops at the start of each replay process left out of the fit, as
    /// caches fill (default 1,000,000; see `drift::TrendConfig::warmup_ops`).
    #[serde(default = "million")]
    pub warmup_ops: u64,
    /// The fewest ops after warm-up for a verdict (default 1,000,000).
    #[serde(default = "million")]
    pub min_ops: u64,
    /// The least growth within one replay process, KiB, that drifts
    /// (default 512; see `drift::TrendConfig::min_growth_bytes`).
    #[serde(default = "min_growth_kib")]
    pub min_growth_kib: f64,
    /// Minutes after which a replay process is replaced by a new one (a
    /// new segment) that takes in what the corpus gained (default 360): a
    /// process replays the programs there were when it started. Long,
    /// because a leak shows within one process: at the default share a
    /// series does a few hundred ops a second, and a 64 B/kop leak needs
    /// about 9 million ops to outgrow `min_growth_kib`.
    #[serde(default = "six_hours")]
    pub refresh_minutes: f64,
    /// Resident MiB at which a replay process stops and its series is
    /// filed as drifting whatever the fit says (default 1024).
    #[serde(default = "rss_limit")]
    pub rss_limit_mb: u64,
    /// Ops each replay of a subset gets while a drift finding's culprit
    /// programs are narrowed down, and `allocsoak repro` replays them
    /// (default 300,000; a series that counts calls gets
    /// [`CALLS_PER_OP`] times as many, [`DriftConfig::replay_ops`]).
    #[serde(default = "narrow_ops")]
    pub narrow_ops: u64,
    /// Seconds narrowing may take at most (default 1800).
    #[serde(default = "narrow_secs")]
    pub narrow_secs: u64,
}

/// About the calls one op of an op program makes (an `alloc_ops`
/// program's, bulk ops aside). A `workload` or trace series counts calls,
/// so its replays get this many more to read as many points.
pub const CALLS_PER_OP: u64 = 32;

impl DriftConfig {
    /// Ops a replay of the series of `target` (a target's name or a trace
    /// slot) gets while narrowing or reproducing: `narrow_ops`, as calls
    /// where the series counts calls.
    pub fn replay_ops(&self, target: &str) -> u64 {
        let calls = target == Target::Workload.name() || target.starts_with(TRACE_SLOT);
        match calls {
            true => self.narrow_ops.saturating_mul(CALLS_PER_OP),
            false => self.narrow_ops,
        }
    }

    /// The rules a series' fit decides by.
    pub fn trend(&self) -> drift::TrendConfig {
        drift::TrendConfig {
            threshold: self.threshold,
            warmup_ops: self.warmup_ops,
            min_ops: self.min_ops,
            min_growth_bytes: self.min_growth_kib * 1024.0,
            ..drift::TrendConfig::default()
        }
    }
}

impl Default for DriftConfig {
    fn default() -> DriftConfig {
        toml::from_str("").expect("every key has a default")
    }
}

fn alloc_ops() -> Vec<String> {
    vec!["alloc_ops".into()]
}
fn min_growth_kib() -> f64 {
    512.0
}
fn ten_f() -> f64 {
    10.0
}
fn threshold() -> f64 {
    32.0
}
fn six_hours() -> f64 {
    360.0
}
fn million() -> u64 {
    1_000_000
}
fn rss_limit() -> u64 {
    1024
}
fn narrow_ops() -> u64 {
    300_000
}
fn narrow_secs() -> u64 {
    1800
}

/// How a trace series' slot name starts (`trace:<file name>`).
pub const TRACE_SLOT: &str = "trace:";

/// One drift series to run: a workload (a target's programs, or a
/// recorded trace) and an allocator.
#[derive(Clone, Debug, PartialEq)]
pub struct Series {
    /// The target whose programs are replayed; for a trace, `workload`
    /// (whose executor replays it, and whose fuzz binary files what it
    /// finds).
    pub target: Target,
    pub allocator: String,
    /// The trace replayed instead of the target's programs.
    pub trace: Option<PathBuf>,
}

impl Series {
    /// What it replays, as its slot in the store names it: the target, or
    /// `trace:<file name>`.
    pub fn work(&self) -> String {
        match &self.trace {
            Some(path) => format!(
                "{TRACE_SLOT}{}",
                path.file_name().unwrap_or_default().to_string_lossy()
            ),
            None => self.target.name().to_string(),
        }
    }

    pub fn label(&self) -> String {
        format!("{}/{}", self.work(), self.allocator)
    }
}
