//! The quick gate (`allocsoak quick`): every slot runs one slice, through
//! the soak's own pipeline (intake, signatures, minimization, groups), in
//! a fresh state dir of its own; the gate fails on a new finding or a
//! fixed group that is back.
//!
//! Known groups ([`known`]) are taken in first, so they are verified (a
//! fixed one is reported fixed) and tolerated (they don't hide new bugs).
//! A persistent corpus (`--corpus DIR`, `DIR/<target>/`) is read, and what
//! the pass added is saved back when asked ([`corpus`]).

mod corpus;
pub mod known;
pub mod report;

use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};

use crate::engines::project::Project;
use crate::foundation::config::{Config, Slot};
use crate::foundation::state::StateDir;
use crate::foundation::store::{GroupRow, SliceStats, SlotRow, Store};
use crate::pipeline::groups::Group;
use crate::running::daemon;

/// What the gate is asked to do.
pub struct Options {
    /// Where run folders go: each run gets `<out>/run-<unix time>`, and
    /// `<out>/latest` points to the newest.
    pub out: PathBuf,
    pub slots: Vec<Slot>,
    pub config: Config,
    /// Seconds per slot.
    pub secs: u64,
    /// Inputs per slot (libFuzzer `-runs`), whichever ends first.
    pub runs: Option<u64>,
    pub jobs: usize,
    /// A state dir or known-groups file.
    pub known: Option<PathBuf>,
    /// A persistent corpus, `<dir>/<target>/`.
    pub corpus: Option<PathBuf>,
    /// Save the pass's new inputs back into `corpus`.
    pub save_corpus: bool,
}

/// What the gate makes of one group in its state dir.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Filed by this pass and not known: fails the gate.
    New,
    /// Known fixed, and it reproduced again: fails the gate.
    Regressed,
    /// Known and still reproducing (or flaky); `seen` when this pass hit
    /// it (filed it again, or got past it).
    Known { seen: bool },
    /// Known open, and it no longer reproduces.
    Fixed,
    /// Known fixed, and still fixed.
    StillFixed,
}

impl Verdict {
    pub fn fails(self) -> bool {
        matches!(self, Verdict::New | Verdict::Regressed)
    }
}

/// One group and what it means for the gate.
pub struct Finding {
    pub group: Group,
    pub verdict: Verdict,
}

impl Finding {
    /// The op program with the failing op marked, when intake wrote it.
    pub fn program(&self) -> Option<String> {
        std::fs::read_to_string(self.group.dir.join("program.txt")).ok()
    }
}

/// One slot's slice.
pub struct SlotRun {
    pub slot: SlotRow,
    pub stats: SliceStats,
}

/// The gate's result.
pub struct Outcome {
    /// The run's state dir.
    pub dir: PathBuf,
    pub secs_per_slot: u64,
    pub runs: Option<u64>,
    pub elapsed: Duration,
    /// The slots asked for, and those that ran their slice.
    pub planned: usize,
    pub slots: Vec<SlotRun>,
    pub findings: Vec<Finding>,
    /// Inputs saved back to the persistent corpus.
    pub saved_inputs: usize,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        !self.interrupted() && !self.findings.iter().any(|f| f.verdict.fails())
    }

    /// Some slots did not run (the gate was stopped): it cannot pass.
    pub fn interrupted(&self) -> bool {
        self.slots.len() < self.planned
    }
}

