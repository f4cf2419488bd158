//! The crash pipeline, one artifact at a time:
//! reproduce (alone, else after the inputs its process ran before it:
//! [`crate::pipeline::sequence`]) → sign → deduplicate → minimize ([`crate::pipeline::minimize`])
//! → file.
//!
//! Every artifact ends in `crashes/<signature>/`, moved there by rename
//! (the original of a new group, or `inputs/` of a known one), so none is
//! lost; a group's folder is built under a temporary name and renamed into
//! place whole before the store hears of it.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use report::{Record, Signature};
use triage::replay::Replay;

use crate::foundation::lock::lock;
use crate::foundation::state::{self, StateDir};
use crate::foundation::store::{self, GroupRow, Store};
use crate::pipeline::minimize;
use crate::pipeline::record::GroupFile;
use crate::pipeline::sequence::{self, History};

mod batch;
mod groups;
pub mod miri;
mod repeat;
mod saved;
mod source;
mod texts;

pub use batch::show_saved;
pub use saved::{inputs, record_path, saved_record};
pub(crate) use texts::reference_setting;

pub use source::Source;

use groups::{add_variant, group_of_record, known_group};
use repeat::{file_repeat, Repeat};
use texts::{program_text, repro_command, stack_text};

/// Replays per artifact before it is called flaky.
const TRIES: usize = 3;
/// Replays of an artifact whose program has a race section: every one
/// runs, and the group reports how many reproduced.
const RACE_TRIES: usize = 20;
/// What filing an artifact did.
#[derive(Debug)]
pub struct Filed {
    pub group_id: String,
    pub new: bool,
}

/// How an artifact reproduced.
struct Reproduction {
    /// The first replay that reproduced, else the last one.
    replay: Replay,
    hits: usize,
    tries: usize,
    /// The program has a race section: what interleaves is up to the machine.
    race: bool,
    /// For a race: whether a replay with its sections run one worker at a
    /// time reproduced (then contention is not what it needs).
    serially: Option<bool>,
}

impl Reproduction {
    fn reproduced(&self) -> bool {
        self.hits > 0
    }

    fn race_rate(&self) -> Option<String> {
        let serially = match self.serially {
            Some(true) => "; also with its race sections run one worker at a time",
            Some(false) => {
                "; never with its race sections run one worker at a time: contention is the bug"
            }
            None => "",
        };
        self.race
            .then(|| format!("{} of {} replays{serially}", self.hits, self.tries))
    }
}

/// Reproduces an artifact: up to [`TRIES`] times, or, when its program
/// has a race section, [`RACE_TRIES`] times, counting every hit; `done`
/// is a replay already run, counted as the first.
fn reproduce(src: &Source, input: &Path, done: Replay) -> Result<Reproduction> {
    let race = crate::pipeline::program::read_program(src.target, input)?
        .ops
        .iter()
        .any(shadow::Op::is_race);
    let tries = if race { RACE_TRIES } else { TRIES };
    let (mut first, mut last, mut hits) = (None, None, 0);
    let mut done = Some(done);
    for _ in 0..tries {
        let r = match done.take() {
            Some(r) => r,
            None => src.replay(&[input], true)?,
        };
        if r.reproduced {
            hits += 1;
            if !race {
                first = Some(r);
                break;
            }
            first.get_or_insert(r);
        } else {
            last = Some(r);
        }
    }
    // Once more without contention: a finding only a race makes is gone.
    let serially = match race && hits > 0 {
        true => Some(
            src.replayer()
                .replay_serially(&[input], true)
                .with_context(|| format!("failed to run {}", src.binary.display()))?
                .reproduced,
        ),
        false => None,
    };
    Ok(Reproduction {
        replay: first.or(last).expect("tries > 0"),
        hits,
        tries: if race { tries } else { hits.max(1) },
        race,
        serially,
    })
}

/// Signs a replay. When the replay did not reproduce, a saved finding is
/// signed by the record the harness wrote as it found it, and a crash by
/// the engine's own log (a flaky crash still has the engine's report).
fn sign(src: &Source, replay: &Replay, saved: Option<&Record>, engine_log: &str) -> Signature {
    let slot = src.slot_label();
    unreproduced(replay.signature(&slot), saved, engine_log, &slot).unwrap_or_else(|| Signature {
        // The engine wrote an artifact but no log says why.
        kind: "crash".into(),
        allocator: src.allocator.to_string(),
        frames: Vec::new(),
        message: format!("unreported crash in {slot}"),
        path: false,
        alt: Vec::new(),
    })
}

