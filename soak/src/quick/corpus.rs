//! A gate's persistent corpus, `<dir>/<target>/` (a CI cache, say): read
//! into the run's own corpus before the pass, and what the pass added
//! saved back after it. Inputs are named by content (libFuzzer's SHA-1
//! names), so one already there is not copied twice; nothing in `<dir>` is
//! ever removed, and each saved input is written aside and renamed in.

use std::path::Path;

use anyhow::{Context, Result};
use shadow::Target;

use crate::foundation::config::Slot;
use crate::foundation::state::{self, StateDir};
use crate::running::corpus::Corpus;

/// The targets the slots run, each once.
fn targets(slots: &[Slot]) -> Vec<Target> {
    let mut targets = Vec::new();
    for s in slots {
        if !targets.contains(&s.target) {
            targets.push(s.target);
        }
    }
    targets
}

/// Copies `<dir>/<target>/` into the run's corpus; returns how many inputs.
pub fn take_in(dir: &Path, state: &StateDir, slots: &[Slot]) -> Result<usize> {
    let mut n = 0;
    for target in targets(slots) {
        let corpus = Corpus::new(state, target);
        corpus.count()?; // makes its first generation
        n += copy_new(&dir.join(target.name()), &corpus.path())?;
    }
    Ok(n)
}

/// Copies the run's corpus inputs that `<dir>/<target>/` lacks into it.
pub fn save_back(dir: &Path, state: &StateDir, slots: &[Slot]) -> Result<usize> {
    let mut n = 0;
    for target in targets(slots) {
        let to = dir.join(target.name());
        std::fs::create_dir_all(&to).with_context(|| {
            format!(
                "failed to create {}; pass a writable --corpus",
                to.display()
            )
        })?;
        n += copy_new(&Corpus::new(state, target).path(), &to)?;
    }
    Ok(n)
}

/// Copies the files of `from` that `to` has no file of the same name of.
fn copy_new(from: &Path, to: &Path) -> Result<usize> {
    let entries = match std::fs::read_dir(from) {
        Ok(e) => e,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(e).with_context(|| format!("failed to read {}", from.display())),
    };
    let mut n = 0;
    for entry in entries {
        let entry = entry?;
        let name = entry.file_name();
        if !entry.file_type()?.is_file() || name.to_string_lossy().starts_with('.') {
            continue;
        }
        if !to.join(&name).exists() {
            state::copy_atomic(&entry.path(), &to.join(&name))?;
            n += 1;
        }
    }
    Ok(n)
}
