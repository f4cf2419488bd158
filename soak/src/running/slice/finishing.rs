//! The stages of a slice's [`finish`](super::finish): its new inputs
//! merged into its target's corpus ([`merge_new`]), the crash inputs it
//! left ([`artifacts`]), its numbers ([`slice_stats`]) recorded in the
//! store ([`record_slice`]), and its log kept ([`keep_log`]).

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};

use anyhow::Result;

use super::lost::{lost_in_children, lost_input};
use crate::engines::libfuzzer;
use crate::engines::Engine;
use crate::foundation::store::SliceStats;
use crate::running::corpus::{Corpus, MergeRun};
use crate::running::pending::SliceFile;
use crate::running::scheduler::{self, Yield};
use crate::running::soak::Soak;

/// What merging a slice's new inputs did.
#[derive(Default)]
pub(super) struct Merge {
    /// The inputs that joined the corpus.
    pub merged_units: u64,
    /// What went wrong: the slice's scratch is kept for the next start to
    /// retry.
    pub problems: Vec<anyhow::Error>,
}

/// Merges the `new_units` inputs in `scratch`'s `new/` into the corpus of
/// the slice's target (`record`'s), then prunes the corpus when it is
/// due, under the target's merge lock. A merge that fails is in the
/// problems; a prune that fails is reported, and the corpus stays as it
/// was.
pub(super) fn merge_new(
    soak: &Soak,
    record: &SliceFile,
    scratch: &Path,
    new_units: u64,
) -> Result<Merge> {
    let target = record.target()?;
    let binary = record.binary(soak)?;
    let env = merge_env(record, scratch);
    let corpus = Corpus::new(&soak.state, target);
    let how = MergeRun {
        binary: &binary,
        env: &env,
        timeout_secs: soak.config.timeout_secs,
        rss_limit_mb: soak.config.rss_limit_mb,
        budget: soak.budget(),
    };
    let mut merge = Merge::default();
    let _merging = soak.merge_lock(target);
    if new_units > 0 {
        match corpus.merge(&how, &scratch.join("new"), &scratch.join("merge.ctl")) {
            Ok(m) => {
                merge.merged_units = (m.after - m.before) as u64;
                soak.lock_store().corpus_event(
                    target.name(),
                    "merge",
                    m.before,
                    m.after,
                    m.secs,
                )?;
            }
            Err(e) => merge.problems.push(e),
        }
    }
    if merge.problems.is_empty() && soak.prune_due(target)? {
        match corpus.prune(&how, &scratch.join("prune.ctl")) {
            Ok(m) => {
                soak.lock_store()
                    .corpus_event(target.name(), "prune", m.before, m.after, m.secs)?
            }
            // Nothing is lost: the corpus stays as it was.
            Err(e) => eprintln!("allocsoak: prune of {target}'s corpus failed: {e:#}"),
        }
    }
    Ok(merge)
}

/// The environment a slice's merges run in: its allocator, its
/// `findings/`, and its tolerate file when it lists any key. Merges go
/// on past sound violations as the engine did (the corpus may hold
/// inputs with one not filed yet); what they save is filed with the
/// slice's findings.
fn merge_env(record: &SliceFile, scratch: &Path) -> Vec<(String, String)> {
    let tolerate = scratch.join("tolerate");
    let tolerate = (std::fs::metadata(&tolerate).map_or(0, |m| m.len()) > 0).then_some(tolerate);
    let mut env = vec![
        ("ALLOCSOAK_ALLOCATOR".to_string(), record.allocator.clone()),
        (
            "ALLOCSOAK_FINDINGS".to_string(),
            scratch.join("findings").to_string_lossy().into_owned(),
        ),
    ];
    if let Some(t) = &tolerate {
        env.push((
            "ALLOCSOAK_TOLERATE".into(),
            t.to_string_lossy().into_owned(),
        ));
    }
    env
}

/// The crash inputs the slice's engine wrote into `scratch`'s
/// `artifacts/`, with those its processes died of without writing one
/// (from its `log` and input history): every `-fork` child's, or, when a
/// single libFuzzer process wrote none and was not `stopped`, its own.
pub(super) fn artifacts(
    record: &SliceFile,
    engine: Engine,
    scratch: &Path,
    log: &str,
    stopped: bool,
) -> Result<Vec<PathBuf>> {
    let history = Some(scratch.join("history")).filter(|h| h.is_file());
    let mut artifacts = engine.artifacts(&scratch.join("artifacts"))?;
    if record.forked {
        for lost in lost_in_children(scratch, log)? {
            if !artifacts.contains(&lost) {
                artifacts.push(lost);
            }
        }
    } else if artifacts.is_empty() && !stopped && engine == Engine::LibFuzzer {
        artifacts.extend(lost_input(scratch, log, history.as_deref())?);
    }
    Ok(artifacts)
}

