//! The crash pipeline, one artifact at a time, a stage per file:
//! reproduce (alone, else after the inputs its process ran before it:
//! [`crate::pipeline::sequence`]) and sign (`reproduce.rs`, into a
//! `Found`) → deduplicate (`groups.rs`) → a repeat of a known group
//! (`repeat.rs`), or a new group's folder, its program minimized
//! (`new_group.rs`, [`crate::pipeline::minimize`]) → the store. [`file()`]
//! is the route between them.
//!
//! Every artifact ends in `crashes/<signature>/`, moved there by rename
//! (the original of a new group, or `inputs/` of a known one), so none is
//! lost; a group's folder is built under a temporary name and renamed into
//! place whole before the store hears of it.

use std::path::Path;

use anyhow::{Context, Result};
use report::{Record, Signature};

use crate::foundation::lock::lock;
use crate::foundation::state::{self, StateDir};
use crate::foundation::store::{GroupRow, Store};
use crate::pipeline::record::GroupFile;

mod batch;
mod groups;
pub mod miri;
mod new_group;
mod repeat;
mod reproduce;
mod saved;
mod source;
mod texts;

pub use batch::show_saved;
pub use saved::{inputs, record_path, saved_record};
pub(crate) use texts::reference_setting;

pub use source::Source;

use groups::{group_of_record, known_group};
use repeat::{file_repeat, Repeat};
use reproduce::Found;

/// What filing an artifact did.
#[derive(Debug)]
pub struct Filed {
    pub group_id: String,
    pub new: bool,
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
/// whichever engine found it): a repeat of the group it shows (one that
/// was shown again, or saved beside a record that names its group, with
/// no replay of its own), else reproduced and signed, and a repeat of the
/// group its signature belongs to, or a new group.
pub fn file(
    state: &StateDir,
    store: &std::sync::Mutex<Store>,
    src: &Source,
    artifact: &Artifact,
) -> Result<Filed> {
    let _one = one_at_a_time();
    if let Some(shown) = artifact.shown {
        let sig = Signature::from_record(shown);
        // The store's lock ends with this statement: a repeat takes it again.
        let known = known_group(&lock(store), &sig, Some(shown))?;
        if let Some(id) = known {
            let repeat = Repeat::shown(&id, shown, &sig);
            return file_repeat(state, store, src, artifact.path, repeat);
        }
    }
    // A saved finding of a known group is a repeat: the record the harness
    // wrote beside it says what it showed (a key the group was reached by
    // before), and counting it needs no replay.
    let saved = saved_record(artifact.path);
    if let Some(record) = &saved {
        let known = group_of_record(&lock(store), record)?;
        if let Some(id) = known {
            let repeat = Repeat::saved(&id, record);
            return file_repeat(state, store, src, artifact.path, repeat);
        }
    }
    // One replay first: what shows a known group's signature is a repeat
    // of it, and needs none of the replays a new group's page counts (a
    // race's twenty).
    let first = src.replay(&[artifact.path], true)?;
    if first.reproduced {
        let sig = reproduce::sign(src, &first, saved.as_ref(), artifact.engine_log);
        if let Some(id) = known_or_filed(state, store, &sig, first.record.as_ref())? {
            let repeat = Repeat {
                id: &id,
                reproduced: true,
                record: first.record.as_ref(),
                sig: Some(&sig),
            };
            return file_repeat(state, store, src, artifact.path, repeat);
        }
    }
    let found = Found::replayed(src, artifact, first, saved)?;
    if let Some(id) = known_or_filed(state, store, &found.sig, found.record())? {
        let repeat = Repeat {
            id: &id,
            reproduced: found.reproduced(),
            record: found.record(),
            sig: Some(&found.sig),
        };
        return file_repeat(state, store, src, artifact.path, repeat);
    }
    new_group::file_new(state, store, src, artifact, &found)
}

/// The known group `sig` (reached as `record` says) files into, or the
/// one whose folder its own id already names.
fn known_or_filed(
    state: &StateDir,
    store: &std::sync::Mutex<Store>,
    sig: &Signature,
    record: Option<&Record>,
) -> Result<Option<String>> {
    let known = known_group(&lock(store), sig, record)?;
    Ok(known.or_else(|| Some(sig.id()).filter(|id| state.crash_group(id).is_dir())))
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
