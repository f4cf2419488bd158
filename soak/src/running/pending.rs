//! The intake queue: what slices found, waiting to be filed.
//!
//! A slice parks what it found in `pending/<slice>/`: the engine's
//! crashes in `artifacts/` when it ends, the sound violations the harness
//! went on past in `findings/` every few seconds while it runs and when it
//! ends, beside the slice's `slice.toml`, `tolerate` file and input
//! `history` (refreshed at each park), everything filing them needs. Its
//! worker goes on fuzzing at once; the soak's intake worker files the queue, oldest slice
//! first ([`claim`], [`file`]). Once the soak's filing time is over (a
//! little past its deadline, [`crate::running::soak::filing_grace`]) or it is
//! asked to stop, what is left stays for the next soak on the state dir,
//! which files it first. A folder goes once everything in it is filed;
//! parking into a folder and finding it empty to remove it hold one lock
//! ([`park_in`]), so an input parked while its folder is being filed is
//! never removed with it.
//! Nothing is lost on the way: a folder is built under a temporary name
//! and renamed in, an artifact is moved by rename, and a folder a kill
//! interrupted is read again.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};
use serde::{Deserialize, Serialize};
use shadow::Target;

use crate::engines::project::Build;
use crate::foundation::lock::lock;
use crate::foundation::state::{self, StateDir};
use crate::pipeline::intake::{self, inputs, Source};
use crate::running::soak::Soak;

/// A slice's scratch folder names its slot, so a restart can finish it
/// (and its pending folder, so a later soak can file what it left).
#[derive(Serialize, Deserialize)]
pub(crate) struct SliceFile {
    pub slot_id: i64,
    pub target: String,
    pub allocator: String,
    pub engine: String,
    /// libFuzzer ran `-fork` children, each with its own input history.
    #[serde(default)]
    pub forked: bool,
}

impl SliceFile {
    /// The record in `dir` (a scratch or a pending folder).
    pub fn read(dir: &Path) -> Result<SliceFile> {
        let path = dir.join("slice.toml");
        let text = std::fs::read_to_string(&path)
            .with_context(|| format!("failed to read {}", path.display()))?;
        toml::from_str(&text).with_context(|| format!("{} is not a slice record", path.display()))
    }

    pub fn target(&self) -> Result<Target> {
        self.target.parse().map_err(anyhow::Error::msg)
    }

    /// The libFuzzer build this slice's findings replay on.
    pub fn binary(&self, soak: &Soak) -> Result<PathBuf> {
        Ok(soak
            .project
            .binary(Build::for_allocator(&self.allocator), self.target()?))
    }
}

/// What a pending folder keeps from its slice besides what it found.
const CONTEXT: [&str; 3] = ["slice.toml", "tolerate", "history"];
/// The engine's crashes, and the harness's saved findings.
const KINDS: [&str; 2] = ["artifacts", "findings"];

/// What one slice found, to park.
pub struct Found {
    /// Crash, leak, timeout and OOM inputs the engine wrote (or its
    /// history kept).
    pub artifacts: Vec<PathBuf>,
    /// Inputs of sound violations the harness saved and went on past.
    pub findings: Vec<PathBuf>,
}