/// What [`super::finish`] counted of a slice, for its stats.
pub(super) struct Counted {
    /// Its time past its seeds; None when a kill ended it.
    pub fuzz_secs: Option<f64>,
    /// The soak asked it to stop.
    pub stopped: bool,
    pub corpus_size: u64,
    pub new_units: u64,
    pub merged_units: u64,
    /// The crashes it found.
    pub crashes: u64,
    /// All it found, parked while it ran included.
    pub findings: u64,
    /// How often it went on past a violation.
    pub tolerated: u64,
}

/// A slice's stats for the store: what was `counted`, with its engine's
/// numbers from its `log` and its progress, and its processes' tally (in
/// `scratch`).
pub(super) fn slice_stats(
    engine: Engine,
    scratch: &Path,
    log: &str,
    counted: Counted,
) -> SliceStats {
    let progress = engine.progress(scratch).unwrap_or_default();
    // libFuzzer's final stats (none in a honggfuzz log: 0).
    let final_execs = libfuzzer::final_stat(log, "stat::number_of_executed_units");
    let races = shadow::tally::Tally::read(&scratch.join("tally"));
    SliceStats {
        fuzz_secs: counted.fuzz_secs.unwrap_or(0.0),
        // libFuzzer's `-fork` parent counts no execution of a child that
        // ended at a crash; the children's tallies do.
        execs: final_execs.max(progress.execs).max(races.programs),
        cov: progress.cov,
        ft: progress.ft,
        corpus_size: counted.corpus_size,
        new_units: counted.new_units,
        merged_units: counted.merged_units,
        peak_rss_mb: libfuzzer::final_stat(log, "stat::peak_rss_mb").max(progress.rss_mb),
        findings: counted.findings,
        tolerated: counted.tolerated,
        races,
        outcome: if counted.fuzz_secs.is_none() {
            "killed".into()
        } else if counted.stopped {
            "stop".into()
        } else {
            engine.outcome(log, counted.crashes)
        },
    }
}

/// How often a slice went past each group: `tolerated` counts by key, and
/// a group is tolerated by each of its variants' keys (`keys`, the
/// allocator's, as (group, key)).
pub(super) fn by_group<'a>(
    tolerated: &HashMap<String, u64>,
    keys: &'a [(String, String)],
) -> BTreeMap<&'a str, u64> {
    let mut per_group: BTreeMap<&str, u64> = Default::default();
    for (key, count) in tolerated {
        if let Some((group, _)) = keys.iter().find(|(_, k)| k == key) {
            *per_group.entry(group.as_str()).or_default() += count;
        }
    }
    per_group
}

/// Records the end of slice `slice_id` in the store: how often it went
/// past each group (`per_group`), its `stats`, and its slot's new weight
/// by them.
pub(super) fn record_slice(
    soak: &Soak,
    slice_id: i64,
    slot_id: i64,
    per_group: BTreeMap<&str, u64>,
    stats: &SliceStats,
) -> Result<()> {
    let store = soak.lock_store();
    for (group, count) in per_group {
        store.add_tolerated(slice_id, group, count)?;
    }
    store.end_slice(slice_id, stats)?;
    let slot = store.slot_by_id(slot_id)?;
    // New groups and repeats reweigh it as the intake files them.
    let factor = scheduler::next_factor(
        slot.weight,
        &Yield {
            stats,
            new_groups: 0,
            repeats: 0,
        },
    );
    store.set_weight(slot_id, factor)?;
    Ok(())
}

/// Keeps the slice's `fuzz.log` in `logs/` as `slice-<slice_id>.log`,
/// pruning old logs to the config's `logs_mb`.
pub(super) fn keep_log(soak: &Soak, slice_id: i64, scratch: &Path) -> Result<()> {
    let kept_log = soak.state.logs().join(format!("slice-{slice_id}.log"));
    if scratch.join("fuzz.log").is_file() {
        // Read once: a finish again (for the merge) must not take an
        // input it reports, already parked, for a lost one.
        std::fs::rename(scratch.join("fuzz.log"), &kept_log)?;
        if let Err(e) = soak.state.prune_logs(soak.config.logs_mb << 20) {
            eprintln!("allocsoak: pruning old logs: {e:#}");
        }
    }
    Ok(())
}
