//! Saved findings shown again in one replay. A fuzz process saves each
//! new key of a sound violation with its record, but without the code
//! path a signature is made of (the fuzzer does not watch the
//! allocator's counters per call); each saved finding then needs a
//! replay of its own, a process start or more apiece. Sound violations
//! leave the heap as it was, so one process can replay many of them in
//! turn, saving each one's record with its path, and each that shows its
//! key again is signed from that record ([`super::file`]).

use std::collections::{BTreeSet, HashMap};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use anyhow::{Context, Result};
use report::Record;

use super::groups::group_of_record;
use super::{saved_record, Source};
use crate::foundation::lock::lock;
use crate::foundation::store::Store;

/// Saved findings replayed in one process, at most (one command line
/// carries them).
const PER_PROCESS: usize = 64;

/// The saved findings among `inputs` whose violation leaves the heap
/// sound, replayed [`PER_PROCESS`] at a time in one process each, with
/// `work` as scratch: for each one that showed its saved key again, the
/// record of that showing, code path included. An input missing from the
/// answer (its replay showed something else first, or the process ended
/// before it) is filed on its own, as before.
pub fn show_saved(
    store: &Mutex<Store>,
    src: &Source,
    inputs: &[PathBuf],
    work: &Path,
) -> Result<HashMap<PathBuf, Record>> {
    let mut saved: Vec<(&PathBuf, Record)> = inputs
        .iter()
        .filter_map(|i| saved_record(i).map(|r| (i, r)))
        .filter(|(_, r)| r.sound)
        .collect();
    // A key a known group was reached by needs no replay at all.
    {
        let store = lock(store);
        let mut unknown = Vec::with_capacity(saved.len());
        for (input, record) in saved {
            if group_of_record(&store, &record)?.is_none() {
                unknown.push((input, record));
            }
        }
        saved = unknown;
    }
    let mut shown = HashMap::new();
    // One alone costs what its own replay would.
    if saved.len() < 2 {
        return Ok(shown);
    }
    for chunk in saved.chunks(PER_PROCESS) {
        shown.extend(show_chunk(src, chunk, work)?);
    }
    crate::foundation::state::remove_scratch(work)?;
    Ok(shown)
}

fn show_chunk(
    src: &Source,
    saved: &[(&PathBuf, Record)],
    work: &Path,
) -> Result<HashMap<PathBuf, Record>> {
    if work.exists() {
        crate::foundation::state::remove_scratch(work)?;
    }
    let findings = work.join("findings");
    std::fs::create_dir_all(&findings)
        .with_context(|| format!("failed to create {}", findings.display()))?;
    // What the slice went past, but the keys replayed here: those are
    // saved again, with their paths, not counted.
    let keys: BTreeSet<&str> = saved.iter().map(|(_, r)| r.key.as_str()).collect();
    let listed = match src.tolerate {
        Some(t) => {
            std::fs::read_to_string(t).with_context(|| format!("failed to read {}", t.display()))?
        }
        None => String::new(),
    };
    let tolerate: String = listed
        .lines()
        .filter(|l| !keys.contains(l))
        .map(|l| format!("{l}\n"))
        .collect();
    let tolerate_file = work.join("tolerate");
    crate::foundation::state::write_atomic(&tolerate_file, tolerate.as_bytes())?;
    let inputs: Vec<&Path> = saved.iter().map(|(i, _)| i.as_path()).collect();
    src.replayer()
        .replay_saving(&inputs, &tolerate_file, &findings)
        .map_err(|e| crate::engines::libfuzzer::replay_error(e, src.binary))?;
    // What the replay saved, by the input's bytes.
    let mut by_input: HashMap<Vec<u8>, Vec<Record>> = HashMap::new();
    for path in super::inputs(&findings)? {
        if let (Some(record), Ok(bytes)) = (saved_record(&path), std::fs::read(&path)) {
            by_input.entry(bytes).or_default().push(record);
        }
    }
    let mut shown = HashMap::new();
    for (input, record) in saved {
        let again = std::fs::read(input)
            .ok()
            .and_then(|bytes| by_input.remove(&bytes))
            .and_then(|records| records.into_iter().find(|r| r.key == record.key))
            .filter(|again| !again.path.is_empty());
        if let Some(again) = again {
            shown.insert(input.to_path_buf(), again);
        }
    }
    Ok(shown)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    fn record(key: &str, sound: bool) -> Record {
        Record {
            kind: "alignment".into(),
            key: key.into(),
            allocator: "umm".into(),
            reference: false,
            op_index: 0,
            op: "alloc size=1 align=1".into(),
            site: "alloc size 0..64 align ..16".into(),
            sound,
            line: String::new(),
            path: Vec::new(),
            what: "alignment: block N".into(),
            family: String::new(),
        }
    }

    /// A stand-in fuzz binary: refuses a tolerate file that lists a key
    /// being replayed; saves the first input's record with a path, the
    /// second's with another key, and nothing for the third (as if the
    /// process had ended before it).
    const BINARY: &str = r#"#!/bin/sh
grep -q "^alignment in alloc" "$ALLOCSOAK_TOLERATE" && exit 9
grep -q "^known" "$ALLOCSOAK_TOLERATE" || exit 9
n=0
for input in "$@"; do
  case "$input" in -*) continue;; esac
  n=$((n+1))
  cp "$input" "$ALLOCSOAK_FINDINGS/s-$n"
  case $n in
    1) sed 's/"what"/"path":["umm_malloc"],"what"/' "$input.json" > "$ALLOCSOAK_FINDINGS/s-$n.json";;
    2) sed 's/alignment in alloc/null in alloc/; s/"what"/"path":["umm_free"],"what"/' "$input.json" > "$ALLOCSOAK_FINDINGS/s-$n.json";;
    *) rm "$ALLOCSOAK_FINDINGS/s-$n";;
  esac
