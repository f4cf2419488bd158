//! The soak daemon: boot, workers, stop.
//!
//! [`run`] reads top to bottom: open the state dir and its store, register
//! the slots, build what the workers need first (with `--build`; the
//! [`build`] worker makes the rest beside the slices), check the fuzz
//! binaries, finish what a previous run left
//! (corpus generations, slice scratch, group folders), verify the known
//! crash groups on this build, then `jobs` workers
//! each loop draw a slot → run a slice → merge and file → reweigh, until
//! the deadline or SIGINT/SIGTERM. The main thread prints progress and
//! talks to systemd (`daemon_work.rs`).

use std::collections::HashSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use shadow::Target;

use crate::engines::project::{Build, Part, Project};
use crate::engines::Engine;
use crate::foundation::config::{Config, Series, Slot};
use crate::foundation::lock::lock;
use crate::foundation::notify::Notifier;
use crate::foundation::state::StateDir;
use crate::foundation::store::Store;

use crate::pipeline::intake;
use crate::rss;
use crate::running::corpus::Corpus;
use crate::running::scheduler::{self, Rng};
use crate::running::soak::{filing_grace, Soak};
use crate::running::unbuilt::Unbuilt;
use crate::running::{build, pending, slice, status, verify};

#[path = "daemon_work.rs"]
mod daemon_work;
use daemon_work::{work, Beside, Progress};

/// What a soak is asked to do.
pub struct Options {
    pub state: PathBuf,
    pub duration: Duration,
    pub jobs: usize,
    pub slots: Vec<Slot>,
    pub config: Config,
    /// Seconds per slice (default: the config's `slice_minutes`).
    pub slice_secs: Option<u64>,
    /// Seconds between progress prints.
    pub progress_secs: u64,
    /// Each slot runs one slice, in order, and the soak ends when all
    /// have (the quick gate); `duration` is then only a cap.
    pub once: bool,
    /// libFuzzer `-runs`, honggfuzz `--iterations`: each slice ends after this many inputs, or its
    /// seconds, whichever comes first.
    pub runs: Option<u64>,
    /// Build what the slots run ([`build`]): the first binary before the
    /// workers start, the rest beside the first slices.
    pub build: bool,
}

impl Soak {
    /// The next slot to run: in a soak that runs each slot once, the
    /// first that has not run (None when all have), else [`Soak::draw`]
    /// (None while no slot's parts are built).
    fn next(&self) -> Result<Option<i64>> {
        let Some(ran) = &self.ran else {
            return self.draw();
        };
        let mut ran = lock(ran);
        let next = self
            .slots
            .iter()
            .map(|(_, id)| *id)
            .find(|id| !ran.contains(id));
        if let Some(id) = next {
            ran.insert(id);
            lock(&self.busy).insert(id);
        }
        Ok(next)
    }

    /// Draws a slot by weight among those [`scheduler::drawable`]; None
    /// when none is (its parts are still being built).
    fn draw(&self) -> Result<Option<i64>> {
        let store = self.lock_store();
        let mut busy = lock(&self.busy);
        let mut candidates = Vec::new();
        for (slot, id) in &self.slots {
            let row = store.slot_by_id(*id)?;
            let slices = store.recent_slices(*id, scheduler::NEW_SLICES)?.len();
            candidates.push(scheduler::Candidate {
                id: *id,
                weight: scheduler::weight(slot.weight, row.weight, slices),
                ran: slices > 0,
                busy: busy.contains(id),
                built: self.unbuilt.ready(slot),
            });
        }
        let pool = scheduler::drawable(&candidates, self.unbuilt.building());
        let weights: Vec<f64> = pool.iter().map(|c| c.weight).collect();
        let roll = lock(&self.rng).roll();
        let Some(at) = scheduler::pick(&weights, roll) else {
            return Ok(None);
        };
        busy.insert(pool[at].id);
        Ok(Some(pool[at].id))
    }