/// The replay's signature, else the saved record's, else the engine log's.
fn unreproduced(
    replayed: Option<Signature>,
    saved: Option<&Record>,
    engine_log: &str,
    slot: &str,
) -> Option<Signature> {
    replayed
        .or_else(|| saved.map(Signature::from_record))
        .or_else(|| Signature::from_log(engine_log, slot))
}

/// One artifact at a time: two workers that hit one new bug at once must
/// file one group, not race to build its folder.
fn one_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
    lock(&ONE_AT_A_TIME)
}

/// An artifact to file (a libFuzzer `crash-`, `leak-`, `timeout-` or
/// `oom-` file, a honggfuzz `SIG*.fuzz`): its path, the log of the run
/// that wrote it, and the record [`show_saved`] showed for it again (code
/// path included), when it did.
#[derive(Clone, Copy)]
pub struct Artifact<'a> {
    pub path: &'a Path,
    pub engine_log: &'a str,
    pub shown: Option<&'a Record>,
}

/// Files one artifact, replayed on `src.binary` (the libFuzzer build,
/// whichever engine found it). One that was shown again is a repeat of
/// the known group its path belongs to, with no replay of its own.
pub fn file(
    state: &StateDir,
    store: &std::sync::Mutex<Store>,
    src: &Source,
    artifact: &Artifact,
) -> Result<Filed> {
    let Artifact {
        path: artifact,
        engine_log,
        shown,
    } = *artifact;
    let _one = one_at_a_time();
    if let Some(shown) = shown {
        let sig = Signature::from_record(shown);
        // The store's lock ends with this statement: a repeat takes it again.
        let known = known_group(&lock(store), &sig, Some(shown))?;
        if let Some(id) = known {
            let repeat = Repeat::shown(&id, shown, &sig);
            return file_repeat(state, store, src, artifact, repeat);
        }
    }
    // A saved finding of a known group is a repeat: the record the harness
    // wrote beside it says what it showed (a key the group was reached by
    // before), and counting it needs no replay.
    let saved = saved_record(artifact);
    if let Some(record) = &saved {
        let known = group_of_record(&lock(store), record)?;
        if let Some(id) = known {
            let repeat = Repeat::saved(&id, record);
            return file_repeat(state, store, src, artifact, repeat);
        }
    }
    // One replay first: what shows a known group's signature is a repeat
    // of it, and needs none of the replays a new group's page counts (a
    // race's twenty).
    let first = src.replay(&[artifact], true)?;
    if first.reproduced {
        let sig = sign(src, &first, saved.as_ref(), engine_log);
        let known = known_group(&lock(store), &sig, first.record.as_ref())?;
        if let Some(id) =
            known.or_else(|| Some(sig.id()).filter(|id| state.crash_group(id).is_dir()))
        {
            let repeat = Repeat {
                id: &id,
                reproduced: true,
                record: first.record.as_ref(),
                sig: Some(&sig),
            };
            return file_repeat(state, store, src, artifact, repeat);
        }
    }
    let mut reproduction = reproduce(src, artifact, first)?;
    let history = match src.history {
        Some(ring) if !reproduction.reproduced() => {
            with_history(src, ring, artifact, &mut reproduction)?
        }
        _ => None,
    };
    let reproduced = reproduction.reproduced();
    let replay = &reproduction.replay;
    let sig = sign(src, replay, saved.as_ref(), engine_log);
    // A saved finding that did not show again is still what its record
    // says (`sign` signed it so), and its page shows the record's line.
    let record = match reproduced {
        true => replay.record.as_ref(),
        false => saved.as_ref(),
    };
    let saved_line = saved.as_ref().map(|r| format!("{}\n", r.line));
    let unreproduced_log = saved_line.as_deref().unwrap_or(engine_log);
    let known = known_group(&lock(store), &sig, record)?;
    let id = known.clone().unwrap_or_else(|| sig.id());
    if known.is_some() || state.crash_group(&id).is_dir() {
        let repeat = Repeat {
            id: &id,
            reproduced,
            record,
            sig: Some(&sig),
        };
        return file_repeat(state, store, src, artifact, repeat);
    }

    // A new group: build its folder aside, then rename it into place.
    let dir = state.crash_group(&id);
    let work = state::tmp_path(&dir);
    if work.exists() {
        crate::foundation::state::remove_scratch(&work)?;
    }
    std::fs::create_dir_all(&work)
        .with_context(|| format!("failed to create {}", work.display()))?;
    // A crash that needs its history keeps the few inputs it needs, in
    // `history/`, and its program is minimized replayed after them.
    let shrunk = match &history {
        Some(h) => Some(h.shrink(
            &src.replayer(),
            artifact,
            &src.slot_label(),
            &sig,
            &src.budget,
        )?),
        None => None,
    };
    let before = match &shrunk {
        Some(s) => keep_history(&s.inputs, &work)?,
        None => Vec::new(),
    };
    let minimized = match reproduced {
        true => {
            let crash = minimize::Failing {
                target: src.target,
                slot: &src.slot_label(),
                before: &before,
                input: artifact,
                sig: &sig,
                log: shrunk.as_ref().map_or(&replay.log, |s| &s.replay.log),
            };
            minimize::minimize(&src.replayer(), &crash, &work, &src.budget)?
        }
        false => None,
    };
    let (shown_input, shown_log) = match (&minimized, &shrunk) {
        (Some(m), _) => (m.path.clone(), m.replay.log.as_str()),
        (None, Some(shrunk)) => (artifact.to_path_buf(), shrunk.replay.log.as_str()),
        (None, None) => (
            artifact.to_path_buf(),
            if reproduced {
                replay.log.as_str()
            } else {
                unreproduced_log
            },
        ),
    };
    let program = program_text(src.target, &before, &shown_input, shown_log)?;
    let shown = texts::Shown {
        input: &shown_input,
        minimized: minimized.is_some(),
        before: &before,
    };
    let repro = repro_command(src, &dir, &shown, &sig)?;
    // The group's folder holds a tolerate file exactly when its repro
    // needs one (`Group::tolerate`).
    if let Some(t) = src.tolerate.filter(|t| repro.needs_tolerate && t.is_file()) {
        state::copy_atomic(t, &work.join("tolerate"))?;
    }
    let group_file = GroupFile {
        signature: sig.key(),
        kind: sig.kind.clone(),
        title: sig.title(),
        // A violation's group is tolerated by the keys of its variants
        // (its signature has no size tiers, or no site at all for a path).
        tolerance_key: match record {
            Some(r) if sig.path || sig.violation_key().is_some() => Some(r.key.clone()),
            _ => sig.tolerance_key(),
        },
        target: src.target.name().to_string(),
        allocator: src.allocator.to_string(),
        engine: src.engine.to_string(),
        first_seen: store::now(),
        minimized: minimized
            .as_ref()
            .map(|_| dir.join("minimized").to_string_lossy().into_owned()),
        repro: repro.command,
        race_rate: reproduction.race_rate(),
        history: before.len(),
        history_shrunk: shrunk.as_ref().map(|s| s.summary()),
        minimized_ops: minimized.as_ref().map(|m| m.summary()),
        path: sig.path,
        alt_titles: sig.alt.clone(),
    };
    state::write_atomic(
        &work.join("group.toml"),
        toml::to_string(&group_file)?.as_bytes(),
    )?;
    state::write_atomic(&work.join("replay.log"), shown_log.as_bytes())?;
    state::write_atomic(&work.join("engine.log"), engine_log.as_bytes())?;
    state::write_atomic(&work.join("stack.txt"), stack_text(shown_log).as_bytes())?;
    state::write_atomic(&work.join("program.txt"), program.as_bytes())?;
    move_file(artifact, &work.join("original"))?;
    std::fs::rename(&work, &dir)
        .with_context(|| format!("failed to rename {} to {}", work.display(), dir.display()))?;

    let store = lock(store);
    refill(state, &store, &id)?;
    let original = dir.join("original").to_string_lossy().into_owned();
    store.add_crash(&id, src.slot_id, src.slice_id, &original, reproduced)?;
    add_variant(&store, src, &id, record, &original)?;
    store.add_group_path(&id, &sig)?;
    if !reproduced {
        store.set_status(&id, "flaky")?;
    }
    if let Some(g) = store.group(&id)? {
        crate::pipeline::page::write_report(state, &store, &g)?;
    }
    Ok(Filed {
        group_id: id,
        new: true,
    })
}