done
exit 1
"#;

    #[test]
    fn saved_findings_shown_again_in_one_process_keep_their_paths() {
        let dir = tempfile::tempdir().unwrap();
        let binary = dir.path().join("fuzz");
        std::fs::write(&binary, BINARY).unwrap();
        std::fs::set_permissions(&binary, std::fs::Permissions::from_mode(0o755)).unwrap();
        let tolerate = dir.path().join("tolerate");
        std::fs::write(
            &tolerate,
            "known in free: x\nalignment in alloc size 0..64 align ..16: a\n",
        )
        .unwrap();
        let mut inputs = Vec::new();
        for (i, (key, sound)) in [
            ("alignment in alloc size 0..64 align ..16: a", true),
            ("alignment in alloc size 65..4K align ..16: b", true),
            ("alignment in alloc size 4K..256K align ..16: c", true),
            ("overlap in alloc size 0..64 align ..16: d", false),
        ]
        .into_iter()
        .enumerate()
        {
            let input = dir.path().join(format!("findings/{i}"));
            std::fs::create_dir_all(input.parent().unwrap()).unwrap();
            std::fs::write(&input, format!("input {i}")).unwrap();
            std::fs::write(
                super::super::record_path(&input),
                record(key, sound).to_json(),
            )
            .unwrap();
            inputs.push(input);
        }
        let store = Mutex::new(Store::open(&dir.path().join("store.sqlite")).unwrap());
        let src = Source {
            target: shadow::Target::AllocOps,
            allocator: "umm",
            engine: "libfuzzer",
            slot_id: 1,
            slice_id: Some(1),
            binary: &binary,
            tolerate: Some(&tolerate),
            history: None,
            timeout_secs: 5,
            rss_limit_mb: 2048,
            budget: triage::budget::Budget {
                until: None,
                stop: None,
            },
        };
        let work = dir.path().join("batch");
        let shown = show_saved(&store, &src, &inputs, &work).unwrap();
        // The first showed its key again, with its path; the second showed
        // another key, the third nothing, and the fourth (memory in doubt
        // after it) was never replayed with the others.
        assert_eq!(shown.len(), 1, "{shown:?}");
        assert_eq!(shown[&inputs[0]].path, ["umm_malloc"]);
        assert!(!work.exists());
    }
}