    fn remaining(&self) -> Duration {
        self.deadline.saturating_duration_since(Instant::now())
    }

    /// The time left as the progress line shows it: to the deadline, but
    /// in a soak that runs each slot once (the quick gate), whose
    /// deadline is only a cap, a slice's time for the slices running now
    /// and for each round of the slots not yet started over its cores.
    fn shown_remaining(&self) -> Duration {
        let Some(ran) = &self.ran else {
            return self.remaining();
        };
        let rounds = self
            .slots
            .len()
            .saturating_sub(lock(ran).len())
            .div_ceil(self.cores.all());
        let left = Duration::from_secs((rounds as u64 + 1) * self.slice_secs);
        self.remaining().min(left)
    }

    /// Whether the soak's deadline passed more than `grace` ago.
    pub(crate) fn past_deadline(&self, grace: Duration) -> bool {
        Instant::now() > self.deadline + grace
    }

    /// Starts a slice of `slot_id` in the store and runs it (the store's
    /// lock is not held while it runs).
    fn run_slice(&self, slot_id: i64, secs: u64, cores: usize) -> Result<()> {
        let slice_id = self.lock_store().start_slice(slot_id, self.run_id)?;
        slice::run(self, slot_id, slice_id, secs, cores)
    }

    /// Runs slices until the deadline or a stop. A slice that fails (its
    /// engine does not start, its scratch cannot be written, the store
    /// refuses a row) is reported and the worker goes on after a pause
    /// that doubles while failures repeat: nothing one slice does ends the
    /// soak, and what it left is finished at the next start.
    fn worker(&self) {
        let mut backoff = FIRST_BACKOFF;
        loop {
            match self.next_slice() {
                Ok(true) => backoff = FIRST_BACKOFF,
                Ok(false) => return,
                Err(e) => {
                    eprintln!(
                        "allocsoak: a slice failed: {e:#}; the soak goes on in {} s",
                        backoff.as_secs()
                    );
                    self.pause(backoff);
                    backoff = (backoff * 2).min(LAST_BACKOFF);
                }
            }
        }
    }

    /// Draws a slot and runs one slice of it; false when the soak is over.
    fn next_slice(&self) -> Result<bool> {
        let secs = self.remaining().as_secs().min(self.slice_secs);
        if self.stop.load(Ordering::Relaxed) || secs < 2 {
            return Ok(false);
        }
        let Some(slot_id) = self.next()? else {
            // No slot's parts are built yet: wait for the builder (a soak
            // whose builds all failed has nothing to run).
            if self.ran.is_none() && self.unbuilt.building() {
                self.pause(Duration::from_secs(1));
                return Ok(true);
            }
            return Ok(false);
        };
        let Some(cores) = self.cores.take(self.slot_cores(slot_id), &self.stop) else {
            lock(&self.busy).remove(&slot_id);
            return Ok(false);
        };
        // Waiting for cores took some of the time left.
        let secs = self.remaining().as_secs().min(self.slice_secs);
        let result = match secs {
            0..=1 => Ok(()),
            _ => self.run_slice(slot_id, secs, cores),
        };
        self.cores.give(cores);
        lock(&self.busy).remove(&slot_id);
        result.map(|()| true)
    }

    /// Sleeps `how_long`, or until the soak stops or its deadline passes.
    fn pause(&self, how_long: Duration) {
        let until = Instant::now() + how_long;
        while Instant::now() < until
            && !self.stop.load(Ordering::Relaxed)
            && !self.remaining().is_zero()
        {
            std::thread::sleep(Duration::from_millis(250));
        }
    }

    /// Files what slices found ([`pending`]), oldest first, until filing
    /// closes, or, once the fuzz workers are `done`, nothing waits. The
    /// fuzz workers never wait for a filing.
    fn intake_worker(&self, done: &AtomicBool) {
        loop {
            let finished = done.load(Ordering::Relaxed);
            match pending::claim(self) {
                Ok(Some(id)) => pending::file(self, id),
                Ok(None) if finished || self.filing_closed() => return,
                Ok(None) => std::thread::sleep(Duration::from_millis(500)),
                Err(e) => {
                    eprintln!("allocsoak: the intake queue: {e:#}; it is read again in 10 s");
                    std::thread::sleep(Duration::from_secs(10));
                }
            }
        }
    }