/// Runs the gate. `stop` is set by SIGINT/SIGTERM.
pub fn run(project: Project, options: Options, stop: Arc<AtomicBool>) -> Result<Outcome> {
    let started = Instant::now();
    let dir = run_dir(&options.out)?;
    let known_before = take_in(&dir, &options)?;
    let cap = options.secs * options.slots.len() as u64 + 3600;
    let summary = daemon::run(
        project,
        daemon::Options {
            state: dir.clone(),
            duration: Duration::from_secs(cap),
            jobs: options.jobs,
            slots: options.slots.clone(),
            config: options.config,
            slice_secs: Some(options.secs),
            progress_secs: 60,
            once: true,
            runs: options.runs,
            build: false,
        },
        stop,
    )?;
    let state = StateDir::open_to_read(&dir)?;
    let store = Store::open(&state.store())?;
    let saved_inputs = match (&options.corpus, options.save_corpus) {
        (Some(c), true) => corpus::save_back(c, &state, &options.slots)?,
        _ => 0,
    };
    let findings = findings(&state, &store, &known_before, summary.run_id)?;
    let slots = slot_runs(&store, summary.run_id)?;
    Ok(Outcome {
        dir,
        secs_per_slot: options.secs,
        runs: options.runs,
        elapsed: started.elapsed(),
        planned: options.slots.len(),
        slots,
        findings,
        saved_inputs,
    })
}

/// Takes the known groups and the persistent corpus `options` name into
/// the run's state dir `dir`; returns its groups before the run.
fn take_in(dir: &Path, options: &Options) -> Result<Vec<GroupRow>> {
    let state = StateDir::open_for_soak(dir)?;
    let store = Store::open(&state.store())?;
    if let Some(known) = &options.known {
        let n = known::import(known, &state, &store)?;
        println!("quick: {n} known groups from {}", known.display());
    }
    if let Some(c) = &options.corpus {
        let n = corpus::take_in(c, &state, &options.slots)?;
        println!("quick: {n} corpus inputs from {}", c.display());
    }
    store.groups()
}

/// Every group of the state dir after run `run_id`, with what it means
/// for the gate against `known_before`, its groups before the run: new
/// ones first, then regressed, known, fixed.
fn findings(
    state: &StateDir,
    store: &Store,
    known_before: &[GroupRow],
    run_id: i64,
) -> Result<Vec<Finding>> {
    let mut findings = Vec::new();
    for group in store.groups()? {
        let before = known_before.iter().find(|g| g.id == group.id);
        let verdict = match before {
            None => Verdict::New,
            Some(_) if group.status == "regressed" => Verdict::Regressed,
            Some(b) if group.status == "fixed" && b.status == "fixed" => Verdict::StillFixed,
            Some(_) if group.status == "fixed" => Verdict::Fixed,
            Some(b) => Verdict::Known {
                seen: group.count > b.count || store.tolerated_in_run(&group.id, run_id)? > 0,
            },
        };
        findings.push(Finding {
            group: Group::load(state, store, group)?,
            verdict,
        });
    }
    findings.sort_by_key(|f| match f.verdict {
        Verdict::New => 0,
        Verdict::Regressed => 1,
        Verdict::Known { .. } => 2,
        Verdict::Fixed => 3,
        Verdict::StillFixed => 4,
    });
    Ok(findings)
}

/// Each slot with the one slice run `run_id` gave it (none when the run
/// was stopped).
fn slot_runs(store: &Store, run_id: i64) -> Result<Vec<SlotRun>> {
    let mut slots = Vec::new();
    for slot in store.slots()? {
        if let Some(s) = store.run_slice(slot.id, run_id)? {
            slots.push(SlotRun { slot, stats: s });
        }
    }
    Ok(slots)
}

/// A new run folder under `out`, and `out/latest` pointing to it.
fn run_dir(out: &Path) -> Result<PathBuf> {
    std::fs::create_dir_all(out)
        .with_context(|| format!("failed to create {}; pass a writable --out", out.display()))?;
    let stamp = crate::foundation::store::now();
    let mut dir = out.join(format!("run-{stamp}"));
    if dir.exists() {
        dir = out.join(format!("run-{stamp}-{}", std::process::id()));
    }
    let name = dir.file_name().expect("run dir has a name");
    crate::foundation::state::symlink_atomic(name, &out.join("latest"))?;
    Ok(dir)
}
