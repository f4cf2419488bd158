//! Where the harness puts what the pipeline reads: sound violations saved
//! while fuzzing, their counts, and the record of the violation that ended
//! a replay.
//!
//! - `ALLOCSOAK_FINDINGS=<dir>` (set by the soak for each slice): a
//!   violation that leaves the heap sound never ends the process. The
//!   input that showed a key first is saved as `<dir>/<key hash>-<input
//!   hash>` (the input's bytes) with its [`report::Record`] beside it
//!   (`….json`), [`SAVED_PER_KEY`] input per key and process, and with
//!   `ALLOCSOAK_CLAIMS=<dir>` one per key among all the processes that
//!   share that folder; every later one is only counted. The counts of
//!   every key the process went on past (tolerated or saved) are in
//!   `<dir>/counts-<pid>.json`, rewritten at each power of two. Each file
//!   is written aside and renamed in, record before input, so a reader
//!   that sees an input sees its record, and a kill leaves no
//!   half-written file.
//!   What ends the process, if anything does (a violation, or a sanitizer
//!   report with a tolerance key), leaves its key (and, for a violation of
//!   a call, its kind) as `<dir>/ending-<pid>.json` ([`report::Ending`]).
//! - `ALLOCSOAK_RECORD=<file>` (set by replays): the violation that ends
//!   the run is written there as a [`report::Record`] before the line is printed,
//!   so the pipeline signs the typed record, not the log.

use std::cell::Cell;
use std::collections::HashMap;
use std::hash::{DefaultHasher, Hash, Hasher};
use std::path::Path;
use std::sync::OnceLock;

use crate::violation::Report;

/// Inputs saved per violation key and process; the rest are counted.
pub const SAVED_PER_KEY: u64 = 1;

/// The findings folder the process's settings name (`ALLOCSOAK_FINDINGS`).
fn folder() -> Option<&'static Path> {
    crate::settings::get().findings.as_deref()
}

/// Whether sound violations are saved as findings and the process goes
/// on (`ALLOCSOAK_FINDINGS` is set).
pub fn active() -> bool {
    folder().is_some()
}

thread_local! {
    /// The input the fuzz target is running on this thread, while it runs.
    static INPUT: Cell<Option<(*const u8, usize)>> = const { Cell::new(None) };
}

/// Runs `f` with `data` as the input a saved finding names.
pub fn with_input<R>(data: &[u8], f: impl FnOnce() -> R) -> R {
    struct Clear;
    impl Drop for Clear {
        fn drop(&mut self) {
            INPUT.with(|i| i.set(None));
        }
    }
    INPUT.with(|i| i.set(Some((data.as_ptr(), data.len()))));
    let _clear = Clear;
    f()
}

fn input() -> Option<Vec<u8>> {
    let (ptr, len) = INPUT.with(Cell::get)?;
    // SAFETY: `with_input` sets the pointer from a live `&[u8]` and clears
    // it when `f` returns or unwinds, and this thread is inside `f`.
    Some(unsafe { std::slice::from_raw_parts(ptr, len) }.to_vec())
}

fn hash(bytes: &[u8]) -> u64 {
    let mut h = DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}

/// Writes `bytes` to `path` by way of a temporary name in its folder.
fn write_aside(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let name = path.file_name().unwrap_or_default().to_string_lossy();
    let tmp = path.with_file_name(format!(".tmp-{}-{name}", std::process::id()));
    std::fs::write(&tmp, bytes)?;
    std::fs::rename(&tmp, path)
}

fn complain(what: &str, path: &Path, e: std::io::Error) {
    static ONCE: OnceLock<()> = OnceLock::new();
    if ONCE.set(()).is_ok() {
        eprintln!(
            "allocsoak: cannot write {what} {}: {e}; fuzzing goes on",
            path.display()
        );
    }
}

/// Saves the running input and `report`'s record for `key`, the `seen`th
/// time the process saw it (nothing past [`SAVED_PER_KEY`], or off the
/// fuzzing thread, where no input is known); of a violation that leaves
/// the heap sound, only the first key of its family the process saves
/// ([`SAVED_FAMILIES`]).
pub fn save(report: &Report, key: &str, seen: u64) {
    let (Some(dir), Some(input)) = (folder(), input()) else {
        return;
    };
    if seen > SAVED_PER_KEY {
        return;
    }
    let record = report.record();
    let mut families = SAVED_FAMILIES.lock().unwrap_or_else(|e| e.into_inner());
    let family = record.sound.then_some(&record.family);
    if family.is_some_and(|f| families.contains(f)) || !claimed(key) {
        return;
    }
    if let Some(f) = family {
        families.insert(f.clone());
    }
    let name = format!("{:016x}-{:016x}", hash(key.as_bytes()), hash(&input));
    let record_path = dir.join(format!("{name}.json"));
    let saved = std::fs::create_dir_all(dir)
        .and_then(|()| write_aside(&record_path, record.to_json().as_bytes()))
        .and_then(|()| write_aside(&dir.join(&name), &input));
    if let Err(e) = saved {
        complain("the finding", &dir.join(name), e);
    }
}