    /// Watches one drift series until the soak ends. A watch that fails
    /// (its replay binary will not start, a narrowing replay dies, the
    /// store refuses a reading) is reported and started again after a
    /// pause that doubles while failures repeat: a drift worker never ends
    /// the soak.
    fn drift_worker(&self, watch: &rss::Watch, series: &crate::foundation::config::Series) {
        while !self.unbuilt.is_built(Part::Drift) {
            if watch.stop.load(Ordering::Relaxed) || !self.unbuilt.building() {
                return;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        let mut backoff = FIRST_BACKOFF;
        while !watch.stop.load(Ordering::Relaxed) {
            match rss::watch(watch, series) {
                Ok(()) => return,
                Err(e) => {
                    eprintln!(
                        "allocsoak: drift {}: {e:#}; its watch starts again in {} s",
                        series.label(),
                        backoff.as_secs()
                    );
                    let until = Instant::now() + backoff;
                    while Instant::now() < until && !watch.stop.load(Ordering::Relaxed) {
                        std::thread::sleep(Duration::from_millis(250));
                    }
                    backoff = (backoff * 2).min(LAST_BACKOFF);
                }
            }
        }
    }
}

/// The first pause after a worker failed; it doubles with each failure
/// in a row, up to [`LAST_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(10);
const LAST_BACKOFF: Duration = Duration::from_secs(600);

/// Serves every allocation of 1 MiB or more from its own mapping, given
/// back to the OS when freed. glibc raises that threshold to the largest
/// mapped block freed so far (up to 32 MiB), after which a slice's log
/// read whole at its end (megabytes, hours into a soak) comes from the
/// heap, which glibc keeps: the daemon's RSS grew in steps of 10-14 MiB as
/// logs grew (docs/benchmarks/2026-12-04-stop-67.md). Setting the
/// threshold fixes it.
fn keep_large_reads_mapped() {
    // SAFETY: `mallopt` only sets one of glibc's malloc parameters (under
    // its arena lock, so any thread may call it); it touches no memory of
    // ours.
    unsafe { libc::mallopt(libc::M_MMAP_THRESHOLD, 1 << 20) };
}

/// What a soak filed, for the summary.
pub struct Summary {
    pub new_groups: Vec<String>,
    pub run_id: i64,
}

/// Runs a soak to its end. `stop` is set by SIGINT/SIGTERM.
pub fn run(project: Project, options: Options, stop: Arc<AtomicBool>) -> Result<Summary> {
    keep_large_reads_mapped();
    let notifier = Notifier::from_env();
    let booted = boot(&project, &options)?;
    let (jobs, every) = (options.jobs, Duration::from_secs(options.progress_secs));
    let (soak, beside) = start(project, options, stop, booted)?;
    pending::recover(&soak.state)?;
    finish_leftover_slices(&soak)?;
    notifier.ready();

    let progress = Progress {
        notifier: &notifier,
        every,
        started: Instant::now(),
    };
    work(&soak, &beside, jobs, &progress);
    notifier.stopping();
    let store = soak.lock_store();
    store.end_run(soak.run_id)?;
    if let Ok(text) = status::render(
        &soak.state,
        &store,
        Some((progress.started.elapsed(), Duration::ZERO)),
        &soak.config.drift.trend(),
    ) {
        println!("{text}");
    }
    let new_groups = lock(&soak.new_groups).clone();
    Ok(Summary {
        new_groups,
        run_id: soak.run_id,
    })
}

/// What a soak's boot opened and found, for [`start`].
struct Booted {
    state: StateDir,
    store: Store,
    /// Each slot with its row's id.
    slots: Vec<(Slot, i64)>,
    unbuilt: Unbuilt,
    beside: Beside,
}

/// Boots a soak before anything runs: opens the state dir and its store,
/// registers the slots, builds what the workers need first (with
/// `--build`), checks the binaries, finishes what a previous run left
/// (corpus generations, claims, the intake) and verifies the known crash
/// groups on this build.
fn boot(project: &Project, options: &Options) -> Result<Booted> {
    let state = StateDir::open_for_soak(&options.state)?;
    let store = Store::open(&state.store())?;
    let mut slots = Vec::new();
    for slot in &options.slots {
        let row = store.slot(slot.target.name(), &slot.allocator, &slot.engine, 1.0)?;
        slots.push((slot.clone(), row.id));
    }
    let drift_series = options.config.drift_series(&options.slots)?;
    let later = match options.build {
        true => build_first(project, &state, &store, options, &drift_series)?,
        false => Vec::new(),
    };
    let unbuilt = Unbuilt::new(&later);
    check_binaries(project, &options.slots, &unbuilt)?;
    for target in Target::ALL {
        Corpus::new(&state, target).recover()?;
    }
    // The last soak's claims: what it saved waits in `pending/`, and the
    // new slices list those keys instead.
    if state.all_claims().exists() {
        crate::foundation::state::remove_scratch(&state.all_claims())?;
    }
    intake::refill_all(&state, &store)?;
    // Known groups first: a fix since the last soak is marked fixed (and
    // no longer tolerated), a fixed group that is back is regressed.
    for v in verify::verify(project, &state, &store, &options.config)? {
        if v.before != v.after {
            println!("verify {}: {} -> {}", v.id, v.before, v.after);
        }
    }
    if !drift_series.is_empty()
        && unbuilt.is_built(Part::Drift)
        && !project.drift_binary().is_file()
    {
        bail!(
            "the drift replay binary {} is missing; build it with `allocsoak build` (or set [drift] cpu_share = 0)",
            project.drift_binary().display()
        );
    }
    let drift_share = if drift_series.is_empty() {
        0.0
    } else {
        options.config.drift.cpu_share
    };
    let beside = Beside {
        drift: drift_series,
        drift_share,
        later,
    };
    Ok(Booted {
        state,
        store,
        slots,
        unbuilt,
        beside,
    })
}

/// Starts what was `booted` as a new run of the store: the soak its
/// workers share, and what the workers beside the fuzz workers are given.
fn start(
    project: Project,
    options: Options,
    stop: Arc<AtomicBool>,
    booted: Booted,
) -> Result<(Soak, Beside)> {
    let Booted {
        state,
        store,
        slots,
        unbuilt,
        beside,
    } = booted;
    let slice_secs = options
        .slice_secs
        .unwrap_or_else(|| default_slice_secs(&options))
        .max(1);
    let run_id = store.start_run(
        options.jobs,
        beside.drift_share,
        crate::foundation::store::now() + options.duration.as_secs() as i64,
    )?;
    let seed = crate::foundation::store::now() as u64 ^ (u64::from(std::process::id()) << 32);
    let soak = Soak {
        project,
        state,
        store: Mutex::new(store),
        config: options.config,
        stop,
        slots,
        busy: Mutex::new(HashSet::new()),
        cores: scheduler::Cores::new(options.jobs),
        ran: options.once.then(|| Mutex::new(HashSet::new())),
        runs: options.runs,
        merging: Target::ALL
            .into_iter()
            .map(|t| (t, Mutex::new(())))
            .collect(),
        rng: Mutex::new(Rng::new(seed)),
        new_groups: Mutex::new(Vec::new()),
        run_id,
        deadline: Instant::now() + options.duration,
        filing_until: (!options.once)
            .then(|| Instant::now() + options.duration + filing_grace(options.duration)),
        pending_claimed: Mutex::new(HashSet::new()),
        parking: Mutex::new(()),
        unfiled: Mutex::default(),
        slice_secs,
        unbuilt,
    };
    Ok((soak, beside))
}

/// The config's slice length, shortened for a soak too short to give
/// every slot one full slice (but not below 30 s: an engine needs a few
/// seconds to load its corpus).
fn default_slice_secs(options: &Options) -> u64 {
    let configured = (options.config.slice_minutes * 60.0).round() as u64;
    let share =
        options.duration.as_secs() * options.jobs.max(1) as u64 / options.slots.len().max(1) as u64;
    configured.min(share.max(30))
}

/// Every slot's fuzz binary must exist before the soak starts (the
/// libFuzzer build for every slot: findings are replayed on it; a
/// honggfuzz slot's own binary and driver too), but for what is still
/// `unbuilt` (the builder checks those), and a library allocator must
/// load in it ([`build::loads`]).
fn check_binaries(project: &Project, slots: &[Slot], unbuilt: &Unbuilt) -> Result<()> {
    for slot in slots.iter().filter(|s| unbuilt.ready(s)) {
        if slot.engine == Engine::Honggfuzz.name() {
            for file in [
                project.honggfuzz_driver(),
                project.honggfuzz_binary(slot.target),
            ] {
                if !file.is_file() {
                    bail!(
                        "honggfuzz binary {} is missing (slot {} runs honggfuzz); build it with `allocsoak build` (or `just build`)",
                        file.display(),
                        slot.label()
                    );
                }
            }
        }
        let build = Build::for_allocator(&slot.allocator);
        let binary = project.binary(build, slot.target);
        if !binary.is_file() {
            let flag = match build {
                Build::Asan => String::new(),
                _ => format!(" --allocator {}", slot.allocator),
            };
            bail!(
                "fuzz binary {} is missing; build it with `allocsoak build{flag}` (or `just build`)",
                binary.display()
            );
        }
        build::loads(project, slot)?;
    }
    Ok(())
}

/// `--build`'s first step, before anything else boots: what the workers
/// need first, built on every core with cargo's output shown. That is
/// the fuzz binary most slots run, or everything when the state dir
/// holds groups to verify or work a killed soak left (their replays may
/// need any binary), or when the soak has one job (a builder beside the
/// slices would hold its only core). Returns what is left to build.
fn build_first(
    project: &Project,
    state: &StateDir,
    store: &Store,
    options: &Options,
    drift: &[Series],
) -> Result<Vec<Part>> {
    let parts = build::parts(&options.slots, drift);
    let slices = state.slices();
    let interrupted = std::fs::read_dir(&slices)
        .with_context(|| format!("failed to read {}", slices.display()))?
        .next()
        .is_some();
    let everything = options.jobs <= 1
        || !store.groups()?.is_empty()
        || interrupted
        || pending::count(state) > 0;
    let first = if everything {
        parts.len()
    } else {
        1.min(parts.len())
    };
    build::now(project, &parts[..first])?;
    Ok(parts[first..].to_vec())
}

/// Finishes slices a kill interrupted: their new inputs are merged and
/// their artifacts filed before anything new runs.
fn finish_leftover_slices(soak: &Soak) -> Result<()> {
    let mut ids: Vec<i64> = std::fs::read_dir(soak.state.slices())
        .with_context(|| format!("failed to read {}", soak.state.slices().display()))?
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
        .collect();
    ids.sort();
    for id in ids {
        let scratch = soak.state.slice(id);
        if !scratch.join("slice.toml").is_file() {
            // Killed before it started: nothing in it yet.
            crate::foundation::state::remove_scratch(&scratch)?;
            continue;
        }
        // A slice that cannot be finished (its fuzz binary is gone, say)
        // keeps its scratch and does not stop the soak.
        if let Err(e) = slice::finish(soak, id, &scratch, None, false, 0) {
            eprintln!(
                "allocsoak: interrupted slice {} left as it is: {e:#}",
                scratch.display()
            );
        }
    }
    Ok(())
}