impl Found {
    pub fn len(&self) -> usize {
        self.artifacts.len() + self.findings.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Moves what slice `slice_id` found (its scratch is `scratch`) into
/// `pending/<slice_id>/`, with the slice's context. A new folder is built
/// aside and renamed in whole; into one a retried finish made before, the
/// inputs move one by one.
pub fn park(state: &StateDir, slice_id: i64, scratch: &Path, found: &Found) -> Result<()> {
    if found.is_empty() {
        return Ok(());
    }
    let dir = state.pending_slice(slice_id);
    let fresh = !dir.is_dir();
    // A folder of this name a kill left is taken back by `recover`; one
    // of this process (a reused pid) is added to.
    let work = if fresh {
        state::tmp_path(&dir)
    } else {
        dir.clone()
    };
    for kind in KINDS {
        std::fs::create_dir_all(work.join(kind))
            .with_context(|| format!("failed to create {}", work.join(kind).display()))?;
    }
    for name in CONTEXT {
        let (src, dest) = (scratch.join(name), work.join(name));
        // The history grows while the slice runs: the inputs parked now
        // replay after what ran before them.
        if src.is_file() && (!dest.exists() || name == "history") {
            state::copy_atomic(&src, &dest)?;
        }
    }
    for (kind, inputs) in KINDS.into_iter().zip([&found.artifacts, &found.findings]) {
        for input in inputs {
            let name = input
                .file_name()
                .with_context(|| format!("{} has no file name", input.display()))?;
            // The record first: an input waiting is never without it.
            let record = intake::record_path(input);
            if record.is_file() {
                intake::move_file(&record, &intake::record_path(&work.join(kind).join(name)))?;
            }
            intake::move_file(input, &work.join(kind).join(name))?;
        }
    }
    if fresh {
        std::fs::rename(&work, &dir)
            .with_context(|| format!("failed to rename {} to {}", work.display(), dir.display()))?;
    }
    Ok(())
}

/// [`park`], while no intake worker can find the folder empty and remove
/// it (see [`file`]).
pub fn park_in(soak: &Soak, slice_id: i64, scratch: &Path, found: &Found) -> Result<()> {
    let _parking = lock(&soak.parking);
    park(&soak.state, slice_id, scratch, found)
}

/// Parks the sound violations a running slice has saved so far
/// (`<scratch>/findings/`), for the intake worker to file while the slice
/// fuzzes on; how many.
pub fn park_running(soak: &Soak, slice_id: i64, scratch: &Path) -> Result<usize> {
    let found = Found {
        artifacts: Vec::new(),
        findings: inputs(&scratch.join("findings"))?,
    };
    park_in(soak, slice_id, scratch, &found)?;
    Ok(found.findings.len())
}

/// Takes back the folders a kill left half-parked (`pending/.tmp-<pid>-<slice>`):
/// each becomes its slice's pending folder, or joins the one there.
pub fn recover(state: &StateDir) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(state.pending()) else {
        return Ok(());
    };
    for entry in entries {
        let tmp = entry?.path();
        let name = tmp
            .file_name()
            .unwrap_or_default()
            .to_string_lossy()
            .into_owned();
        let Some(id) = name
            .strip_prefix(".tmp-")
            .and_then(|rest| rest.split_once('-'))
            .and_then(|(_, id)| id.parse::<i64>().ok())
        else {
            continue;
        };
        let dir = state.pending_slice(id);
        if !dir.exists() {
            std::fs::rename(&tmp, &dir).with_context(|| {
                format!("failed to rename {} to {}", tmp.display(), dir.display())
            })?;
            continue;
        }
        let found = Found {
            artifacts: inputs(&tmp.join("artifacts"))?,
            findings: inputs(&tmp.join("findings"))?,
        };
        park(state, id, &tmp, &found)?;
        state::remove_scratch(&tmp)?;
    }
    Ok(())
}

/// The keys of the saved findings of `allocator` waiting to be filed: a
/// new slice goes on past them, counting, rather than saving another
/// input for each while the first waits (one input per key is what a
/// slice saves anyway).
pub fn saved_keys(state: &StateDir, allocator: &str) -> Vec<String> {
    let mut keys = std::collections::BTreeSet::new();
    for id in slices(state).unwrap_or_default() {
        let dir = state.pending_slice(id);
        if !SliceFile::read(&dir).is_ok_and(|r| r.allocator == allocator) {
            continue;
        }
        for input in inputs(&dir.join("findings")).unwrap_or_default() {
            if let Some(record) = intake::saved_record(&input) {
                keys.insert(record.key);
            }
        }
    }
    keys.into_iter().collect()
}

/// The slices with a pending folder, oldest first.
fn slices(state: &StateDir) -> Result<Vec<i64>> {
    let mut ids: Vec<i64> = inputs(&state.pending())?
        .iter()
        .filter_map(|p| p.file_name()?.to_str()?.parse().ok())
        .collect();
    ids.sort();
    Ok(ids)
}

/// The inputs waiting in one pending folder.
fn waiting(dir: &Path) -> Result<usize> {
    let mut n = 0;
    for kind in KINDS {
        n += inputs(&dir.join(kind))?.len();
    }
    Ok(n)
}

/// How many inputs wait to be filed, for the status line.
pub fn count(state: &StateDir) -> usize {
    let Ok(ids) = slices(state) else {
        return 0;
    };
    ids.iter()
        .map(|id| waiting(&state.pending_slice(*id)).unwrap_or(0))
        .sum()
}

/// A pending folder no one is filing, taken for this worker (give it back
/// with [`file`]); `None` when there is none or filing is closed.
pub fn claim(soak: &Soak) -> Result<Option<i64>> {
    if soak.filing_closed() {
        return Ok(None);
    }
    let mut claimed = lock(&soak.pending_claimed);
    let next = slices(&soak.state)?
        .into_iter()
        .find(|id| !claimed.contains(id));
    if let Some(id) = next {
        claimed.insert(id);
    }
    Ok(next)
}

/// Files what waits in the pending folder of slice `id` (claimed with
/// [`claim`]) while filing is open, reweighs the slot by what it filed,
/// and removes the folder once it is empty. A filing that fails is
/// reported and its input stays; a folder that cannot be read (its
/// record, its binary) stays claimed, so this soak goes on and the next
/// one tries it again.
pub fn file(soak: &Soak, id: i64) {
    match file_claimed(soak, id) {
        Ok(()) => {
            lock(&soak.pending_claimed).remove(&id);
        }
        Err(e) => eprintln!(
            "allocsoak: pending slice {id}: {e:#}; left for the next soak in {}",
            soak.state.pending_slice(id).display()
        ),
    }
}

fn file_claimed(soak: &Soak, id: i64) -> Result<()> {
    let folder = Folder::read(soak, id)?;
    let (mut new_groups, mut repeats) = (0, 0);
    for kind in KINDS {
        let filed = file_kind(soak, &folder, kind)?;
        new_groups += filed.new_groups;
        repeats += filed.repeats;
        if filed.closed {
            break;
        }
    }
    if new_groups + repeats > 0 {
        let store = soak.lock_store();
        let slot = store.slot_by_id(folder.record.slot_id)?;
        let factor = crate::running::scheduler::filing_factor(slot.weight, new_groups, repeats);
        store.set_weight(folder.record.slot_id, factor)?;
    }
    // Under the parking lock: an input parked since the listing above
    // keeps the folder (it is filed at the next claim).
    let _parking = lock(&soak.parking);
    if waiting(&folder.dir)? == 0 {
        state::remove_scratch(&folder.dir)?;
    }
    Ok(())
}

/// A claimed pending folder, read for filing: its slice's record, the
/// build its inputs replay on, and the files their replays run with.
struct Folder {
    id: i64,
    dir: PathBuf,
    record: SliceFile,
    binary: PathBuf,
    target: Target,
    /// The slice's tolerate file, when it lists any key.
    tolerate: Option<PathBuf>,
    /// The tolerate file of the crashes' replays (`tolerate-crashes`).
    past_sound: PathBuf,
    history: Option<PathBuf>,
    /// The slice's log, kept in `logs/` (empty when there is none).
    log: String,
}

impl Folder {
    /// Reads the pending folder of slice `id`, and writes its
    /// `tolerate-crashes`: the slice's keys and every sound violation's.
    fn read(soak: &Soak, id: i64) -> Result<Folder> {
        let dir = soak.state.pending_slice(id);
        let record = SliceFile::read(&dir)?;
        let binary = record.binary(soak)?;
        let target = record.target()?;
        let keys = std::fs::read_to_string(dir.join("tolerate")).unwrap_or_default();
        let tolerate = (!keys.is_empty()).then(|| dir.join("tolerate"));
        // The engine went on past every sound violation, filed or not, to
        // its crashes: their replays do too.
        let past_sound = dir.join("tolerate-crashes");
        state::write_atomic(
            &past_sound,
            format!("{keys}{}", report::key::sound_patterns()).as_bytes(),
        )?;
        let history = Some(dir.join("history")).filter(|h| h.is_file());
        let log = std::fs::read_to_string(soak.state.logs().join(format!("slice-{id}.log")))
            .unwrap_or_default();
        Ok(Folder {
            id,
            dir,
            record,
            binary,
            target,
            tolerate,
            past_sound,
            history,
            log,
        })
    }

