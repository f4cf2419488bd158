//! End-to-end: `allocsoak triage import` files a crash found elsewhere
//! (here: one the quick gate filed in another state dir) like a local one:
//! replayed, signed, the same group id; a second import is the same group
//! again; the file given stays where it was.

mod common;

use common::{allocsoak, groups, ONE_AT_A_TIME};

#[test]
fn an_imported_crash_is_filed_like_a_local_one() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let allocator = "zoo:free-null-panics";
    // A crash from "elsewhere": the gate files it in a state dir of its own.
    let out = allocsoak()
        .args(["quick", "--target", "alloc_ops", "--allocator", allocator])
        .args(["--secs", "30", "--jobs", "1", "--out"])
        .arg(dir.path().join("elsewhere"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
    let elsewhere = dir.path().join("elsewhere/latest");
    let theirs = groups(&elsewhere);
    assert_eq!(theirs.len(), 1, "{theirs:?}");
    let crash = dir.path().join("crash-from-clusterfuzz");
    std::fs::copy(
        elsewhere
            .join("crashes")
            .join(&theirs[0].0)
            .join("original"),
        &crash,
    )
    .unwrap();

    let state = dir.path().join("state");
    let import = || {
        allocsoak()
            .args([
                "triage",
                "import",
                "--target",
                "alloc_ops",
                "--allocator",
                allocator,
            ])
            .arg("--state")
            .arg(&state)
            .arg(&crash)
            .output()
            .unwrap()
    };
    let out = import();
    let log =
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains(&format!("new group {} [panic]", theirs[0].0)),
        "{log}"
    );
    let ours = groups(&state);
    assert_eq!(ours.len(), 1, "{ours:?}");
    assert_eq!(ours[0].0, theirs[0].0, "imported as another group");
    assert!(
        ours[0]
            .3
            .contains("ALLOCSOAK_ALLOCATOR='zoo:free-null-panics'"),
        "{}",
        ours[0].3
    );
    assert!(crash.is_file(), "the imported file was moved");
    assert!(state
        .join("crashes")
        .join(&ours[0].0)
        .join("REPORT.md")
        .is_file());

    let out = import();
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains(&format!("known group {}", theirs[0].0)),
        "{log}"
    );
    assert_eq!(groups(&state)[0].2, 2, "the second import is not counted");

    // Bad input: a one-line error, exit 2.
    for (args, want) in [
        (vec!["/nonexistent/crash"], "is not a file"),
        (vec!["--target", "no_such_target"], "no_such_target"),
    ] {
        let mut cmd = allocsoak();
        cmd.args(["triage", "import", "--allocator", allocator, "--state"])
            .arg(&state);
        if args[0].starts_with("--") {
            cmd.args(&args).arg(&crash);
        } else {
            cmd.args(["--target", "alloc_ops"]).args(&args);
        }
        let out = cmd.output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
    }
}