/// Replays a crash that did not reproduce alone after the inputs its
/// process ran before it; when that reproduces, it becomes the
/// reproduction and the history is returned.
fn with_history(
    src: &Source,
    ring: &Path,
    artifact: &Path,
    reproduction: &mut Reproduction,
) -> Result<Option<History>> {
    let history = match History::unpack(ring, artifact, &ring.with_extension("inputs")) {
        Ok(Some(h)) => h,
        Ok(None) => return Ok(None),
        Err(e) => {
            // The crash is still filed, as flaky: a bad history loses nothing.
            eprintln!(
                "allocsoak: {e:#}; {} is filed without its history",
                artifact.display()
            );
            return Ok(None);
        }
    };
    let replay = history.replay(&src.replayer(), artifact)?;
    if !replay.reproduced {
        return Ok(None);
    }
    *reproduction = Reproduction {
        replay,
        hits: 1,
        tries: 1,
        race: false,
        serially: None,
    };
    Ok(Some(history))
}

/// Moves the history inputs a new group keeps into `work/history/`,
/// renumbered in replay order; returns where they are now.
fn keep_history(inputs: &[PathBuf], work: &Path) -> Result<Vec<PathBuf>> {
    let dir = work.join("history");
    std::fs::create_dir_all(&dir).with_context(|| format!("failed to create {}", dir.display()))?;
    let mut kept = Vec::with_capacity(inputs.len());
    for (i, input) in inputs.iter().enumerate() {
        let to = dir.join(sequence::file_name(i));
        move_file(input, &to)?;
        kept.push(to);
    }
    Ok(kept)
}

