//! A Miri pass's finding filed as a crash group (engine `miri`): Miri ran
//! the program already and its log says what broke (`report::miri`). A
//! new group's program is minimized under Miri
//! ([`crate::pipeline::minimize::under_miri`]). The input stays in the
//! corpus: the group gets a copy, `original`, the smaller program as
//! `minimized`, and Miri's log of what it shows as `replay.log`. A
//! finding of a group the store knows (`known_group`) is a repeat.

use std::path::Path;

use anyhow::{Context, Result};
use report::Signature;
use shadow::Target;

use super::groups::known_group;
use super::{refill, Filed};
use crate::engines::miri::Replay;
use crate::engines::project::Project;
use crate::foundation::lock::lock;
use crate::foundation::state::{self, StateDir};
use crate::foundation::store::{self, Store};
use crate::pipeline::minimize::{under_miri, MiriMinimized};
use crate::pipeline::record::GroupFile;

/// What a Miri pass found: `input` of `target` on `allocator` stopped
/// Miri with `sig`; `log` is Miri's output from the input's start.
pub struct Finding<'a> {
    pub target: Target,
    pub allocator: &'a str,
    pub input: &'a Path,
    pub sig: &'a Signature,
    pub log: &'a str,
    /// The config the soak read, passed to the repro command.
    pub config: &'a Path,
    /// The aliasing model Miri ran under, named in the repro command.
    pub borrows: crate::engines::miri::Borrows,
}

/// Files `finding`: a new group's folder built aside (its program
/// minimized under Miri, within `budget`) and renamed into place, or one
/// more crash of the group it repeats.
pub fn file(
    state: &StateDir,
    store: &std::sync::Mutex<Store>,
    f: &Finding,
    (project, budget): (&Project, &triage::budget::Budget),
) -> Result<Filed> {
    let known = known_group(&lock(store), f.sig, None)?;
    let id = known.unwrap_or_else(|| f.sig.id());
    let dir = state.crash_group(&id);
    if dir.is_dir() {
        return repeat(state, store, f, &id);
    }
    let work = state::tmp_path(&dir);
    if work.exists() {
        state::remove_scratch(&work)?;
    }
    std::fs::create_dir_all(&work)
        .with_context(|| format!("failed to create {}", work.display()))?;
    state::copy_atomic(f.input, &work.join("original"))?;
    let minimized = minimized(f, &work, (project, budget));
    let (shown, log) = match &minimized {
        Some(m) => (m.path.clone(), m.log.as_str()),
        None => (f.input.to_path_buf(), f.log),
    };
    let programs = crate::pipeline::program::read_programs(f.target, &[shown])?;
    let program = triage::render::sequence_text(&programs, log);
    let kept = match minimized {
        Some(_) => "minimized",
        None => "original",
    };
    let group_file = GroupFile {
        signature: f.sig.key(),
        kind: f.sig.kind.clone(),
        title: f.sig.title(),
        tolerance_key: f.sig.tolerance_key(),
        target: f.target.name().to_string(),
        allocator: f.allocator.to_string(),
        engine: "miri".into(),
        first_seen: store::now(),
        minimized: (minimized.as_ref())
            .map(|_| dir.join("minimized").to_string_lossy().into_owned()),
        repro: format!(
            "allocsoak --config {} miri --allocator '{}' --target {} --borrows {} {}",
            f.config.display(),
            f.allocator,
            f.target,
            f.borrows.name(),
            std::path::absolute(dir.join(kept))?.display()
        ),
        race_rate: None,
        history: 0,
        history_shrunk: None,
        minimized_ops: minimized.as_ref().map(|m| m.summary.clone()),
        path: f.sig.path,
        alt_titles: f.sig.alt.clone(),
    };
    state::write_atomic(
        &work.join("group.toml"),
        toml::to_string(&group_file)?.as_bytes(),
    )?;
    state::write_atomic(&work.join("replay.log"), log.as_bytes())?;
    state::write_atomic(&work.join("program.txt"), program.as_bytes())?;
    std::fs::rename(&work, &dir)
        .with_context(|| format!("failed to rename {} to {}", work.display(), dir.display()))?;
    let store = lock(store);
    refill(state, &store, &id)?;
    let slot = store.slot(f.target.name(), f.allocator, "miri", 1.0)?;
    let original = dir.join("original").to_string_lossy().into_owned();
    store.add_crash(&id, slot.id, None, &original, true)?;
    if let Some(g) = store.group(&id)? {
        crate::pipeline::page::write_report(state, &store, &g)?;
    }
    Ok(Filed {
        group_id: id,
        new: true,
    })
}

/// `f`'s program minimized under Miri into `work`, or `None` (nothing
/// smaller, or minimizing failed: the finding is filed as found).
fn minimized(
    f: &Finding,
    work: &Path,
    (project, budget): (&Project, &triage::budget::Budget),
) -> Option<MiriMinimized> {
    let replay = Replay {
        allocator: f.allocator,
        target: f.target,
        borrows: f.borrows,
    };
    under_miri(project, replay, f.input, (f.sig, f.log), work, budget).unwrap_or_else(|e| {
        eprintln!(
            "allocsoak: miri: minimizing {} failed: {e:#}; filed as found",
            f.input.display()
        );
        None
    })
}

/// One more crash of the known group `id`: a copy of the input in its
/// `inputs/`, the crash in the store (a `fixed` group is `regressed`).
fn repeat(
    state: &StateDir,
    store: &std::sync::Mutex<Store>,
    f: &Finding,
    id: &str,
) -> Result<Filed> {
    let dest = state.crash_group(id).join("inputs");
    std::fs::create_dir_all(&dest)?;
    let name = f
        .input
        .file_name()
        .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
    let kept = dest.join(format!("miri-{name}"));
    state::copy_atomic(f.input, &kept)?;
    let store = lock(store);
    refill(state, &store, id)?;
    let slot = store.slot(f.target.name(), f.allocator, "miri", 1.0)?;
    store.add_crash(id, slot.id, None, &kept.to_string_lossy(), true)?;
    super::met_again(state, &store, id, true)?;
    Ok(Filed {
        group_id: id.to_string(),
        new: false,
    })
}
