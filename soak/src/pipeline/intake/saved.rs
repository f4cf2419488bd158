//! A findings folder's files, as the harness writes them
//! (`shadow::findings`): each input, and its record beside it.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result};

/// The record the harness saved beside a finding's input
/// (`<input>.json`, see `shadow::findings`), if there is one that reads.
pub fn saved_record(input: &Path) -> Option<report::Record> {
    let text = std::fs::read_to_string(record_path(input)).ok()?;
    report::Record::from_json(&text).ok()
}

/// The inputs in `dir` (a slice's `findings/`, a pending folder's
/// `artifacts/` or `findings/`, a batch replay's saves), sorted: every
/// file but the records beside them and those still being written
/// (`.tmp-…`); none when it is missing.
pub fn inputs(dir: &Path) -> Result<Vec<PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(e).with_context(|| format!("failed to read {}", dir.display())),
    };
    let mut files = Vec::new();
    for entry in entries {
        let path = entry?.path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if !(name.starts_with('.') || name.ends_with(".json")) {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

/// Where the harness keeps the record of a saved finding `input`.
pub fn record_path(input: &Path) -> PathBuf {
    let mut name = input.file_name().unwrap_or_default().to_os_string();
    name.push(".json");
    input.with_file_name(name)
}
