//! Known crash groups a gate gets past: taken from a soak's state dir, or
//! from a known-groups file a repository commits (`allocsoak triage known`
//! writes one). Either way each group lands in the gate's own state dir as
//! a group folder, so the soak's boot verifies it (a fixed one is reported
//! fixed) and its slices tolerate it (a known bug does not hide a new one).
//!
//! The file is TOML, one `[[group]]` per group, self-contained: the
//! original input in base64, the minimized program as text, the inputs the
//! crash needs before it, and the tolerate file, so it replays on any
//! machine. `{group}` in `repro` stands for the group's folder.

use std::path::Path;

use anyhow::{bail, Context, Result};
use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use serde::{Deserialize, Serialize};

use crate::foundation::state::{self, StateDir};
use crate::foundation::store::{MergedGroup, Store};
use crate::pipeline::groups::Group;
use crate::pipeline::record::GroupFile;

const HEADER: &str = "\
# allocsoak known crash groups. `allocsoak quick --known <this file>` gets
# past them and fails only on new findings (and on fixed ones that are back).
# Written by `allocsoak triage known --state <dir> --out <this file>`.
";

/// The file's format: 2 since group ids name their allocator (a file
/// without it holds ids no soak files any more).
const VERSION: u32 = 2;

#[derive(Serialize, Deserialize)]
struct KnownFile {
    #[serde(default)]
    version: u32,
    #[serde(default, rename = "group")]
    groups: Vec<Entry>,
}

/// One group, as the file keeps it.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct Entry {
    id: String,
    /// new, known, flaky, fixed or regressed: a fixed group guards
    /// against the bug coming back.
    status: String,
    kind: String,
    title: String,
    signature: String,
    tolerance_key: Option<String>,
    target: String,
    allocator: String,
    engine: String,
    first_seen: i64,
    repro: String,
    /// The fuzz input that was filed, base64.
    input: String,
    /// The minimized op program, as text.
    program: Option<String>,
    /// Inputs the crash needs replayed before it, in order, base64.
    #[serde(default)]
    history: Vec<String>,
    /// The tolerate file the repro needs.
    tolerate: Option<String>,
    /// The signature's frames are a code path (`report::Signature::path`).
    #[serde(default)]
    path: bool,
    /// The group's alternative titles (`report::Signature::alt`).
    #[serde(default)]
    alt_titles: Vec<String>,
    /// Groups merged into it: a crash of one of them is this group's.
    #[serde(default)]
    merged: Vec<MergedGroup>,
}

/// Groups a gate starts from: `from` is an allocsoak state dir or a
/// known-groups file. Returns how many were taken in. Drift groups are
/// left out: a gate runs no drift workers.
pub fn import(from: &Path, state: &StateDir, store: &Store) -> Result<usize> {
    if from.join("allocsoak-state").is_file() {
        return import_state(from, state, store);
    }
    if !from.is_file() {
        bail!(
            "--known {} is neither an allocsoak state dir nor a known-groups file; write one with `allocsoak triage known --state <dir> --out FILE`",
            from.display()
        );
    }
    let text = std::fs::read_to_string(from)
        .with_context(|| format!("failed to read {}", from.display()))?;
    let file: KnownFile = toml::from_str(&text).map_err(|e| {
        anyhow::anyhow!(
            "{} is not a known-groups file ({}); write one with `allocsoak triage known`",
            from.display(),
            e.message()
        )
    })?;
    if file.version != VERSION && !file.groups.is_empty() {
        bail!(
            "{} was written by an older allocsoak (its group ids do not name their allocator); rewrite it with `allocsoak triage known --state <dir> --out FILE`",
            from.display()
        );
    }
    for entry in &file.groups {
        materialize(entry, state)
            .with_context(|| format!("group {} in {}", entry.id, from.display()))?;
        land(state, store, &entry.id, &entry.status, &entry.merged)?;
    }
    Ok(file.groups.len())
}

