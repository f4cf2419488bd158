//! End-to-end: honggfuzz as a soak engine. A soak with only honggfuzz
//! slots files a planted bug as the group libFuzzer files for it (its
//! crash is replayed and signed on the libFuzzer build), records the
//! honggfuzz slices' exec/s and coverage, and merges their new inputs into
//! the shared corpus. Needs `allocsoak build --engine honggfuzz`
//! (`scripts/hfuzz-build`): without the honggfuzz binaries the soak, and
//! this test, fail.

mod common;

use std::collections::BTreeSet;
use std::path::Path;

use common::{count, db, groups, soak, soak_until, ONE_AT_A_TIME};

const ALLOCATOR: &str = "zoo:short-realloc-copy";

/// The ids of the `realloc-prefix` groups a soak filed.
fn realloc_prefix_groups(state: &Path) -> BTreeSet<String> {
    groups(state)
        .into_iter()
        .filter(|g| g.1 == "realloc-prefix")
        .map(|g| g.0)
        .collect()
}

#[test]
fn honggfuzz_slots_file_libfuzzers_group_and_grow_the_shared_corpus() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();

    // honggfuzz alone, two slots of alloc_ops side by side: the planted
    // bug (the seeds reach it in honggfuzz's dry run) and `system`, which
    // files nothing and fuzzes the whole slice.
    let state = dir.path().join("honggfuzz");
    let out = soak(
        &state,
        &[
            "--target",
            "alloc_ops",
            "--allocator",
            ALLOCATOR,
            "--allocator",
            "system",
            "--engine",
            "honggfuzz",
            "--jobs",
            "2",
            "--duration",
            "45",
            "--slice-secs",
            "45",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let engines = count(
        &state,
        "SELECT COUNT(*) FROM slot WHERE engine != 'honggfuzz' AND engine != 'drift'",
    );
    assert_eq!(engines, 0, "{stdout}");
    let by_honggfuzz = realloc_prefix_groups(&state);
    assert!(!by_honggfuzz.is_empty(), "{:?}\n{stdout}", groups(&state));
    // Filed under its honggfuzz slot, and its record says so.
    for id in &by_honggfuzz {
        let engine: String = db(&state)
            .query_row(
                "SELECT s.engine FROM crash_group g JOIN slot s ON s.id = g.slot_id WHERE g.id = ?1",
                [id],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(engine, "honggfuzz");
        let record =
            std::fs::read_to_string(state.join("crashes").join(id).join("group.toml")).unwrap();
        assert!(record.contains("engine = \"honggfuzz\""), "{record}");
    }

    // A slice it ended says which bug (its target printed the violation
    // into honggfuzz's log), and the next ones got past the filed ones
    // (`ALLOCSOAK_TOLERATE`) and counted them.
    let named = count(
        &state,
        "SELECT COUNT(*) FROM slice WHERE outcome = 'realloc-prefix'",
    );
    assert!(named > 0, "{stdout}");
    let tolerated = count(&state, "SELECT COALESCE(SUM(count), 0) FROM tolerated");
    assert!(tolerated > 0, "{stdout}");

    // The `system` slot's slice: its exec/s and coverage are in the store,
    // and what it found merged into the target's corpus.
    let slice = "FROM slice l JOIN slot s ON s.id = l.slot_id \
                 WHERE s.allocator = 'system' AND l.ended IS NOT NULL AND l.fuzz_secs > 0";
    assert!(
        count(&state, &format!("SELECT COUNT(*) {slice}")) >= 1,
        "{stdout}"
    );
    for what in [
        "l.execs",
        "CAST(l.execs_per_sec AS INTEGER)",
        "l.cov",
        "l.ft",
    ] {
        let most = count(&state, &format!("SELECT MAX({what}) {slice}"));
        assert!(most > 0, "no honggfuzz slice recorded {what}\n{stdout}");
    }
    let merged = count(&state, &format!("SELECT SUM(l.merged_units) {slice}"));
    assert!(
        merged > 0,
        "no honggfuzz input reached the corpus\n{stdout}"
    );
    let corpus = std::fs::read_dir(state.join("corpus/alloc_ops"))
        .unwrap()
        .count();
    assert!(
        corpus as i64 >= merged,
        "{corpus} inputs in the corpus, {merged} merged"
    );

    // libFuzzer on the bug's slot, in a state dir of its own, files a
    // group honggfuzz filed: one bug is one group whichever engine finds it.
    let libfuzzer = dir.path().join("libfuzzer");
    soak_until(
        &libfuzzer,
        &[
            "--target",
            "alloc_ops",
            "--allocator",
            ALLOCATOR,
            "--jobs",
            "1",
            "--duration",
            "45",
            "--slice-secs",
            "15",
        ],
        |s| {
            let filed = realloc_prefix_groups(s);
            by_honggfuzz.intersection(&filed).next().is_some()
        },
    );
    let by_libfuzzer = realloc_prefix_groups(&libfuzzer);
    assert!(
        by_honggfuzz.intersection(&by_libfuzzer).next().is_some(),
        "honggfuzz filed {by_honggfuzz:?}, libFuzzer {by_libfuzzer:?}\n{stdout}"
    );
}
