//! Rust allocators' programs under Miri. `allocsoak miri` on rlsf 0.2.1
//! from crates.io, which the arena is then built on, shows its real
//! aliasing bug (yvt/rlsf#9, fixed in 0.2.2) as one finding in the
//! function at fault; C code is refused in one line. A soak's own Miri
//! passes file a planted bug no native run can see
//! (`zoo:narrow-provenance`, a block handed out through a pointer made
//! from a reference to its first byte) as one group, leave the bundled
//! `arena` (today's rlsf) clean, and mark the group fixed once the
//! allocator no longer has it. A finding's program is minimized under
//! Miri.

mod common;

use std::path::Path;

use common::{allocsoak, count, groups, repro, run_allocsoak, soak_until, with_config};

/// The seeds a run replays: few and small (Miri is slow).
const MOST: &str = "3";

#[test]
fn real_rlsf_0_2_1s_aliasing_bug_is_one_finding_in_the_function_at_fault() {
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
    // Tree Borrows sees it too, worded its own way, in the same function.
    let (out, tree) = with_config(
        &config,
        &[
            "miri",
            "--allocator",
            "arena",
            "--most",
            MOST,
            "--borrows",
            "tree",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{tree}");
    assert!(
        tree.contains("(tree borrows)") && tree.contains("1 findings"),
        "{tree}"
    );
    assert!(
        tree.contains("is forbidden in rlsf::tlsf::Tlsf") && tree.contains("insert_free_block_ptr"),
        "{tree}"
    );
}

/// A finding's program is minimized under Miri, a process for each
/// candidate: five ops to the one the planted bug needs (any block the
/// arena hands out, freed at the program's end).
#[test]
fn a_miri_findings_program_is_minimized_under_miri() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("five-ops");
    std::fs::write(
        &input,
        "target alloc_ops\nalloc size=64 align=8\nusable-size slot=0\nalloc size=300 align=16\n\
         free slot=0\nrealloc slot=newest to=double\n",
    )
    .unwrap();
    let input = input.to_string_lossy().into_owned();
    let (out, text) = run_allocsoak(
        allocsoak(),
        &["miri", "--allocator", "zoo:narrow-provenance", &input],
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("1 findings"), "{text}");
    assert!(text.contains("minimized 5 ops to 1 in"), "{text}");
    let folder = text
        .lines()
        .find(|l| l.trim_start().starts_with('/'))
        .unwrap()
        .trim();
    let minimized = std::fs::read_to_string(Path::new(folder).join("minimized")).unwrap();
    assert_eq!(minimized.lines().count(), 2, "{minimized}");
    let log = std::fs::read_to_string(Path::new(folder).join("minimized.log")).unwrap();
    assert!(log.contains("Undefined Behavior"), "{log}");
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

/// The Miri-only bug found by a soak's own Miri passes: one group, its
/// page and repro command Miri's, while the correct arena beside it
/// replays clean.
#[test]
fn a_soaks_miri_passes_file_the_provenance_bug_once_and_leave_the_arena_clean() {
    let _one = common::ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("miri.toml");
    std::fs::write(
        &config,
        "targets = [\"alloc_ops\"]\nallocators = [\"zoo:narrow-provenance\", \"arena\"]\n\
         [miri]\nevery_hours = 0.0003\nmost = 2\n",
    )
    .unwrap();
    let state = dir.path().join("state");
    let config_arg = config.to_string_lossy().into_owned();
    let args = [
        "--config",
        &config_arg,
        "--jobs",
        "2",
        "--duration",
        "300",
        "--slice-secs",
        "10",
    ];
    let replayed = |s: &Path| -> Vec<String> {
        std::fs::read_dir(s.join("miri"))
            .map(|d| {
                d.flatten()
                    .filter(|e| e.file_name().to_string_lossy().ends_with(".replayed"))
                    .map(|e| std::fs::read_to_string(e.path()).unwrap())
                    .collect()
            })
            .unwrap_or_default()
    };
    let miri_groups = "SELECT COUNT(*) FROM crash_group g JOIN slot s ON g.slot_id = s.id \
                       WHERE s.engine = 'miri'";
    let out = soak_until(&state, &args, |s| {
        count(s, miri_groups) >= 1 && replayed(s).iter().filter(|r| !r.is_empty()).count() == 2
    });
    let log = String::from_utf8_lossy(&out.stdout).into_owned();
    let filed = groups(&state);
    assert_eq!(filed.len(), 1, "{filed:?}\n{log}");
    let (id, kind, _, command, title) = &filed[0];
    assert_eq!(kind, "miri-ub", "{title}");
    assert_eq!(count(&state, miri_groups), 1, "{log}");
    assert!(log.contains("miri alloc_ops/arena: "), "{log}");
    // Each slot's passes are slices of its `(miri)` row: programs as execs.
    let passes = "SELECT COUNT(DISTINCT s.id) FROM slice l JOIN slot s ON l.slot_id = s.id \
                  WHERE s.engine = 'miri' AND l.execs > 0 AND l.outcome = 'miri'";
    assert_eq!(count(&state, passes), 2, "{log}");
    assert!(log.contains("alloc_ops/arena (miri)"), "{log}");
    let page = std::fs::read_to_string(state.join("crashes").join(id).join("REPORT.md")).unwrap();
    assert!(
        page.contains("alloc_ops / zoo:narrow-provenance / miri"),
        "{page}"
    );
    assert!(page.contains("error: Undefined Behavior"), "{page}");

    // The page's command, as a user pastes it, finds it again under Miri.
    let binary = env!("CARGO_BIN_EXE_allocsoak");
    let command = command.replacen("allocsoak", binary, 1);
    let again = repro(&command);
    let text = String::from_utf8_lossy(&again.stdout);
    assert_eq!(again.status.code(), Some(1), "{command}\n{text}");
    assert!(text.contains("1 findings"), "{text}");
    // So does `allocsoak repro <group>`.
    let state_arg = state.to_string_lossy().into_owned();
    let (again, text) = with_config(&config, &["repro", id, "--state", &state_arg]);
    assert_eq!(again.status.code(), Some(1), "{text}");
    assert!(text.contains("under Miri: reproduced"), "{text}");

    // Once the allocator no longer has the bug (the group moved, in the
    // store, to the correct arena's Miri slot), the next soak's pass marks
    // it fixed.
    let db = common::db(&state);
    db.execute(
        "UPDATE crash_group SET slot_id = (SELECT id FROM slot WHERE allocator = 'arena' \
         AND engine = 'miri') WHERE id = ?1",
        [id],
    )
    .unwrap();
    drop(db);
    std::fs::write(
        &config,
        "targets = [\"alloc_ops\"]\nallocators = [\"arena\"]\n[miri]\nevery_hours = 0.0003\n",
    )
    .unwrap();
    let fixed = |s: &Path| count(s, "SELECT COUNT(*) FROM crash_group WHERE status = 'fixed'") == 1;
    let out = soak_until(&state, &args, fixed);
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(log.contains(&format!("miri: {id} new -> fixed")), "{log}");
}