/// Copies every group folder of another state dir (with its status).
fn import_state(from: &Path, state: &StateDir, store: &Store) -> Result<usize> {
    let source = StateDir::open_to_read(from)?;
    let source_store = Store::open_read_only(&source.store())?;
    let mut n = 0;
    for row in source_store.groups()? {
        if row.kind == "rss-drift" {
            continue;
        }
        let from_dir = source.crash_group(&row.id);
        let to_dir = state.crash_group(&row.id);
        let work = state::tmp_path(&to_dir);
        copy_dir(&from_dir, &work)?;
        // The record's paths name the folder it was filed in.
        let record_path = work.join("group.toml");
        let text = std::fs::read_to_string(&record_path)
            .with_context(|| format!("failed to read {}", record_path.display()))?;
        let new = to_dir.to_string_lossy();
        let mut record: GroupFile = toml::from_str(&text)
            .with_context(|| format!("{} is not a group record", record_path.display()))?;
        record.repro = replace_folder(&record.repro, &from_dir, &new);
        record.minimized = record
            .minimized
            .map(|m| replace_folder(&m, &from_dir, &new));
        state::write_atomic(&record_path, toml::to_string(&record)?.as_bytes())?;
        rename(&work, &to_dir)?;
        let merged = source_store.merged_groups_of(&row.id)?;
        land(state, store, &row.id, &row.status, &merged)?;
        n += 1;
    }
    Ok(n)
}

/// Puts a group folder that is now in place into the store, with
/// `status` and the groups `merged` into it.
fn land(
    state: &StateDir,
    store: &Store,
    id: &str,
    status: &str,
    merged: &[MergedGroup],
) -> Result<()> {
    crate::pipeline::intake::refill(state, store, id)?;
    for m in merged {
        store.add_merged_group(m, id)?;
    }
    store.set_status(id, status)
}

/// Builds a file entry's group folder (aside, then renamed into place).
fn materialize(e: &Entry, state: &StateDir) -> Result<()> {
    let dir = state.crash_group(&e.id);
    let work = state::tmp_path(&dir);
    std::fs::create_dir_all(&work)
        .with_context(|| format!("failed to create {}", work.display()))?;
    let decode = |what: &str, b64: &str| {
        BASE64
            .decode(b64.trim())
            .with_context(|| format!("its {what} is not base64"))
    };
    state::write_atomic(&work.join("original"), &decode("input", &e.input)?)?;
    if let Some(program) = &e.program {
        state::write_atomic(&work.join("minimized"), program.as_bytes())?;
    }
    if !e.history.is_empty() {
        std::fs::create_dir_all(work.join("history"))?;
        for (i, h) in e.history.iter().enumerate() {
            let path = work
                .join("history")
                .join(crate::pipeline::sequence::file_name(i));
            state::write_atomic(&path, &decode("history", h)?)?;
        }
    }
    if let Some(t) = &e.tolerate {
        state::write_atomic(&work.join("tolerate"), t.as_bytes())?;
    }
    let folder = dir.to_string_lossy();
    let record = GroupFile {
        signature: e.signature.clone(),
        kind: e.kind.clone(),
        title: e.title.clone(),
        tolerance_key: e.tolerance_key.clone(),
        target: e.target.clone(),
        allocator: e.allocator.clone(),
        engine: e.engine.clone(),
        first_seen: e.first_seen,
        minimized: e
            .program
            .as_ref()
            .map(|_| dir.join("minimized").to_string_lossy().into_owned()),
        repro: e.repro.replace("{group}", &folder),
        race_rate: None,
        history: e.history.len(),
        history_shrunk: None,
        minimized_ops: None,
        path: e.path,
        alt_titles: e.alt_titles.clone(),
    };
    state::write_atomic(
        &work.join("group.toml"),
        toml::to_string(&record)?.as_bytes(),
    )?;
    rename(&work, &dir)
}

/// The known-groups file of a state dir's groups (all but drift ones).
pub fn write(state: &StateDir, store: &Store, out: &Path) -> Result<usize> {
    let mut groups = Vec::new();
    for row in store.groups()? {
        if row.kind == "rss-drift" {
            continue;
        }
        let g = Group::find(state, store, &row.id)?;
        groups.push(entry(&g, store)?);
    }
    groups.sort_by(|a, b| a.id.cmp(&b.id));
    let n = groups.len();
    let text = format!(
        "{HEADER}\n{}",
        toml::to_string(&KnownFile {
            version: VERSION,
            groups
        })?
    );
    state::write_atomic(out, text.as_bytes())?;
    Ok(n)
}

fn entry(g: &Group, store: &Store) -> Result<Entry> {
    let read =
        |p: &Path| std::fs::read(p).with_context(|| format!("failed to read {}", p.display()));
    let text = |p: &Path| -> Result<Option<String>> {
        Ok(if p.is_file() {
            Some(String::from_utf8_lossy(&read(p)?).into_owned())
        } else {
            None
        })
    };
    let history = crate::pipeline::sequence::files(&g.dir)?
        .iter()
        .map(|h| Ok(BASE64.encode(read(h)?)))
        .collect::<Result<Vec<_>>>()?;
    Ok(Entry {
        id: g.row.id.clone(),
        status: g.row.status.clone(),
        kind: g.row.kind.clone(),
        title: g.row.title.clone(),
        signature: g.row.signature.clone(),
        tolerance_key: g.row.tolerance_key.clone(),
        target: g.slot.target.clone(),
        allocator: g.slot.allocator.clone(),
        engine: g.slot.engine.clone(),
        first_seen: g.row.first_seen,
        repro: replace_folder(&g.row.repro, &g.dir, "{group}"),
        input: BASE64.encode(read(&g.dir.join("original"))?),
        program: text(&g.dir.join("minimized"))?,
        history,
        tolerate: text(&g.dir.join("tolerate"))?,
        path: g.row.path,
        alt_titles: g.row.alt_titles.clone(),
        merged: store.merged_groups_of(&g.row.id)?,
    })
}

