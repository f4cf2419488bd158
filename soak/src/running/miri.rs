//! Miri passes in a soak (`[miri]` in the config): every `every_hours`
//! the pass takes one of the soak's cores, and for each slot whose
//! allocator is Rust code Miri runs, replays under Miri (`engines::miri`)
//! the smallest programs of the target's corpus no pass replayed before,
//! at most `most`; what Miri stops at is filed as a crash group
//! (`pipeline::intake::miri`), and the groups filed so are replayed again
//! first (a fixed one is marked so). When the last pass began and which inputs
//! each slot's passes replayed are kept in the state dir, so passes go on
//! across soaks. A pass cut by the soak's end leaves its unfinished
//! inputs for the next.

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use report::miri::Miri;
use shadow::Target;
use triage::budget::Budget;

use crate::engines::miri::{self, Outcome};
use crate::engines::Engine;
use crate::foundation::lock::lock;
use crate::foundation::state::{self, StateDir};
use crate::foundation::store::{self, SliceStats};
use crate::pipeline::intake::miri::{file, Finding};
use crate::running::soak::Soak;

/// Runs passes until the soak ends (`done`: its fuzz workers finished, or
/// it was stopped). A pass that fails is reported, and the next is tried
/// at its time: a pass never ends the soak.
pub(crate) fn worker(soak: &Soak, done: &AtomicBool) {
    let every = match soak.config.miri.on() {
        Ok(true) => Duration::from_secs_f64(soak.config.miri.every_hours * 3600.0),
        _ => return,
    };
    let slots = slots(soak);
    if slots.is_empty() {
        return;
    }
    if !miri::installed() {
        println!(
            "miri: not installed, so no Miri passes over {} slot(s) of Rust allocators; `just setup` installs it",
            slots.len()
        );
        return;
    }
    let over = || done.load(Ordering::Relaxed) || soak.stop.load(Ordering::Relaxed);
    loop {
        let wait = match next_pass(&soak.state, every) {
            Ok(wait) => wait,
            Err(e) => {
                eprintln!("allocsoak: miri: {e:#}; no Miri passes this soak");
                return;
            }
        };
        let until = Instant::now() + wait;
        while Instant::now() < until {
            if over() {
                return;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        let Some(core) = soak.cores.take(1, done) else {
            return;
        };
        if over() || Instant::now() >= soak.deadline {
            soak.cores.give(core);
            return;
        }
        let result = pass(soak, &slots);
        soak.cores.give(core);
        if let Err(e) = result {
            eprintln!("allocsoak: a Miri pass failed: {e:#}; the next is due in {every:?}");
        }
    }
}

/// The soak's slots Miri can run, each (target, allocator) once: a Rust
/// allocator's, of a target that does not run the C mimalloc beside it.
fn slots(soak: &Soak) -> Vec<(Target, String)> {
    let mut found: Vec<(Target, String)> = Vec::new();
    for (slot, _) in &soak.slots {
        let pair = (slot.target, slot.allocator.clone());
        if Engine::parse(&slot.engine).is_ok()
            && slot.target != Target::DiffMimalloc
            && miri::runs_under_miri(&soak.project, &slot.allocator)
            && !found.contains(&pair)
        {
            found.push(pair);
        }
    }
    found
}

/// How long until the next pass: `every` after the last began (after the
/// first soak on this state dir began, before any).
fn next_pass(state: &StateDir, every: Duration) -> Result<Duration> {
    let path = state.miri_last_pass();
    let last = match std::fs::read_to_string(&path) {
        Ok(text) => text
            .trim()
            .parse::<i64>()
            .with_context(|| format!("{} holds no time; remove it", path.display()))?,
        Err(_) => {
            let now = store::now();
            mark_pass(state, now)?;
            now
        }
    };
    let since = Duration::from_secs(store::now().saturating_sub(last).max(0) as u64);
    Ok(every.saturating_sub(since))
}

fn mark_pass(state: &StateDir, at: i64) -> Result<()> {
    let path = state.miri_last_pass();
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    state::write_atomic(&path, at.to_string().as_bytes())
}

/// One pass over `slots`, until the soak's deadline.
fn pass(soak: &Soak, slots: &[(Target, String)]) -> Result<()> {
    mark_pass(&soak.state, store::now())?;
    let budget = Budget {
        until: Some(soak.deadline),
        stop: Some(&soak.stop),
    };
    for (target, allocator) in slots {
        if budget.over() {
            break;
        }
        recheck(soak, *target, allocator, &budget)?;
        slot_pass(soak, *target, allocator, &budget)?;
    }
    Ok(())
}

/// Replays the slot's `most` smallest unreplayed corpus programs under
/// Miri, files what stops it, and records them as replayed. The store
/// keeps it as a slice of the slot's `miri` row (its programs as execs):
/// the status table's `(miri)` row counts the passes, the programs a
/// second and what they found.
fn slot_pass(soak: &Soak, target: Target, allocator: &str, budget: &Budget) -> Result<()> {
    let list = soak.state.miri_replayed(target, allocator);
    let mut replayed = read_replayed(&list);
    let chosen = unreplayed(&soak.state.corpus(target), &replayed, soak.config.miri.most)?;
    if chosen.is_empty() {
        return Ok(());
    }
    let inputs = copied(&soak.state, &chosen)?;
    let slice = {
        let store = soak.lock_store();
        let slot = store.slot(target.name(), allocator, "miri", 1.0)?;
        store.start_slice(slot.id, soak.run_id)?
    };
    let started = Instant::now();
    let result = miri::run(
        &soak.project,
        replay(soak, target, allocator),
        &inputs,
        budget,
    )
    .and_then(|outcomes| {
        let counts = file_all(soak, target, allocator, &outcomes, budget)?;
        Ok((outcomes, counts))
    });
    let (ran, found) = match &result {
        Ok((outcomes, (findings, _))) => (outcomes.len(), *findings),
        Err(_) => (0, 0),
    };
    let stats = SliceStats {
        fuzz_secs: started.elapsed().as_secs_f64(),
        execs: ran as u64,
        findings: found as u64,
        outcome: "miri".into(),
        ..Default::default()
    };
    soak.lock_store().end_slice(slice, &stats)?;
    let (outcomes, (findings, past)) = result?;
    for (input, _) in &outcomes {
        if let Some(name) = input.file_name() {
            replayed.insert(name.to_string_lossy().into_owned());
        }
    }
    let text: String = replayed.iter().map(|n| format!("{n}\n")).collect();
    state::write_atomic(&list, text.as_bytes())?;
    println!(
        "miri {target}/{allocator}: {ran} of {} programs replayed in {} s, {findings} stopped Miri, {past} past what Miri runs",
        inputs.len(),
        started.elapsed().as_secs()
    );
    Ok(())
}

/// Files each finding of `outcomes` (a new group's program minimized
/// within `budget`); how many there were, and how many programs stopped
/// where Miri cannot follow.
fn file_all(
    soak: &Soak,
    target: Target,
    allocator: &str,
    outcomes: &[(PathBuf, Outcome)],
    budget: &Budget,
) -> Result<(usize, usize)> {
    let (mut findings, mut past) = (0, 0);
    for (input, outcome) in outcomes {
        match outcome {
            Outcome::Clean => {}
            Outcome::Stopped {
                miri: Miri::Unsupported(_),
                ..
            } => past += 1,
            Outcome::Stopped {
                miri: Miri::Finding(sig),
                log,
            } => {
                findings += 1;
                let finding = Finding {
                    target,
                    allocator,
                    input,
                    sig,
                    log,
                    config: &soak.config.path,
                    borrows: soak.config.miri.borrows,
                };
                let filed = file(&soak.state, &soak.store, &finding, (&soak.project, budget))?;
                if filed.new {
                    lock(&soak.new_groups).push(filed.group_id);
                }
            }
        }
    }
    Ok((findings, past))
}

/// Replays the slot's Miri groups under Miri, as a soak's boot verifies
/// the others natively: one Miri no longer stops at is `fixed`, a fixed
/// one it stops at again `regressed`.
fn recheck(soak: &Soak, target: Target, allocator: &str, budget: &Budget) -> Result<()> {
    let groups: Vec<store::GroupRow> = {
        let store = soak.lock_store();
        let slot = store.slot(target.name(), allocator, "miri", 1.0)?;
        store
            .groups()?
            .into_iter()
            .filter(|g| g.slot_id == slot.id)
            .collect()
    };
    if groups.is_empty() {
        return Ok(());
    }
    let mut inputs = Vec::with_capacity(groups.len());
    for g in &groups {
        inputs.push(std::path::absolute(
            soak.state.crash_group(&g.id).join("original"),
        )?);
    }
    let outcomes = miri::run(
        &soak.project,
        replay(soak, target, allocator),
        &inputs,
        budget,
    )?;
    for (g, (_, outcome)) in groups.iter().zip(&outcomes) {
        let shown =
            matches!(outcome, Outcome::Stopped { miri: Miri::Finding(sig), .. } if g.shown_by(sig));
        let status = match (shown, g.status.as_str()) {
            (false, _) => "fixed",
            (true, "fixed") => "regressed",
            (true, status) => status,
        };
        if status != g.status {
            println!("miri: {} {} -> {status}", g.id, g.status);
            let store = soak.lock_store();
            store.set_status(&g.id, status)?;
            if let Some(row) = store.group(&g.id)? {
                crate::pipeline::page::write_report(&soak.state, &store, &row)?;
            }
        }
    }
    Ok(())
}

fn read_replayed(list: &std::path::Path) -> BTreeSet<String> {
    std::fs::read_to_string(list)
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Copies of `inputs` in `miri/inputs/` (emptied first), under their
/// names: a merge may remove the corpus generation they are in while Miri
/// runs.
fn copied(state: &StateDir, inputs: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let dir = state.miri_inputs();
    if dir.exists() {
        state::remove_scratch(&dir)?;
    }
    std::fs::create_dir_all(&dir).with_context(|| format!("failed to create {}", dir.display()))?;
    let mut copies = Vec::with_capacity(inputs.len());
    for input in inputs {
        // Absolute: the replay runs in the fuzz package's folder.
        let to =
            std::path::absolute(dir.join(input.file_name().context("an input without a name")?))?;
        std::fs::copy(input, &to)
            .with_context(|| format!("failed to copy {} to {}", input.display(), to.display()))?;
        copies.push(to);
    }
    Ok(copies)
}

/// The `most` smallest inputs of `corpus` not in `replayed`.
fn unreplayed(
    corpus: &std::path::Path,
    replayed: &BTreeSet<String>,
    most: usize,
) -> Result<Vec<PathBuf>> {
    let Ok(entries) = std::fs::read_dir(corpus) else {
        return Ok(Vec::new());
    };
    let fresh: Vec<PathBuf> = entries
        .flatten()
        .map(|e| e.path())
        .filter(|p| {
            p.file_name()
                .is_some_and(|n| !replayed.contains(n.to_string_lossy().as_ref()))
        })
        .collect();
    miri::smallest(&fresh, most)
}

/// A slot's replay, under the config's aliasing model.
fn replay<'a>(soak: &Soak, target: Target, allocator: &'a str) -> miri::Replay<'a> {
    miri::Replay {
        allocator,
        target,
        borrows: soak.config.miri.borrows,
    }
}
