//! The last stages of the crash pipeline for a bug no group holds yet:
//! its folder built under a temporary name (the history it needs shrunk,
//! the program minimized, the texts written), renamed into place whole,
//! and only then told to the store.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

use super::groups::add_variant;
use super::reproduce::Found;
use super::texts::{self, program_text, repro_command, stack_text};
use super::{lock, move_file, refill, Artifact, Filed, Source};
use crate::foundation::state::{self, StateDir};
use crate::foundation::store::{self, Store};
use crate::pipeline::minimize::{self, Minimized};
use crate::pipeline::record::GroupFile;
use crate::pipeline::sequence::{self, Shrunk};

/// What a new group's page shows of its finding: the history inputs kept
/// (`before`, now in the folder), how they were shrunk, the program
/// minimized, and the input and log shown.
struct Shown {
    before: Vec<PathBuf>,
    shrunk: Option<Shrunk>,
    minimized: Option<Minimized>,
    input: PathBuf,
    log: String,
}

/// Files `found` as a new group (its signature's id): its folder built
/// aside and renamed into place, then the store's row, crash and page.
pub(super) fn file_new(
    state: &StateDir,
    store: &std::sync::Mutex<Store>,
    src: &Source,
    artifact: &Artifact,
    found: &Found,
) -> Result<Filed> {
    let id = &found.sig.id();
    let dir = state.crash_group(id);
    let work = state::tmp_path(&dir);
    if work.exists() {
        state::remove_scratch(&work)?;
    }
    std::fs::create_dir_all(&work)
        .with_context(|| format!("failed to create {}", work.display()))?;
    let shown = shown(src, artifact, found, &work)?;
    write_folder(src, artifact, found, &shown, &dir)?;
    move_file(artifact.path, &work.join("original"))?;
    std::fs::rename(&work, &dir)
        .with_context(|| format!("failed to rename {} to {}", work.display(), dir.display()))?;

    let store = lock(store);
    refill(state, &store, id)?;
    let original = dir.join("original").to_string_lossy().into_owned();
    let (reproduced, record) = (found.reproduced(), found.record());
    store.add_crash(id, src.slot_id, src.slice_id, &original, reproduced)?;
    add_variant(&store, src, id, record, &original)?;
    store.add_group_path(id, &found.sig)?;
    if !reproduced {
        store.set_status(id, "flaky")?;
    }
    if let Some(g) = store.group(id)? {
        crate::pipeline::page::write_report(state, &store, &g)?;
    }
    Ok(Filed {
        group_id: id.to_string(),
        new: true,
    })
}

/// Shrinks the history the finding needs (kept in `work/history/`) and
/// minimizes its program, replayed after that history: what its page
/// shows.
fn shown(src: &Source, artifact: &Artifact, found: &Found, work: &Path) -> Result<Shown> {
    let replayer = src.replayer();
    let shrunk = match &found.history {
        Some(h) => Some(h.shrink(
            &replayer,
            artifact.path,
            &src.slot_label(),
            &found.sig,
            &src.budget,
        )?),
        None => None,
    };
    let before = match &shrunk {
        Some(s) => keep_history(&s.inputs, work)?,
        None => Vec::new(),
    };
    let replay_log = match &shrunk {
        Some(s) => &s.replay.log,
        None => &found.reproduction.replay.log,
    };
    let minimized = match found.reproduced() {
        true => {
            let crash = minimize::Failing {
                target: src.target,
                slot: &src.slot_label(),
                before: &before,
                input: artifact.path,
                sig: &found.sig,
                log: replay_log,
            };
            minimize::minimize(&replayer, &crash, work, &src.budget)?
        }
        false => None,
    };
    let (input, log) = match (&minimized, found.reproduced() || shrunk.is_some()) {
        (Some(m), _) => (m.path.clone(), m.replay.log.clone()),
        (None, true) => (artifact.path.to_path_buf(), replay_log.clone()),
        (None, false) => (
            artifact.path.to_path_buf(),
            found.unreproduced_log(artifact.engine_log),
        ),
    };
    Ok(Shown {
        before,
        shrunk,
        minimized,
        input,
        log,
    })
}

/// Writes the group's record and texts into the folder that will be
/// renamed to `dir` (its temporary name).
fn write_folder(
    src: &Source,
    artifact: &Artifact,
    found: &Found,
    shown: &Shown,
    dir: &Path,
) -> Result<()> {
    let (sig, work) = (&found.sig, state::tmp_path(dir));
    let program = program_text(src.target, &shown.before, &shown.input, &shown.log)?;
    let repro = repro_command(
        src,
        dir,
        &texts::Shown {
            input: &shown.input,
            minimized: shown.minimized.is_some(),
            before: &shown.before,
        },
        sig,
    )?;
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
        tolerance_key: match found.record() {
            Some(r) if sig.path || sig.violation_key().is_some() => Some(r.key.clone()),
            _ => sig.tolerance_key(),
        },
        target: src.target.name().to_string(),
        allocator: src.allocator.to_string(),
        engine: src.engine.to_string(),
        first_seen: store::now(),
        minimized: (shown.minimized.as_ref())
            .map(|_| dir.join("minimized").to_string_lossy().into_owned()),
        repro: repro.command,
        race_rate: found.reproduction.race_rate(),
        history: shown.before.len(),
        history_shrunk: shown.shrunk.as_ref().map(|s| s.summary()),
        minimized_ops: shown.minimized.as_ref().map(|m| m.summary()),
        path: sig.path,
        alt_titles: sig.alt.clone(),
    };
    let texts = [
        ("group.toml", toml::to_string(&group_file)?),
        ("replay.log", shown.log.clone()),
        ("engine.log", artifact.engine_log.to_string()),
        ("stack.txt", stack_text(&shown.log)),
        ("program.txt", program),
    ];
    for (name, text) in texts {
        state::write_atomic(&work.join(name), text.as_bytes())?;
    }
    Ok(())
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