/// `text` with the folder `dir` (as given, or with its symlinks resolved,
/// as a soak may have been given either) named `with` instead.
fn replace_folder(text: &str, dir: &Path, with: &str) -> String {
    let mut text = text.replace(dir.to_string_lossy().as_ref(), with);
    if let Ok(real) = dir.canonicalize() {
        text = text.replace(real.to_string_lossy().as_ref(), with);
    }
    text
}

/// Copies a folder's files (one level of sub-folders: `history/`, `inputs/`).
fn copy_dir(from: &Path, to: &Path) -> Result<()> {
    std::fs::create_dir_all(to).with_context(|| format!("failed to create {}", to.display()))?;
    for entry in
        std::fs::read_dir(from).with_context(|| format!("failed to read {}", from.display()))?
    {
        let entry = entry?;
        let path = entry.path();
        if path.is_dir() {
            copy_dir(&path, &to.join(entry.file_name()))?;
        } else {
            state::copy_atomic(&path, &to.join(entry.file_name()))?;
        }
    }
    Ok(())
}

fn rename(from: &Path, to: &Path) -> Result<()> {
    std::fs::rename(from, to)
        .with_context(|| format!("failed to rename {} to {}", from.display(), to.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A code-path group of `zoo:a` whose calls ran `frames`, filed in
    /// `state`'s store with its folder; returns its id.
    fn file_group(state: &StateDir, store: &Store, frames: &[&str]) -> String {
        let key = format!(
            "impossible-success\nzoo:a\nsize N must fail\n{}",
            frames.join("\n")
        );
        let sig = report::Signature::from_key(&key, true).unwrap();
        let id = sig.id();
        let dir = state.crash_group(&id);
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("original"), b"input").unwrap();
        let record = GroupFile {
            signature: sig.key(),
            kind: sig.kind.clone(),
            title: sig.title(),
            tolerance_key: None,
            target: "alloc_ops".into(),
            allocator: "zoo:a".into(),
            engine: "libfuzzer".into(),
            first_seen: 1,
            minimized: None,
            repro: format!("allocsoak repro {}", dir.display()),
            race_rate: None,
            history: 0,
            history_shrunk: None,
            minimized_ops: None,
            path: true,
            alt_titles: Vec::new(),
        };
        std::fs::write(dir.join("group.toml"), toml::to_string(&record).unwrap()).unwrap();
        crate::pipeline::intake::refill(state, store, &id).unwrap();
        id
    }

    #[test]
    fn a_merged_group_stays_merged_in_a_gate_from_its_file_or_state_dir() {
        let dir = tempfile::tempdir().unwrap();
        let soak = StateDir::open_for_soak(&dir.path().join("soak")).unwrap();
        let mut store = Store::open(&soak.store()).unwrap();
        let kept = file_group(&soak, &store, &["alloc", "class_of", "realloc"]);
        let merged = file_group(&soak, &store, &["alloc", "class_of", "realloc_null"]);
        store.merge_group(&merged, &kept).unwrap();

        let file = dir.path().join("known.toml");
        assert_eq!(write(&soak, &store, &file).unwrap(), 1);
        let from_state = dir.path().join("soak");
        for (name, from) in [("gate-file", &file), ("gate-state", &from_state)] {
            let gate = StateDir::open_for_soak(&dir.path().join(name)).unwrap();
            let gate_store = Store::open(&gate.store()).unwrap();
            assert_eq!(import(from, &gate, &gate_store).unwrap(), 1, "{name}");
            // A crash with the merged group's signature, or a path beside
            // it, files into the group that was kept.
            assert_eq!(
                gate_store.merged_into(&merged).unwrap(),
                Some(kept.clone()),
                "{name}"
            );
            let paths = gate_store.merged_paths().unwrap();
            assert_eq!(paths.len(), 1, "{name}");
            assert_eq!(paths[0].0, kept, "{name}");
        }
    }
}
