//! `allocsoak miri`: Rust allocators' programs under Miri. A planted bug
//! no native run can see (`zoo:narrow-provenance`, a block handed out
//! through a pointer made from a reference to its first byte) is one
//! finding; the bundled `arena` is clean on today's rlsf; rlsf 0.2.1 from
//! crates.io, which the arena is then built on, shows its real aliasing
//! bug (yvt/rlsf#9, fixed in 0.2.2) as one finding in the function at
//! fault; C code is refused in one line.

mod common;

use std::path::Path;

use common::{allocsoak, run_allocsoak, with_config};

/// The seeds a run replays: few and small (Miri is slow).
const MOST: &str = "3";

fn miri(cmd: std::process::Command, allocator: &str) -> (bool, String) {
    let (out, text) = run_allocsoak(cmd, &["miri", "--allocator", allocator, "--most", MOST]);
    assert!(
        matches!(out.status.code(), Some(0 | 1)),
        "exit {:?}: {text}",
        out.status
    );
    (out.status.success(), text)
}

#[test]
fn a_provenance_bug_only_miri_sees_is_one_finding_and_real_rlsf_too() {
    let (clean, text) = miri(allocsoak(), "zoo:narrow-provenance");
    assert!(!clean, "{text}");
    assert!(
        text.contains(": 3 programs, 0 clean, 0 past what Miri runs, 1 findings"),
        "{text}"
    );
    assert!(text.contains("miri-ub: "), "{text}");

    let (clean, text) = miri(allocsoak(), "arena");
    assert!(clean, "{text}");
    assert!(text.contains(": 3 programs, 3 clean"), "{text}");

    // rlsf 0.2.1, pinned by a config: the arena is built on it.
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("old-rlsf.toml");
    std::fs::write(
        &config,
        "[[allocator]]\nname = \"rlsf\"\ncrate = \"rlsf\"\nversion = \"=0.2.1\"\n\
         features = [\"std\", \"unstable\"]\nnew = \"rlsf::GlobalTlsf::<()>::new()\"\n",
    )
    .unwrap();
    let (out, text) = with_config(&config, &["miri", "--allocator", "arena", "--most", MOST]);
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("1 findings"), "{text}");
    assert!(text.contains("in rlsf::tlsf::Tlsf"), "{text}");
    assert!(text.contains("insert_free_block_ptr"), "{text}");
    assert!(Path::new(
        text.lines()
            .find(|l| l.trim_start().starts_with('/'))
            .unwrap()
            .trim()
    )
    .join("miri.log")
    .is_file());
}

#[test]
fn c_code_is_refused_in_one_line() {
    let (out, text) = run_allocsoak(allocsoak(), &["miri", "--allocator", "mimalloc"]);
    assert_eq!(out.status.code(), Some(2), "{text}");
    assert_eq!(text.trim().lines().count(), 1, "{text}");
    assert!(
        text.contains("`mimalloc` is not Rust code Miri can run"),
        "{text}"
    );
}
