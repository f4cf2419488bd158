//! One slice: a slot's engine run for a time, then what it left is merged
//! and filed. [`finish`] also picks up a slice a kill interrupted.

use std::collections::{BTreeSet, HashMap};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use shadow::Target;

use crate::engines::harness::HarnessFiles;
use crate::engines::Engine;
use crate::engines::{honggfuzz, libfuzzer};
use crate::foundation::state::count_files;
use crate::foundation::store::SliceStats;
use crate::foundation::store::SlotRow;
use crate::running::corpus::{Corpus, MergeRun};
use crate::running::pending::{self, Found, SliceFile};
use crate::running::scheduler::{self, Yield};
use crate::running::soak::Soak;

mod log_tail;
mod lost;
use log_tail::LogTail;
use lost::{lost_in_children, lost_input};

/// Runs slot `slot_id` for `secs` on `cores` as slice `slice_id`, then
/// finishes it.
pub fn run(soak: &Soak, slot_id: i64, slice_id: i64, secs: u64, cores: usize) -> Result<()> {
    let slot = soak.slot(slot_id)?;
    let scratch = soak.state.slice(slice_id);
    for sub in ["new", "artifacts", "findings"] {
        std::fs::create_dir_all(scratch.join(sub))
            .with_context(|| format!("failed to create {}", scratch.join(sub).display()))?;
    }
    let engine = Engine::parse(&slot.engine)?;
    let (keys, saved_past, ending) = {
        let store = soak.lock_store();
        (
            store.tolerated_keys(&slot.allocator)?,
            store.unsound_path_kinds(&slot.allocator)?,
            store.ending_groups(&slot.allocator)?,
        )
    };
    // [`EngineRun::fork_past`]; a bug that breaks the heap and waits to
    // be filed (it ended a slice, or a slice saved it) is got past from
    // now on, as its group's is.
    let unfiled = soak.unfiled(&slot.allocator);
    let pending_keys = pending::saved_keys(&soak.state, &slot.allocator);
    let fork_past = ending > 0
        || keys.iter().any(|(_, k)| report::key::breaks_heap(k))
        || unfiled.iter().any(|e| report::key::breaks_heap(&e.key))
        || pending_keys.iter().any(|k| report::key::breaks_heap(k));
    let record = SliceFile {
        slot_id,
        target: slot.target.clone(),
        allocator: slot.allocator.clone(),
        engine: slot.engine.clone(),
        forked: engine == Engine::LibFuzzer && (cores > 1 || fork_past),
    };
    crate::foundation::state::write_atomic(
        &scratch.join("slice.toml"),
        toml::to_string(&record)?.as_bytes(),
    )?;
    let tolerate = scratch.join("tolerate");
    // The known keys, and, for each kind of bug keyed by its code path,
    // every other key of it saved as a finding (its replay tells a new way
    // to a known bug from a new bug) rather than ending the process.
    let mut text = String::new();
    let mut saved_past: BTreeSet<String> = saved_past.into_iter().collect();
    {
        let mut listed = BTreeSet::new();
        let mut list = |key: &str| {
            if listed.insert(key.to_string()) {
                text.push_str(&format!("{key}\n"));
            }
        };
        keys.iter().for_each(|(_, k)| list(k));
        // And what ended this allocator's slices, not filed yet: its key,
        // and, for a violation of a call, its kind saved past from now on.
        for ending in unfiled {
            list(&ending.key);
            saved_past.extend(ending.path_kind);
        }
        // And the keys of its saved findings still pending: one input each
        // is enough.
        pending_keys.iter().for_each(|k| list(k));
    }
    for kind in &saved_past {
        text.push_str(&format!("{}{kind} in *\n", shadow::tolerance::SAVE));
    }
    crate::foundation::state::write_atomic(&tolerate, text.as_bytes())?;
    let tolerate = (!text.is_empty()).then_some(tolerate);

    let run = EngineRun {
        slice_id,
        secs,
        cores,
        tolerate,
        forked: record.forked,
        fork_past,
    };
    let mut command = engine_command(soak, &slot, &scratch, run)?;
    let log = std::fs::File::create(scratch.join("fuzz.log"))?;
    let start = Instant::now();
    // Its own process group: a stop reaches libFuzzer's `-fork` children
    // too, which their parent would otherwise wait for to the end of
    // their jobs (minutes).
    let child = command
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(log)
        .process_group(0)
        .spawn()
        .with_context(|| {
            format!(
                "failed to run {}; run `allocsoak build`",
                command.get_program().to_string_lossy()
            )
        })?;
    let (stopped, parked, status, fuzzing) = wait(soak, child, secs, slice_id, &scratch, engine)?;
    // A harness that did not start fuzzed nothing: the slice is recorded
    // and its scratch goes as any other's, and the soak hears why.
    let not_started = (status.code() == Some(shadow::sanitizer::EXIT_STARTUP)).then(|| {
        let log = std::fs::read_to_string(scratch.join("fuzz.log")).unwrap_or_default();
        libfuzzer::startup_error(&slot.allocator, &log)
    });
    // Its time fuzzing: from when the engine had run its corpus (a slice
    // that died reading it fuzzed for none).
    let fuzz_secs = fuzzing.map_or(0.0, |since| since.elapsed().as_secs_f64());
    finish(
        soak,
        slice_id,
        &scratch,
        Some(fuzz_secs.min(start.elapsed().as_secs_f64())),
        stopped,
        parked,
    )?;
    match not_started {
        Some(error) => bail!("{error}"),
        None => Ok(()),
    }
}