    /// Where the folder's inputs of `kind` (one of [`KINDS`]) come from,
    /// for the intake.
    fn source<'a>(&'a self, soak: &'a Soak, kind: &str) -> Source<'a> {
        Source {
            target: self.target,
            allocator: &self.record.allocator,
            engine: &self.record.engine,
            slot_id: self.record.slot_id,
            slice_id: Some(self.id),
            binary: &self.binary,
            tolerate: match kind {
                "artifacts" => Some(self.past_sound.as_path()),
                _ => self.tolerate.as_deref(),
            },
            history: self.history.as_deref(),
            timeout_secs: soak.config.timeout_secs,
            rss_limit_mb: soak.config.rss_limit_mb,
            budget: soak.budget(),
        }
    }
}

/// What filing one kind of a folder's inputs did.
#[derive(Default)]
struct Filings {
    /// Inputs that made a new group.
    new_groups: usize,
    /// Crashes into a known group.
    repeats: usize,
    /// Filing closed before every input was filed.
    closed: bool,
}

/// Files the folder's inputs of `kind` (one of [`KINDS`]) until filing
/// closes; an input whose filing fails is reported and stays.
fn file_kind(soak: &Soak, folder: &Folder, kind: &str) -> Result<Filings> {
    let src = folder.source(soak, kind);
    let inputs = inputs(&folder.dir.join(kind))?;
    // Saved findings of sound violations are shown again in batches,
    // one process each, rather than one replay apiece.
    let shown = match kind {
        "findings" => intake::show_saved(&soak.store, &src, &inputs, &folder.dir.join("batch"))
            .unwrap_or_else(|e| {
                if !soak.filing_closed() {
                    eprintln!("allocsoak: replaying saved findings together: {e:#}; each is replayed alone");
                }
                Default::default()
            }),
        _ => Default::default(),
    };
    let mut filings = Filings::default();
    for input in inputs {
        if soak.filing_closed() {
            filings.closed = true;
            break;
        }
        let artifact = intake::Artifact {
            path: &input,
            engine_log: &folder.log,
            shown: shown.get(&input),
        };
        let filed = intake::file(&soak.state, &soak.store, &src, &artifact);
        if filed.is_ok() {
            let _ = std::fs::remove_file(intake::record_path(&input));
        }
        match filed {
            Ok(filed) if filed.new => {
                filings.new_groups += 1;
                soak.filed(&filed);
            }
            // A crash into a known group cost the engine its run; a
            // known sound violation cost it nothing.
            Ok(_) => filings.repeats += usize::from(kind == "artifacts"),
            Err(e) => eprintln!(
                "allocsoak: filing {}: {e:#}; it stays pending",
                input.display()
            ),
        }
    }
    Ok(filings)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn touch(path: &Path) -> PathBuf {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, path.to_string_lossy().as_bytes()).unwrap();
        path.to_path_buf()
    }

