//! End-to-end: a crash that needs the input before it. The zoo's
//! latent-corruption damages the allocator in one input and panics in a
//! later one, so the crash input alone never reproduces. The soak files it
//! as one group whose repro is the shrunk sequence, and every triage verb
//! replays that sequence. The real daemon and fuzz binaries, as in
//! `soak.rs`.

mod common;

use std::path::Path;

use common::{allocsoak, count, groups, repro, soak, ONE_AT_A_TIME};

#[test]
fn a_crash_that_needs_the_input_before_it_is_filed_with_that_sequence() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let out = soak(
        &state,
        &[
            "--target",
            "alloc_ops",
            "--allocator",
            "zoo:latent-corruption",
            "--jobs",
            "1",
            "--duration",
            "40",
            "--slice-secs",
            "20",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    let all = groups(&state);
    assert_eq!(
        all.len(),
        1,
        "one group, not one per place it surfaced\n{stdout}"
    );
    let (id, kind, _, command, title) = &all[0];
    assert_eq!(kind, "panic", "{title}\n{stdout}");
    assert!(title.contains("size-class table is corrupt"), "{title}");
    let flaky = count(
        &state,
        "SELECT COUNT(*) FROM crash_group WHERE status = 'flaky'",
    );
    assert_eq!(
        flaky, 0,
        "the group is flaky: its history was not replayed\n{stdout}"
    );

    // The repro is the shrunk sequence: the one input that did the damage,
    // then the crash input.
    let group = state.join("crashes").join(id);
    let history: Vec<_> = std::fs::read_dir(group.join("history"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(history.len(), 1, "ddmin left {history:?}");
    let record = std::fs::read_to_string(group.join("group.toml")).unwrap();
    assert!(record.contains("history = 1"), "{record}");
    let report = std::fs::read_to_string(group.join("REPORT.md")).unwrap();
    assert!(
        report.contains("| needs its history | the 1 input(s) in `history/`")
            && report.contains("# input 2 of 2: the crash input"),
        "{report}"
    );
    // The crash program is minimized too, replayed after its history.
    assert!(
        command.contains("history/000000") && command.ends_with("/minimized"),
        "{command}"
    );
    assert!(report.contains("| minimized | "), "{report}");
    let replayed = repro(command);
    assert!(
        !replayed.status.success()
            && String::from_utf8_lossy(&replayed.stderr).contains("size-class table is corrupt"),
        "the group's repro command does not reproduce: {command}"
    );
    let alone = repro(&command.replace(&format!("{} ", history[0].display()), ""));
    assert!(
        alone.status.success(),
        "the crash input reproduces alone, so this test proves nothing:\n{}",
        String::from_utf8_lossy(&alone.stderr)
    );

    triage_replays_the_sequence(&state, id);
}

/// `repro`, `--emit-test` and `triage verify` replay the sequence.
fn triage_replays_the_sequence(state: &Path, id: &str) {
    let dir = tempfile::tempdir().unwrap();
    let test_file = dir.path().join("emitted.rs");
    let text = common::repro_group(state, id, &test_file);
    assert!(
        text.contains("2 programs, in order in one process")
            && text.contains("fails here")
            && text.contains("same signature"),
        "{text}"
    );
    common::emitted_test_fails_on_the_zoo_and_passes_on_system(&test_file, "panic");

    let verified = allocsoak()
        .args(["triage", "verify", "--state"])
        .arg(state)
        .output()
        .unwrap();
    let verified = String::from_utf8_lossy(&verified.stdout);
    assert!(
        verified.contains(&format!("verify {id} new -> known (3 of 3")),
        "{verified}"
    );
}