/// What one slice's engine run is given besides its slot.
struct EngineRun {
    slice_id: i64,
    secs: u64,
    /// Processes (libFuzzer's `-fork`) or threads (honggfuzz's) to run.
    cores: usize,
    /// The keys to get past, when there are any.
    tolerate: Option<PathBuf>,
    /// libFuzzer runs `-fork` children (several cores, or `fork_past`).
    forked: bool,
    /// A group filed for this allocator ends the process when it recurs
    /// ([`crate::foundation::store::Store::ending_groups`]), or is a
    /// sanitizer report (the allocator's own memory is in doubt past it):
    /// libFuzzer runs `-fork` with `-ignore_crashes`, each child ends past
    /// any violation that leaves memory in doubt
    /// (`ALLOCSOAK_END_IN_DOUBT`) and the next starts with a fresh
    /// allocator; a child's end is not the slice's.
    fork_past: bool,
}

/// The slot's engine on its target and allocator, from the persistent
/// corpus and the committed seeds, new inputs into the scratch's `new/`,
/// crashes into its `artifacts/` and the sound violations it goes on past
/// into its `findings/`, with the soak's per-input limits, the
/// keys to get past and an input history: `history` for one process,
/// `history-<pid>` for each of libFuzzer's `-fork` children (honggfuzz's
/// threads would share one ring, so it keeps none on several cores).
fn engine_command(soak: &Soak, slot: &SlotRow, scratch: &Path, run: EngineRun) -> Result<Command> {
    let target: Target = slot.target.parse().map_err(anyhow::Error::msg)?;
    let (project, config) = (&soak.project, &soak.config);
    let corpus = Corpus::new(&soak.state, target).path();
    let (secs, tolerate) = (run.secs, run.tolerate);
    Ok(match Engine::parse(&slot.engine)? {
        Engine::LibFuzzer => {
            let history = match run.forked {
                true => scratch.join("history-{pid}"),
                false => scratch.join("history"),
            };
            libfuzzer::Run {
                seed: run.slice_id as u64,
                secs,
                corpus: vec![scratch.join("new"), corpus, project.seeds(target)],
                files: harness_files(soak, slot, scratch, tolerate, Some(history)),
                end_in_doubt: run.fork_past,
                args: [
                    format!("-timeout={}", config.timeout_secs),
                    format!("-rss_limit_mb={}", config.rss_limit_mb),
                ]
                .into_iter()
                .chain(soak.runs.map(|n| format!("-runs={n}")))
                .chain(run.forked.then(|| format!("-fork={}", run.cores)))
                .chain(run.fork_past.then(|| "-ignore_crashes=1".to_string()))
                .collect(),
                ..libfuzzer::Run::new(
                    project,
                    target,
                    &slot.allocator,
                    PathBuf::new(),
                    scratch.join("artifacts"),
                )
            }
            .command()
        }
        Engine::Honggfuzz => {
            let history = (run.cores == 1).then(|| scratch.join("history"));
            let hf = honggfuzz::Run {
                driver: project.honggfuzz_driver(),
                binary: project.honggfuzz_binary(target),
                allocator: slot.allocator.clone(),
                corpus: vec![corpus, project.seeds(target)],
                scratch: scratch.to_path_buf(),
                dict: Some(project.dict(target)),
                secs,
                timeout_secs: config.timeout_secs,
                rss_limit_mb: config.rss_limit_mb,
                runs: soak.runs,
                threads: run.cores,
                files: harness_files(soak, slot, scratch, tolerate, history),
            };
            hf.prepare()?;
            hf.command()
        }
    })
}