/// The families ([`report::key::family`]: a key without its size tiers)
/// of sound violations this process saved a finding of. One process
/// saves one key per family (its first); the others of the family are
/// counted. A bug met over
/// many size tiers and calls saved one input per key, and a soak's first
/// minute parked 77 findings of 54 keys, 71 keys of 30 families in all
/// (docs/benchmarks/2026-12-04-stop-67.md): each waits for a replay
/// before the store knows its path. The family's other keys are saved by
/// the processes after it, once what this one saved is filed, a key the
/// store knows is tolerated and no longer takes the family's turn. The
/// claim of a key this process does not save is left for them.
static SAVED_FAMILIES: std::sync::Mutex<std::collections::BTreeSet<String>> =
    std::sync::Mutex::new(std::collections::BTreeSet::new());

/// Claims `key` in the claims folder the settings name
/// (`ALLOCSOAK_CLAIMS`), which every process fuzzing one allocator in a
/// soak shares (its slices side by side, libFuzzer's `-fork` children):
/// false when another process saved it first, and this one only counts
/// it (one saved input per key is what filing it takes). Without the
/// folder, or when the claim cannot be written, the key is this
/// process's to save: nothing is lost for a claim.
fn claimed(key: &str) -> bool {
    claimed_in(crate::settings::get().claims.as_deref(), key)
}

fn claimed_in(dir: Option<&Path>, key: &str) -> bool {
    let Some(dir) = dir else {
        return true;
    };
    let claim = dir.join(format!("{:016x}", hash(key.as_bytes())));
    if std::fs::create_dir_all(dir).is_err() {
        return true;
    }
    let made = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&claim);
    !matches!(made, Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists)
}

/// Rewrites this process's counts file in the findings folder, if any.
pub(crate) fn write_counts(counts: &HashMap<String, u64>) {
    let Some(dir) = folder() else {
        return;
    };
    let text = serde_json::to_string(counts).expect("a map of strings serializes");
    write_own(dir, "counts-", &text, "the counts");
}

/// Writes `json` as this process's `<prefix><pid>.json` in the findings
/// folder `dir`, aside and renamed in.
fn write_own(dir: &Path, prefix: &str, json: &str, what: &str) {
    let path = dir.join(format!("{prefix}{}.json", std::process::id()));
    let written = std::fs::create_dir_all(dir).and_then(|()| write_aside(&path, json.as_bytes()));
    if let Err(e) = written {
        complain(what, &path, e);
    }
}

/// Where `ALLOCSOAK_RECORD` says the ending violation's record goes (the
/// process's settings).
fn record_file() -> Option<&'static Path> {
    crate::settings::get().record.as_deref()
}

/// Whether this process is a replay that records what ends it.
pub(crate) fn recording() -> bool {
    record_file().is_some()
}

/// Writes `report`'s record where `ALLOCSOAK_RECORD` says, if it does.
pub(crate) fn write_record(report: &Report) {
    let Some(path) = record_file() else {
        return;
    };
    if let Err(e) = write_aside(path, report.record().to_json().as_bytes()) {
        complain("the record", path, e);
    }
}

/// What the name of an ending key in the findings folder starts with.
const ENDING: &str = "ending-";

/// While fuzzing, writes what ends this process (the violation or
/// sanitizer report, [`report::Ending`]) into the findings folder as
/// `ending-<pid>.json`: the soak gets past it in the allocator's next
/// slices while the crash waits to be filed.
pub(crate) fn write_ending(ending: &report::Ending) {
    let Some(dir) = folder() else {
        return;
    };
    let json = serde_json::to_string(ending).expect("an ending serializes");
    write_own(dir, ENDING, &json, "the ending key");
}

/// What ended the processes of a findings folder `dir` ([`write_ending`]).
/// One that does not read is skipped: its crash is filed all the same,
/// only not got past before.
pub fn endings(dir: &Path) -> Vec<report::Ending> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| {
            let name = e.file_name();
            let name = name.to_string_lossy();
            name.starts_with(ENDING) && name.ends_with(".json")
        })
        .filter_map(|e| std::fs::read_to_string(e.path()).ok())
        .filter_map(|text| serde_json::from_str(&text).ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_key_is_saved_by_the_first_process_to_claim_it() {
        let dir = tempfile::tempdir().unwrap();
        let claims = dir.path().join("claims");
        assert!(claimed_in(Some(&claims), "alignment in alloc: a"));
        assert!(!claimed_in(Some(&claims), "alignment in alloc: a"));
        assert!(claimed_in(Some(&claims), "alignment in alloc: b"));
        assert!(claimed_in(None, "alignment in alloc: a"));
        // A claim that cannot be written loses nothing: the key is saved.
        let file = dir.path().join("a-file");
        std::fs::write(&file, "").unwrap();
        assert!(claimed_in(Some(&file), "alignment in alloc: a"));
    }
}
