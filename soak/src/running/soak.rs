//! The running soak: what its workers share (the project, the state dir
//! and its store, the config, the stop flag, the slots and their locks).
//! The daemon (`running/daemon.rs`) makes it and schedules on it; a slice
//! (`running/slice/`) runs and files through it. It stands below them all.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use anyhow::Result;
use shadow::Target;

use crate::engines::project::Project;
use crate::foundation::config::{Config, Slot};
use crate::foundation::lock::lock;
use crate::foundation::state::StateDir;
use crate::foundation::store::{SlotRow, Store};
use crate::pipeline::intake::Filed;
use crate::running::scheduler::{self, Rng};
use triage::budget::Budget;

/// The running soak, shared by its workers.
pub struct Soak {
    pub project: Project,
    pub state: StateDir,
    pub store: Mutex<Store>,
    pub config: Config,
    pub stop: Arc<AtomicBool>,
    pub(crate) slots: Vec<(Slot, i64)>,
    pub(crate) busy: Mutex<HashSet<i64>>,
    pub(crate) cores: scheduler::Cores,
    /// Slots that ran a slice, in a soak that runs each once.
    pub(crate) ran: Option<Mutex<HashSet<i64>>>,
    pub runs: Option<u64>,
    pub(crate) merging: HashMap<Target, Mutex<()>>,
    pub(crate) rng: Mutex<Rng>,
    pub(crate) new_groups: Mutex<Vec<String>>,
    pub(crate) run_id: i64,
    pub(crate) deadline: Instant,
    /// When filings stop and what is left waits in `pending/` for the next
    /// soak: a little past the deadline (see [`filing_grace`]); `None` in a
    /// soak that runs each slot once, which files everything it found.
    pub(crate) filing_until: Option<Instant>,
    /// The pending folders a worker is filing now.
    pub(crate) pending_claimed: Mutex<HashSet<i64>>,
    /// Held while inputs are parked into a pending folder, and while a
    /// filed folder is found empty and removed (`pending::park_in`).
    pub(crate) parking: Mutex<()>,
    /// Per allocator, what ended its slices this soak: its next slices
    /// get past them while their crashes wait to be filed, as they would
    /// once filed.
    pub(crate) unfiled: Mutex<HashMap<String, BTreeSet<report::Ending>>>,
    pub(crate) slice_secs: u64,
    /// What `--build` still builds beside the slices (`running/build.rs`).
    pub(crate) unbuilt: crate::running::unbuilt::Unbuilt,
}

/// How long after its deadline a soak still files what its last slices
/// found: 30 s, and 1 % of a long soak's duration. Together with the merge
/// and the filing in flight, a soak ends within a minute (or 2 %) of its
/// duration.
pub fn filing_grace(duration: Duration) -> Duration {
    Duration::from_secs(30) + duration / 100
}

impl Soak {
    pub fn lock_store(&self) -> MutexGuard<'_, Store> {
        lock(&self.store)
    }

    pub fn slot(&self, id: i64) -> Result<SlotRow> {
        self.lock_store().slot_by_id(id)
    }

    /// The cores a slot's slice spreads over (its `cores`, 1 for a slot
    /// this soak was not given).
    pub fn slot_cores(&self, id: i64) -> usize {
        self.slots
            .iter()
            .find(|(_, i)| *i == id)
            .map_or(1, |(s, _)| s.cores)
    }

    /// Held while a target's corpus is merged or pruned.
    pub fn merge_lock(&self, target: Target) -> MutexGuard<'_, ()> {
        lock(&self.merging[&target])
    }

    /// Whether filing has closed: the soak was asked to stop, or its
    /// filing time is over. Artifacts not filed by then are parked in
    /// `pending/` (`running/pending.rs`).
    pub fn filing_closed(&self) -> bool {
        self.stop.load(Ordering::Relaxed) || self.filing_until.is_some_and(|t| Instant::now() >= t)
    }

    /// What a filing may spend: until filing closes.
    pub fn budget(&self) -> Budget<'_> {
        Budget {
            until: self.filing_until,
            stop: Some(&self.stop),
        }
    }

    /// What ended `allocator`'s slices this soak.
    pub fn unfiled(&self, allocator: &str) -> BTreeSet<report::Ending> {
        let unfiled = lock(&self.unfiled);
        unfiled.get(allocator).cloned().unwrap_or_default()
    }

    /// Adds `endings`, what ended a slice of `allocator`.
    pub fn add_unfiled(&self, allocator: &str, endings: impl IntoIterator<Item = report::Ending>) {
        let mut unfiled = lock(&self.unfiled);
        unfiled
            .entry(allocator.to_string())
            .or_default()
            .extend(endings);
    }

    pub fn filed(&self, f: &Filed) {
        lock(&self.new_groups).push(f.group_id.clone());
    }

    /// Whether a target's corpus is due a prune: `prune_hours` after the
    /// last one, or after its first merge.
    pub fn prune_due(&self, target: Target) -> Result<bool> {
        let since = self.lock_store().last_prune(target.name())?;
        let hours = self.config.prune_hours;
        Ok(since.is_some_and(|t| (crate::foundation::store::now() - t) as f64 >= hours * 3600.0))
    }
}
