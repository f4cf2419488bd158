//! `triage verify` follows an author's fix: a group whose bug is gone is
//! marked fixed, and marked regressed when the bug comes back. The
//! allocator is a C library the test rebuilds, with and without its
//! planted bug, as an author would rebuild theirs.

mod common;

use std::path::Path;
use std::process::Command;

fn build_tiny(out: &Path, planted: bool) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let tmp = out.with_extension("tmp.so");
    // Plain, which the shadow model checks as well: what matters here is
    // triage (dylib_coverage.rs runs an instrumented build).
    let mut cmd = Command::new("cc");
    cmd.args(["-O1", "-fPIC", "-shared", "-o"])
        .arg(&tmp)
        .arg(root.join("shadow/tests/testdata/tiny_alloc.c"));
    if planted {
        cmd.arg("-DPLANTED_BUG");
    }
    assert!(cmd.status().unwrap().success());
    std::fs::rename(tmp, out).unwrap();
}

fn allocsoak(args: &[&str], state: &Path) -> (bool, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_allocsoak"))
        .args(args)
        .arg("--state")
        .arg(state)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

#[test]
fn verify_marks_a_fix_fixed_and_its_return_regressed() {
    let dir = tempfile::tempdir().unwrap();
    let lib = dir.path().join("libtiny.so");
    let state = dir.path().join("state");
    build_tiny(&lib, true);
    let allocator = format!("dylib:{}:t_", lib.display());
    let args = [
        "--target",
        "alloc_ops",
        "--allocator",
        &allocator,
        "--jobs",
        "1",
        "--duration",
        "30",
    ];
    common::soak_until(&state, &args, |s| {
        common::count(s, "SELECT COUNT(*) FROM crash_group") > 0
    });
    let db = rusqlite::Connection::open(state.join("store.sqlite")).unwrap();
    // The bug shows through alloc, alloc-zeroed and realloc: a group each.
    let (id, kind): (String, String) = db
        .query_row(
            "SELECT id, kind FROM crash_group ORDER BY first_seen LIMIT 1",
            [],
            |r| Ok((r.get(0)?, r.get(1)?)),
        )
        .expect("the planted bug was not filed");
    assert_eq!(kind, "alignment");

    build_tiny(&lib, false);
    let (ok, text) = allocsoak(&["triage", "verify"], &state);
    assert!(
        ok && text.contains(&format!("verify {id} new -> fixed (0 of 3")),
        "{text}"
    );
    let (_, fixed) = allocsoak(&["triage", "--status", "fixed"], &state);
    assert!(fixed.contains(&id), "{fixed}");
    let (reproduces, text) = allocsoak(&["repro", &id], &state);
    assert!(reproduces && text.contains("does not reproduce"), "{text}");

    build_tiny(&lib, true);
    let (ok, text) = allocsoak(&["triage", "verify"], &state);
    let (_, replay) = allocsoak(&["repro", &id], &state);
    assert!(
        ok && text.contains(&format!("verify {id} fixed -> regressed (3 of 3")),
        "{text}\n{replay}"
    );
}

/// A replay names the call that lost a block: a shrinking realloc that
/// never frees the old block is that realloc's `leak`, however it was
/// called (the plain realloc's lost block once passed for reachable: its
/// address was left over in the unused bytes of the leak kept for it).
#[test]
fn a_replay_names_the_realloc_that_lost_a_block() {
    let dir = tempfile::tempdir().unwrap();
    for call in ["realloc", "realloc-zeroed"] {
        let input = dir.path().join(format!("{call}.txt"));
        let program =
            format!("target alloc_ops\nalloc size=4096 align=8\n{call} slot=newest to=40\n");
        std::fs::write(&input, program).unwrap();
        let out = Command::new(env!("CARGO_BIN_EXE_allocsoak"))
            .args([
                "repro",
                "--target",
                "alloc_ops",
                "--allocator",
                "zoo:leak-on-shrink",
            ])
            .arg(&input)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{call}: {text}");
        assert!(
            text.contains("leak: leak: block N (size N) given back to realloc was never freed"),
            "{call}: {text}"
        );
    }
}
