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
use crate::foundation::store::SlotRow;
use crate::running::corpus::Corpus;
use crate::running::pending::{self, Found, SliceFile};
use crate::running::soak::Soak;

mod finishing;
mod log_tail;
mod lost;
use finishing::{
    artifacts, by_group, keep_log, merge_new, record_slice, slice_stats, Counted, Merge,
};
use log_tail::LogTail;

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
    let known = Known::read(soak, &slot.allocator)?;
    let fork_past = known.fork_past();
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
    let run = EngineRun {
        slice_id,
        secs,
        cores,
        tolerate: write_tolerate(&scratch, known)?,
        forked: record.forked,
        fork_past,
    };
    let command = engine_command(soak, &slot, &scratch, run)?;
    let log = std::fs::File::create(scratch.join("fuzz.log"))?;
    let start = Instant::now();
    let child = spawn(command, log)?;
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

/// What is known of a slice's allocator as the slice starts: what it
/// gets past, and whether it runs [`EngineRun::fork_past`].
struct Known {
    /// The tolerated keys of its groups, (group, key).
    keys: Vec<(String, String)>,
    /// The kinds of bug keyed by their code path.
    saved_past: Vec<String>,
    /// How many of its groups end the process when they recur.
    ending: i64,
    /// What ended its slices this soak, not filed yet.
    unfiled: BTreeSet<report::Ending>,
    /// The keys of its saved findings still pending.
    pending_keys: Vec<String>,
}

impl Known {
    /// What the store, the soak and `pending/` know of `allocator`.
    fn read(soak: &Soak, allocator: &str) -> Result<Known> {
        let (keys, saved_past, ending) = {
            let store = soak.lock_store();
            (
                store.tolerated_keys(allocator)?,
                store.unsound_path_kinds(allocator)?,
                store.ending_groups(allocator)?,
            )
        };
        Ok(Known {
            keys,
            saved_past,
            ending,
            unfiled: soak.unfiled(allocator),
            pending_keys: pending::saved_keys(&soak.state, allocator),
        })
    }

    /// [`EngineRun::fork_past`]; a bug that breaks the heap and waits to
    /// be filed (it ended a slice, or a slice saved it) is got past from
    /// now on, as its group's is.
    fn fork_past(&self) -> bool {
        self.ending > 0
            || self.keys.iter().any(|(_, k)| report::key::breaks_heap(k))
            || self
                .unfiled
                .iter()
                .any(|e| report::key::breaks_heap(&e.key))
            || self
                .pending_keys
                .iter()
                .any(|k| report::key::breaks_heap(k))
    }
}

/// Writes the slice's `tolerate` file into `scratch` from what is
/// `known`; its path, or None when it lists nothing.
fn write_tolerate(scratch: &Path, known: Known) -> Result<Option<PathBuf>> {
    let tolerate = scratch.join("tolerate");
    // The known keys, and, for each kind of bug keyed by its code path,
    // every other key of it saved as a finding (its replay tells a new way
    // to a known bug from a new bug) rather than ending the process.
    let mut text = String::new();
    let mut saved_past: BTreeSet<String> = known.saved_past.into_iter().collect();
    {
        let mut listed = BTreeSet::new();
        let mut list = |key: &str| {
            if listed.insert(key.to_string()) {
                text.push_str(&format!("{key}\n"));
            }
        };
        known.keys.iter().for_each(|(_, k)| list(k));
        // And what ended this allocator's slices, not filed yet: its key,
        // and, for a violation of a call, its kind saved past from now on.
        for ending in known.unfiled {
            list(&ending.key);
            saved_past.extend(ending.path_kind);
        }
        // And the keys of its saved findings still pending: one input each
        // is enough.
        known.pending_keys.iter().for_each(|k| list(k));
    }
    for kind in &saved_past {
        text.push_str(&format!("{}{kind} in *\n", shadow::tolerance::SAVE));
    }
    crate::foundation::state::write_atomic(&tolerate, text.as_bytes())?;
    Ok((!text.is_empty()).then_some(tolerate))
}

/// Starts the engine `command` with its stderr into `log`, in its own
/// process group: a stop reaches libFuzzer's `-fork` children too, which
/// their parent would otherwise wait for to the end of their jobs
/// (minutes).
fn spawn(mut command: Command, log: std::fs::File) -> Result<Child> {
    command
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
        })
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
    let log = std::fs::read_to_string(scratch.join("fuzz.log")).unwrap_or_default();
    let new_units = count_files(&scratch.join("new"))? as u64;
    // At a stop the user waits: the merge is left to the next start,
    // which finishes the slice again from its scratch.
    let merge_later = stopped && new_units > 0;
    // What went wrong here keeps the scratch for the next start to retry;
    // the soak goes on (one bad merge must not end a night's run).
    let Merge {
        merged_units,
        mut problems,
    } = match stopped {
        true => Merge::default(),
        false => merge_new(soak, &record, scratch, new_units)?,
    };
    // What it found waits for the intake worker, with the sound
    // violations the engine went on past: the next slice starts now.
    let found = Found {
        artifacts: artifacts(&record, engine, scratch, &log, stopped)?,
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
    let counted = Counted {
        fuzz_secs,
        stopped,
        corpus_size: Corpus::new(&soak.state, target).count()? as u64,
        new_units,
        merged_units,
        crashes,
        findings: found.len() as u64 + parked,
        tolerated: tolerated.values().sum(),
    };
    let stats = slice_stats(engine, scratch, &log, counted);
    record_slice(
        soak,
        slice_id,
        record.slot_id,
        by_group(&tolerated, &keys),
        &stats,
    )?;
    if !problems.is_empty() {
        for e in &problems {
            eprintln!(
                "allocsoak: slice {slice_id}: {e:#}; its scratch {} is kept and retried at the next start",
                scratch.display()
            );
        }
        return Ok(());
    }
    keep_log(soak, slice_id, scratch)?;
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