/// A known group met again, its crash recorded: a `fixed` group (marked so
/// by `triage verify` or a Miri pass) is back, `regressed`; a `new` one
/// met by a crash that did not reproduce is `flaky`. Then its page is
/// written again.
pub fn met_again(state: &StateDir, store: &Store, id: &str, reproduced: bool) -> Result<()> {
    if let Some(g) = store.group(id)? {
        let status = match (g.status.as_str(), reproduced) {
            ("fixed", _) => Some("regressed"),
            ("new", false) => Some("flaky"),
            _ => None,
        };
        if let Some(status) = status {
            store.set_status(id, status)?;
        }
    }
    match store.group(id)? {
        Some(g) => crate::pipeline::page::write_report(state, store, &g),
        None => Ok(()),
    }
}

/// Puts a group the store does not know (its folder was renamed into place
/// just before a kill) back into the store from its `group.toml`.
pub fn refill(state: &StateDir, store: &Store, id: &str) -> Result<()> {
    if store.group(id)?.is_some() || store.merged_into(id)?.is_some() {
        return Ok(());
    }
    let path = state.crash_group(id).join("group.toml");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("failed to read {}", path.display()))?;
    let g: GroupFile = toml::from_str(&text)
        .with_context(|| format!("{} is not a group record", path.display()))?;
    let slot = store.slot(&g.target, &g.allocator, &g.engine, 1.0)?;
    store.insert_group(&GroupRow {
        id: id.to_string(),
        signature: g.signature,
        kind: g.kind,
        title: g.title,
        tolerance_key: g.tolerance_key,
        slot_id: slot.id,
        first_seen: g.first_seen,
        last_seen: g.first_seen,
        count: 0,
        status: "new".into(),
        minimized: g.minimized,
        repro: g.repro,
        path: g.path,
        alt_titles: g.alt_titles,
    })
}

/// Refills every group folder the store lacks (after a kill).
pub fn refill_all(state: &StateDir, store: &Store) -> Result<()> {
    for entry in std::fs::read_dir(state.crashes())? {
        let entry = entry?;
        let name = entry.file_name().to_string_lossy().into_owned();
        if name.starts_with(".tmp-") {
            // A group folder a kill interrupted: its artifact is still in
            // the slice's scratch, which is filed again.
            crate::foundation::state::remove_scratch(&entry.path())?;
        } else if entry.path().join("group.toml").is_file() {
            refill(state, store, &name)?;
        }
    }
    Ok(())
}

/// Renames `from` to `to`; copies and then removes across file systems.
pub fn move_file(from: &Path, to: &Path) -> Result<()> {
    if std::fs::rename(from, to).is_err() {
        state::copy_atomic(from, to)?;
        std::fs::remove_file(from)
            .with_context(|| format!("failed to remove {}", from.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A saved finding's record, as `shadow::findings` writes it.
    fn record() -> Record {
        Record {
            kind: "remote-free-lost".into(),
            key: "remote-free-lost in remote-free size 256K.. align 32..: N of N blocks".into(),
            allocator: "mimalloc".into(),
            reference: false,
            op_index: 0,
            op: "race-remote-free freer=192 owner=196 size=524287 align=262144 count=32".into(),
            site: "remote-free size 256K.. align 32..".into(),
            sound: true,
            line: "allocsoak violation: remote-free-lost: op #0 ...".into(),
            path: Vec::new(),
            what: String::new(),
            family: String::new(),
        }
    }

    #[test]
    fn a_saved_finding_that_did_not_show_again_is_signed_by_its_record() {
        let sig = unreproduced(None, Some(&record()), "", "mt_ops/mimalloc").unwrap();
        assert_eq!(sig.kind, "remote-free-lost");
        assert_eq!(sig.allocator, "mimalloc");
        assert_eq!(sig.message, record().key);
        // A crash with neither: the caller's `unreported crash`.
        assert!(unreproduced(None, None, "", "mt_ops/mimalloc").is_none());
    }
}
