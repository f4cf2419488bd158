//! `allocsoak triage import`: a crash input found elsewhere (ClusterFuzz,
//! ClusterFuzzLite, a colleague's machine) filed into a state dir like a
//! local one: replayed on this build, signed, deduplicated, minimized.
//!
//! The file given is copied first and the copy is filed (intake moves what
//! it files into the group's folder); the original stays where it was.

use std::path::Path;
use std::sync::Mutex;

use anyhow::{bail, Context, Result};
use shadow::Target;

use crate::engines::project::Project;
use crate::foundation::config::Config;
use crate::foundation::state::{self, StateDir};
use crate::foundation::store::Store;
use crate::pipeline::intake::{self, Filed, Source};
use triage::replay::Replayer;

/// Where the crash came from: the slot it is filed under.
pub struct Origin<'a> {
    pub target: Target,
    pub allocator: &'a str,
    pub engine: &'a str,
}

/// Files each of `inputs` into the state dir at `state_path` (created when
/// new; refused while a soak holds it).
pub fn import(
    project: &Project,
    config: &Config,
    state_path: &Path,
    origin: &Origin,
    inputs: &[std::path::PathBuf],
) -> Result<Vec<Filed>> {
    for input in inputs {
        if !input.is_file() {
            bail!(
                "{} is not a file; give the crash input files to import",
                input.display()
            );
        }
    }
    config.check_allocator(origin.allocator)?;
    let binary = crate::pipeline::groups::binary(project, origin.target, origin.allocator)?;
    let state = StateDir::open_for_soak(state_path)?;
    let store = Store::open(&state.store())?;
    intake::refill_all(&state, &store)?;
    let slot = store.slot(origin.target.name(), origin.allocator, origin.engine, 1.0)?;
    // Known bugs of the allocator are got past, as in a slice.
    let keys = store.tolerated_keys(origin.allocator)?;
    let scratch = state
        .slices()
        .join(format!("import-{}", std::process::id()));
    std::fs::create_dir_all(&scratch)
        .with_context(|| format!("failed to create {}", scratch.display()))?;
    let tolerate = scratch.join("tolerate");
    let text: String = keys.iter().map(|(_, k)| format!("{k}\n")).collect();
    state::write_atomic(&tolerate, text.as_bytes())?;
    let importer = Importer {
        config,
        origin,
        binary: &binary,
        state: &state,
        store: Mutex::new(store),
        slot_id: slot.id,
        slot_label: format!("{}/{}", origin.target, origin.allocator),
        keys: &keys,
        tolerate: (!keys.is_empty()).then_some(tolerate.as_path()),
        scratch: &scratch,
    };
    let mut filed = Vec::new();
    for input in inputs {
        filed.push(importer.file(input)?);
    }
    state::remove_scratch(&scratch)?;
    Ok(filed)
}

/// What each input of an import is filed with: the build it replays on,
/// the state dir and its store, the slot, the allocator's known bugs and
/// their tolerate file (when there are any), and the scratch folder the
/// copies are filed from.
struct Importer<'a> {
    config: &'a Config,
    origin: &'a Origin<'a>,
    binary: &'a Path,
    state: &'a StateDir,
    store: Mutex<Store>,
    slot_id: i64,
    slot_label: String,
    keys: &'a [(String, String)],
    tolerate: Option<&'a Path>,
    scratch: &'a Path,
}

impl Importer<'_> {
    /// Files a copy of `input` (the original stays where it was).
    fn file(&self, input: &Path) -> Result<Filed> {
        let behind_known = self.behind_known(input)?;
        let src = Source {
            target: self.origin.target,
            allocator: self.origin.allocator,
            engine: self.origin.engine,
            slot_id: self.slot_id,
            slice_id: None,
            binary: self.binary,
            tolerate: self.tolerate.filter(|_| behind_known),
            history: None,
            timeout_secs: self.config.timeout_secs,
            rss_limit_mb: self.config.rss_limit_mb,
            budget: Default::default(),
        };
        let name = input
            .file_name()
            .map_or_else(|| "input".into(), |n| n.to_string_lossy().into_owned());
        let copy = self.scratch.join(format!("imported-{name}"));
        state::copy_atomic(input, &copy)?;
        intake::file(
            self.state,
            &self.store,
            &src,
            &intake::Artifact {
                path: &copy,
                engine_log: "",
                shown: None,
            },
        )
        .with_context(|| format!("filing {}", input.display()))
    }

    /// Whether `input` is filed with the known bugs got past. Replayed as
    /// found, it stops at its first bug: only when that is a known one and
    /// the input goes on to another past it is it filed so, as a slice's
    /// crash is.
    fn behind_known(&self, input: &Path) -> Result<bool> {
        let replayer = |tolerate| Replayer {
            binary: self.binary,
            allocator: self.origin.allocator,
            tolerate,
            timeout_secs: self.config.timeout_secs,
            rss_limit_mb: self.config.rss_limit_mb,
            budget: Default::default(),
        };
        let first = replayer(None)
            .replay(&[input], false)?
            .signature(&self.slot_label);
        Ok(
            first.is_some_and(|s| self.keys.iter().any(|(id, _)| *id == s.id()))
                && replayer(self.tolerate).replay(&[input], true)?.reproduced,
        )
    }
}