/// The harness's files of a slice in `scratch`, either engine's.
fn harness_files(
    soak: &Soak,
    slot: &SlotRow,
    scratch: &Path,
    tolerate: Option<PathBuf>,
    history: Option<PathBuf>,
) -> HarnessFiles {
    HarnessFiles {
        tolerate,
        history,
        findings: Some(scratch.join("findings")),
        claims: Some(soak.state.claims(&slot.allocator)),
        tally: Some(scratch.join("tally")),
    }
}

/// Waits for the engine; on a stop request it gets SIGINT (libFuzzer and
/// honggfuzz then exit cleanly, their new inputs on disk), and so it does
/// a few seconds past the soak's deadline (libFuzzer counts its time from
/// after it has run its corpus: a slice of a big corpus would end late);
/// SIGKILL if it hangs far past its time, or still runs an input's
/// timeout (and time to report) after its SIGINT at the deadline
/// ([`STOP_GRACE`] at a stop): a process stuck in its crash report (its
/// symbolizer killed) ignores SIGINT. Every few seconds
/// it parks the sound violations the slice saved, so they are filed while
/// it runs.
/// Whether the soak asked it to stop, how many findings it parked, how
/// the engine exited, and since when it was past its seeds
/// ([`Engine::past_seeds`], None if it never got there).
fn wait(
    soak: &Soak,
    mut child: Child,
    secs: u64,
    slice_id: i64,
    scratch: &Path,
    engine: Engine,
) -> Result<(bool, u64, ExitStatus, Option<Instant>)> {
    const GRACE: Duration = Duration::from_secs(3);
    const PARK_EVERY: Duration = Duration::from_secs(10);
    let start = Instant::now();
    let (mut parked, mut last_park) = (0, Instant::now());
    let hard = Duration::from_secs(secs + 120 + 2 * soak.config.timeout_secs);
    // After SIGINT at the deadline: an input may run to its timeout, then
    // be reported. At a stop, the user waits: what the slice found is
    // already in its folders, and an input still running is not a finding.
    let at_deadline = Duration::from_secs(soak.config.timeout_secs + 10);
    let mut stopped = false;
    let mut signalled: Option<Instant> = None;
    let mut fuzzing: Option<Instant> = None;
    let mut log = LogTail::default();
    loop {
        let status = child.try_wait()?;
        if fuzzing.is_none() && engine.past_seeds(&log.read(&scratch.join("fuzz.log"))) {
            fuzzing = Some(Instant::now());
        }
        if let Some(status) = status {
            return Ok((stopped, parked, status, fuzzing));
        }
        if last_park.elapsed() >= PARK_EVERY {
            last_park = Instant::now();
            match pending::park_running(soak, slice_id, scratch) {
                Ok(n) => parked += n as u64,
                // They stay in the scratch, for the next try or the end.
                Err(e) => eprintln!("allocsoak: slice {slice_id}: parking its findings: {e:#}"),
            }
        }
        stopped |= soak.stop.load(Ordering::Relaxed);
        if (stopped || soak.past_deadline(GRACE)) && signalled.is_none() {
            signal_group(&child, libc::SIGINT);
            signalled = Some(Instant::now());
        }
        let after_sigint = if stopped { STOP_GRACE } else { at_deadline };
        if start.elapsed() > hard || signalled.is_some_and(|t| t.elapsed() > after_sigint) {
            signal_group(&child, libc::SIGKILL);
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// How long an engine has after its SIGINT at a stop (SIGINT or SIGTERM
/// to the soak) before SIGKILL: a stop ends the soak within seconds.
const STOP_GRACE: Duration = Duration::from_secs(2);

/// Sends `signal` to the engine `child` and every process it started (its
/// process group, which it leads).
pub(crate) fn signal_group(child: &Child, signal: libc::c_int) {
    // SAFETY: a plain signal to the group our own child leads; the child
    // has not been waited for, so its pid (the group's id) is not reused.
    unsafe { libc::kill(-(child.id() as i32), signal) };
}

/// Merges a slice's new inputs, files its artifacts, records it and
/// removes its scratch. Safe to repeat: a kill anywhere in here leaves
/// the scratch for the next start to finish again. `fuzz_secs`: its time
/// past its seeds (None: a slice a kill ended, finished at the next
/// start); `parked`: findings parked while it ran.
pub fn finish(
    soak: &Soak,
    slice_id: i64,
    scratch: &Path,
    fuzz_secs: Option<f64>,
    stopped: bool,
    parked: u64,
) -> Result<()> {
    let record = SliceFile::read(scratch)?;
    let target = record.target()?;
    let engine = Engine::parse(&record.engine)?;
    let binary = record.binary(soak)?;
    let log = std::fs::read_to_string(scratch.join("fuzz.log")).unwrap_or_default();
    let tolerate = scratch.join("tolerate");
    let tolerate = (std::fs::metadata(&tolerate).map_or(0, |m| m.len()) > 0).then_some(tolerate);
    // Merges go on past sound violations as the engine did (the corpus
    // may hold inputs with one not filed yet); what they save is filed
    // with the slice's findings.
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

    let new_units = count_files(&scratch.join("new"))? as u64;
    let corpus = Corpus::new(&soak.state, target);
    let how = MergeRun {
        binary: &binary,
        env: &env,
        timeout_secs: soak.config.timeout_secs,
        rss_limit_mb: soak.config.rss_limit_mb,
        budget: soak.budget(),
    };
    let mut merged_units = 0;
    // What went wrong here keeps the scratch for the next start to retry;
    // the soak goes on (one bad merge must not end a night's run).
    let mut problems: Vec<anyhow::Error> = Vec::new();
    // At a stop the user waits: the merge is left to the next start,
    // which finishes the slice again from its scratch.
    let merge_later = stopped && new_units > 0;
    if !stopped {
        let _merging = soak.merge_lock(target);
        if new_units > 0 {
            match corpus.merge(&how, &scratch.join("new"), &scratch.join("merge.ctl")) {
                Ok(m) => {
                    merged_units = (m.after - m.before) as u64;
                    soak.lock_store().corpus_event(
                        target.name(),
                        "merge",
                        m.before,
                        m.after,
                        m.secs,
                    )?;
                }
                Err(e) => problems.push(e),
            }
        }
        if problems.is_empty() && soak.prune_due(target)? {
            match corpus.prune(&how, &scratch.join("prune.ctl")) {
                Ok(m) => soak.lock_store().corpus_event(
                    target.name(),
                    "prune",
                    m.before,
                    m.after,
                    m.secs,
                )?,
                // Nothing is lost: the corpus stays as it was.
                Err(e) => eprintln!("allocsoak: prune of {target}'s corpus failed: {e:#}"),
            }
        }
    }

    let history = Some(scratch.join("history")).filter(|h| h.is_file());
    let mut artifacts = engine.artifacts(&scratch.join("artifacts"))?;
    if record.forked {
        for lost in lost_in_children(scratch, &log)? {
            if !artifacts.contains(&lost) {
                artifacts.push(lost);
            }
        }
    } else if artifacts.is_empty() && !stopped && engine == Engine::LibFuzzer {
        artifacts.extend(lost_input(scratch, &log, history.as_deref())?);
    }
    // What it found waits for the intake worker, with the sound
    // violations the engine went on past: the next slice starts now.
    let found = Found {
        artifacts,
        findings: crate::pipeline::intake::inputs(&scratch.join("findings"))?,
    };
    let crashes = found.artifacts.len() as u64;
    if let Err(e) = pending::park_in(soak, slice_id, scratch, &found) {
        problems.push(e.context("parking what the slice found"));
    }

    let endings = shadow::findings::endings(&scratch.join("findings"));
    soak.add_unfiled(&record.allocator, endings);
    let tolerated = went_past(&scratch.join("findings"))?;
    let keys = soak.lock_store().tolerated_keys(&record.allocator)?;
    let progress = engine.progress(scratch).unwrap_or_default();
    // libFuzzer's final stats (none in a honggfuzz log: 0).
    let final_execs = libfuzzer::final_stat(&log, "stat::number_of_executed_units");
    let races = shadow::tally::Tally::read(&scratch.join("tally"));
    let stats = SliceStats {
        fuzz_secs: fuzz_secs.unwrap_or(0.0),
        // libFuzzer's `-fork` parent counts no execution of a child that
        // ended at a crash; the children's tallies do.
        execs: final_execs.max(progress.execs).max(races.programs),
        cov: progress.cov,
        ft: progress.ft,
        corpus_size: corpus.count()? as u64,
        new_units,
        merged_units,
        peak_rss_mb: libfuzzer::final_stat(&log, "stat::peak_rss_mb").max(progress.rss_mb),
        findings: found.len() as u64 + parked,
        tolerated: tolerated.values().sum(),
        races,
        outcome: if fuzz_secs.is_none() {
            "killed".into()
        } else if stopped {
            "stop".into()
        } else {
            engine.outcome(&log, crashes)
        },
    };
    {
        let store = soak.lock_store();
        // A group is tolerated by each of its variants' keys.
        let mut per_group: std::collections::BTreeMap<&str, u64> = Default::default();
        for (key, count) in &tolerated {
            if let Some((group, _)) = keys.iter().find(|(_, k)| k == key) {
                *per_group.entry(group.as_str()).or_default() += count;
            }
        }
        for (group, count) in per_group {
            store.add_tolerated(slice_id, group, count)?;
        }
        store.end_slice(slice_id, &stats)?;
        let slot = store.slot_by_id(record.slot_id)?;
        // New groups and repeats reweigh it as the intake files them.
        let factor = scheduler::next_factor(
            slot.weight,
            &Yield {
                stats: &stats,
                new_groups: 0,
                repeats: 0,
            },
        );
        store.set_weight(record.slot_id, factor)?;
    }
    if !problems.is_empty() {
        for e in &problems {
            eprintln!(
                "allocsoak: slice {slice_id}: {e:#}; its scratch {} is kept and retried at the next start",
                scratch.display()
            );
        }
        return Ok(());
    }
    let kept_log = soak.state.logs().join(format!("slice-{slice_id}.log"));
    if scratch.join("fuzz.log").is_file() {
        // Read once: a finish again (for the merge) must not take an
        // input it reports, already parked, for a lost one.
        std::fs::rename(scratch.join("fuzz.log"), &kept_log)?;
        if let Err(e) = soak.state.prune_logs(soak.config.logs_mb << 20) {
            eprintln!("allocsoak: pruning old logs: {e:#}");
        }
    }
    if !merge_later {
        crate::foundation::state::remove_scratch(scratch)?;
    }
    Ok(())
}

/// How often the slice's processes went on past each violation key
/// (tolerated, or saved as a finding), from the counts files each wrote
/// in `findings/` (`counts-<pid>.json`), summed over processes.
fn went_past(dir: &Path) -> Result<HashMap<String, u64>> {
    let mut total = HashMap::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(total);
    };
    for entry in entries {
        let path = entry?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if !(name.starts_with("counts-") && name.ends_with(".json")) {
            continue;
        }
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("failed to read {}", path.display()))?;
        // A process killed mid-rename leaves the last whole file; a file
        // that does not read is someone else's, and is skipped.
        let Ok(counts) = serde_json::from_str::<HashMap<String, u64>>(&text) else {
            eprintln!(
                "allocsoak: {} is not a counts file; skipped",
                path.display()
            );
            continue;
        };
        for (key, n) in counts {
            *total.entry(key).or_insert(0) += n;
        }
    }
    Ok(total)
}

#[cfg(test)]
mod tests {
    #[test]
    fn findings_are_the_saved_inputs_and_counts_add_up_over_processes() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path();
        for name in [
            "aa-11",
            "aa-11.json",
            "bb-22",
            ".tmp-7-bb-23",
            "counts-1.json",
        ] {
            std::fs::write(f.join(name), b"{}").unwrap();
        }
        std::fs::write(f.join("counts-1.json"), r#"{"a":4,"b":1}"#).unwrap();
        std::fs::write(f.join("counts-2.json"), r#"{"a":2}"#).unwrap();
        let inputs = crate::pipeline::intake::inputs(f).unwrap();
        assert_eq!(inputs, [f.join("aa-11"), f.join("bb-22")]);
        let counts = super::went_past(f).unwrap();
        assert_eq!(counts["a"], 6);
        assert_eq!(counts["b"], 1);
        assert!(crate::pipeline::intake::inputs(&f.join("none"))
            .unwrap()
            .is_empty());
    }
}