    /// A saved finding of `allocator` with `key`, parked for slice `id`.
    fn park_finding(state: &StateDir, id: i64, allocator: &str, key: &str) {
        let scratch = tempfile::tempdir().unwrap();
        let slice = SliceFile {
            slot_id: 1,
            target: "alloc_ops".into(),
            allocator: allocator.into(),
            engine: "libfuzzer".into(),
            forked: false,
        };
        std::fs::write(
            scratch.path().join("slice.toml"),
            toml::to_string(&slice).unwrap(),
        )
        .unwrap();
        let input = touch(&scratch.path().join(format!("findings/{id}-input")));
        let record = report::Record {
            kind: "alignment".into(),
            key: key.into(),
            allocator: allocator.into(),
            reference: false,
            op_index: 0,
            op: "alloc size=1 align=1".into(),
            site: "alloc size 0..64 align ..16".into(),
            sound: true,
            line: String::new(),
            path: Vec::new(),
            what: String::new(),
            family: String::new(),
        };
        std::fs::write(intake::record_path(&input), record.to_json()).unwrap();
        let found = Found {
            artifacts: Vec::new(),
            findings: vec![input],
        };
        park(state, id, scratch.path(), &found).unwrap();
    }

    #[test]
    fn a_new_slice_goes_past_the_keys_its_allocator_has_waiting() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open_for_soak(&dir.path().join("state")).unwrap();
        park_finding(
            &state,
            3,
            "umm",
            "alignment in alloc size 0..64 align ..16: x",
        );
        park_finding(&state, 4, "umm", "null in alloc size 256K.. align ..16: y");
        park_finding(
            &state,
            5,
            "other",
            "alignment in realloc size 0..64 align ..16: z",
        );
        assert_eq!(
            saved_keys(&state, "umm"),
            [
                "alignment in alloc size 0..64 align ..16: x",
                "null in alloc size 256K.. align ..16: y"
            ]
        );
        assert!(saved_keys(&state, "nobody").is_empty());
    }

    #[test]
    fn parking_moves_inputs_with_their_context_and_a_kill_loses_none() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open_for_soak(&dir.path().join("state")).unwrap();
        let scratch = dir.path().join("scratch");
        touch(&scratch.join("slice.toml"));
        touch(&scratch.join("tolerate"));
        let found = Found {
            artifacts: vec![touch(&scratch.join("artifacts/crash-1"))],
            findings: vec![touch(&scratch.join("findings/aa-bb"))],
        };
        park(&state, 7, &scratch, &found).unwrap();
        let pending = state.pending_slice(7);
        for file in [
            "slice.toml",
            "tolerate",
            "artifacts/crash-1",
            "findings/aa-bb",
        ] {
            assert!(pending.join(file).is_file(), "{file}");
        }
        assert!(
            !scratch.join("artifacts/crash-1").exists(),
            "moved, not copied"
        );
        assert_eq!(count(&state), 2);
        // A second park of the same slice (a running slice's next batch,
        // or a retried finish) adds to it, with the history as it is now.
        std::fs::write(scratch.join("history"), "first\n").unwrap();
        let batch = Found {
            artifacts: Vec::new(),
            findings: vec![touch(&scratch.join("findings/cc-dd"))],
        };
        park(&state, 7, &scratch, &batch).unwrap();
        std::fs::write(scratch.join("history"), "first\nsecond\n").unwrap();
        let more = Found {
            artifacts: vec![touch(&scratch.join("artifacts/crash-2"))],
            findings: Vec::new(),
        };
        park(&state, 7, &scratch, &more).unwrap();
        assert_eq!(count(&state), 4);
        assert_eq!(
            std::fs::read_to_string(pending.join("history")).unwrap(),
            "first\nsecond\n"
        );
        // A kill mid-park leaves `.tmp-<pid>-<slice>`: taken back, whether
        // the slice has a folder (7) or not (8).
        for id in [7, 8] {
            let tmp = state.pending().join(format!(".tmp-1-{id}"));
            touch(&tmp.join("slice.toml"));
            touch(&tmp.join("artifacts").join(format!("crash-{id}x")));
        }
        assert_eq!(count(&state), 4, "half-parked folders are not counted");
        recover(&state).unwrap();
        assert_eq!(count(&state), 6);
        assert!(state.pending_slice(7).join("artifacts/crash-7x").is_file());
        assert!(state.pending_slice(8).join("slice.toml").is_file());
        let left = std::fs::read_dir(state.pending()).unwrap().count();
        assert_eq!(left, 2, "no .tmp- folder left");
    }
}
