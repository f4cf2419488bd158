//! End-to-end: the real `allocsoak soak` daemon on a temporary state dir,
//! with the real fuzz binaries (`allocsoak build` first; `just test` does).
//! Soaks run one at a time: two at once would share two cores.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{allocsoak, count, db, groups, repro, soak, soak_until, ONE_AT_A_TIME};

#[test]
fn one_bug_is_one_group_and_a_restart_gets_past_it() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    // One bug every request aligned above 16 reaches, through `alloc` and
    // `alloc-zeroed`, in every size tier; two jobs start on it at once.
    let allocator = "zoo:align-ignored";
    let args = [
        "--target",
        "alloc_ops",
        "--allocator",
        allocator,
        "--jobs",
        "2",
        "--duration",
        "60",
        "--slice-secs",
        "15",
    ];
    let out = soak(&state, &args);
    let stdout = String::from_utf8_lossy(&out.stdout);
    // A misaligned block leaves the heap sound: the harness saves the
    // input and goes on, and no slice ends before its time.
    let cut_short = count(&state, "SELECT COUNT(*) FROM slice WHERE outcome != 'time'");
    assert_eq!(cut_short, 0, "slices ended early\n{stdout}");
    // One group, keyed by the allocator code the failing calls ran (the
    // zoo's `align_ignored`), whichever call and size tier reached it:
    // those are its variants.
    let filed = groups(&state);
    assert_eq!(filed.len(), 1, "{filed:?}\n{stdout}");
    let (id, kind, crashes, command, title) = &filed[0];
    assert_eq!(kind, "alignment");
    assert!(title.contains("align_ignored"), "{title}");
    assert!(*crashes >= 2, "{crashes} raw crashes\n{stdout}");
    let variants = count(
        &state,
        &format!("SELECT COUNT(*) FROM variant WHERE group_id = '{id}'"),
    );
    let sites = count(
        &state,
        &format!("SELECT COUNT(DISTINCT substr(site, 1, instr(site, ' '))) FROM variant WHERE group_id = '{id}'"),
    );
    assert!(
        variants >= 3 && sites >= 2,
        "{variants} variants through {sites} calls\n{stdout}"
    );
    assert!(stdout.contains("Reproduce with:"), "{stdout}");
    let group = state.join("crashes").join(id);
    for file in [
        "REPORT.md",
        "original",
        "program.txt",
        "stack.txt",
        "replay.log",
    ] {
        assert!(
            group.join(file).is_file(),
            "{file} missing in {}",
            group.display()
        );
    }
    // Minimized as a program: text, down to the one misaligned request.
    // An original already that small (a fuzz process saves the first
    // input of a family, often a one-op seed) has no minimized copy:
    // intake writes one only when a smaller program fails the same way.
    let minimized = group.join("minimized");
    let shown = match std::fs::read_to_string(&minimized) {
        Ok(text) => {
            assert!(command.contains("minimized"), "{command}");
            text
        }
        Err(_) => {
            let out = allocsoak()
                .args(["print", "alloc_ops"])
                .arg(group.join("original"))
                .output()
                .unwrap();
            String::from_utf8(out.stdout).unwrap()
        }
    };
    let replay = repro(command);
    assert!(!replay.status.success());
    assert!(
        String::from_utf8_lossy(&replay.stderr).contains("allocsoak violation: alignment"),
        "{command}"
    );
    let program = std::fs::read_to_string(group.join("program.txt")).unwrap();
    assert!(program.contains("fails here"), "{program}");
    let shown: shadow::Program = shown.parse().expect("an op program's text");
    assert!(shown.ops.len() <= 2, "{shown}");
    let report = std::fs::read_to_string(group.join("REPORT.md")).unwrap();
    assert!(
        !minimized.is_file() || report.contains("| minimized | "),
        "{report}"
    );
    assert!(
        report.contains("## Variants") && report.contains("| `alloc-zeroed size "),
        "{report}"
    );
    let corpus = count(&state, "SELECT MAX(corpus_size) FROM slice");
    assert!(corpus > 0, "nothing merged");
    triage_the_group(&state, id, allocator);

    // Restart on the same state: same slot, same group, and the bug no
    // longer stops the engine: its violations are tolerated and counted.
    let slot_before = count(&state, "SELECT id FROM slot");
    let slices_before = count(&state, "SELECT COUNT(*) FROM slice");
    soak(
        &state,
        &[
            "--target",
            "alloc_ops",
            "--allocator",
            allocator,
            "--jobs",
            "1",
            "--duration",
            "15",
        ],
    );
    assert_eq!(count(&state, "SELECT id FROM slot"), slot_before);
    assert!(count(&state, "SELECT COUNT(*) FROM slice") > slices_before);
    assert!(groups(&state).iter().any(|g| &g.0 == id));
    assert!(groups(&state).iter().all(|g| g.1 == "alignment"));
    let tolerated = count(&state, &format!("SELECT COALESCE(SUM(t.count), 0) FROM tolerated t JOIN slice s ON s.id = t.slice_id WHERE s.id > {slices_before}"));
    assert!(
        tolerated > 0,
        "the restarted soak did not get past the known bug"
    );
    assert!(
        count(
            &state,
            &format!("SELECT MAX(corpus_size) FROM slice WHERE id > {slices_before}")
        ) >= corpus
    );
}

/// Also `--build` (what `just soak` runs): the binaries are fresh here,
/// so each part's build is cargo finding it so, but the order holds. The
/// first target's binary is built before the workers start, the others on
/// the builder's core beside the first slice, and every slot runs, none
/// before its binary's build ended.
#[test]
fn a_correct_allocator_files_nothing() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let out = soak(
        &state,
        &[
            "--target",
            "alloc_ops",
            "--target",
            "heap_api",
            "--target",
            "mt_ops",
            "--allocator",
            "system",
            "--jobs",
            "2",
            "--duration",
            "20",
            "--slice-secs",
            "5",
            "--build",
        ],
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(groups(&state), vec![]);
    assert!(count(&state, "SELECT COUNT(*) FROM slice WHERE ended IS NOT NULL") >= 2);
    assert!(count(&state, "SELECT MIN(execs) FROM slice") > 0);
    assert!(
        stdout.contains("allocsoak: building asan alloc_ops"),
        "{stdout}"
    );
    for target in ["heap_api", "mt_ops"] {
        assert!(
            stdout.contains(&format!("allocsoak: built asan {target} beside the slices")),
            "{stdout}"
        );
        let log = state.join(format!("logs/build-asan-{target}.log"));
        let built = std::fs::metadata(&log)
            .unwrap()
            .modified()
            .unwrap()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs() as i64;
        let first = count(
            &state,
            &format!(
                "SELECT MIN(s.started) FROM slice s
                 JOIN slot ON slot.id = s.slot_id WHERE slot.target = '{target}'"
            ),
        );
        assert!(
            first >= built,
            "{target}: a slice at {first}, built at {built}"
        );
    }
    let status = allocsoak()
        .args(["status", "--state"])
        .arg(&state)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&status.stdout);
    assert!(
        status.status.success() && text.contains("alloc_ops/system"),
        "{text}"
    );
    // mt_ops' race sections are counted by its fuzzing processes and
    // shown (`races`: the share with two or more inside, the most);
    // alloc_ops has none.
    let sections = count(
        &state,
        "SELECT COALESCE(SUM(s.race_sections), 0) FROM slice s
         JOIN slot ON slot.id = s.slot_id WHERE slot.target = 'mt_ops'",
    );
    assert!(sections > 0, "no race section counted\n{text}");
    let row = text.lines().find(|l| l.starts_with("mt_ops/system"));
    assert!(row.is_some_and(|r| r.contains("%/")), "{text}");
    let others = count(
        &state,
        "SELECT COALESCE(SUM(s.race_sections), 0) FROM slice s
         JOIN slot ON slot.id = s.slot_id WHERE slot.target = 'alloc_ops'",
    );
    assert_eq!(others, 0);
}

/// Runs a soak expected to refuse; returns its stderr.
fn refused(state: &Path, args: &[&str], env: &[(&str, &Path)]) -> String {
    let out = allocsoak()
        .arg("soak")
        .arg("--state")
        .arg(state)
        .args(args)
        .envs(env.iter().map(|(k, v)| (*k, *v)))
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(!out.status.success(), "{args:?} was accepted");
    let lines: Vec<&str> = err
        .lines()
        .filter(|l| !l.trim().is_empty() && !l.starts_with("For more information"))
        .collect();
    assert_eq!(lines.len(), 1, "not one line: {err}");
    err
}

fn listing(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            out.extend(listing(&path));
        } else {
            out.push((path.clone(), std::fs::read(&path).unwrap()));
        }
    }
    out.sort();
    out
}

#[test]
fn bad_input_is_one_line_and_touches_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let quick = ["--duration", "5"];
    let err = refused(
        &state,
        &[&quick[..], &["--target", "alloc_opz"]].concat(),
        &[],
    );
    assert!(err.contains("unknown target `alloc_opz`"), "{err}");
    let err = refused(
        &state,
        &[&quick[..], &["--allocator", "tcmalloc"]].concat(),
        &[],
    );
    assert!(err.contains("tcmalloc"), "{err}");
    let err = refused(&state, &[&quick[..], &["--engine", "afl"]].concat(), &[]);
    assert!(err.contains("unknown engine `afl`"), "{err}");
    let err = refused(&state, &["--duration", "8x"], &[]);
    assert!(err.contains("bad duration `8x`"), "{err}");
    let err = refused(&state, &["--duration", "0"], &[]);
    assert!(err.contains("bad duration `0`"), "{err}");
    assert!(!state.exists(), "a refused soak created its state dir");

    // Someone else's folder.
    let foreign = dir.path().join("notes");
    std::fs::create_dir(&foreign).unwrap();
    std::fs::write(foreign.join("todo.txt"), "mine").unwrap();
    let err = refused(&foreign, &quick, &[]);
    assert!(err.contains("not an allocsoak state dir"), "{err}");
    assert_eq!(listing(&foreign).len(), 1);

    // A store that is not SQLite.
    let corrupt = dir.path().join("corrupt");
    std::fs::create_dir(&corrupt).unwrap();
    std::fs::write(
        corrupt.join("allocsoak-state"),
        "allocsoak state dir, version 1\n",
    )
    .unwrap();
    std::fs::write(corrupt.join("store.sqlite"), vec![0x5a; 8192]).unwrap();
    let before = listing(&corrupt);
    let err = refused(&corrupt, &quick, &[]);
    assert!(
        err.contains("store") && err.contains("move it aside"),
        "{err}"
    );
    let after: Vec<_> = listing(&corrupt)
        .into_iter()
        .filter(|(p, _)| before.iter().any(|(b, _)| b == p))
        .collect();
    assert_eq!(after, before, "the corrupt store or its dir changed");

    // A read-only state dir.
    let readonly = dir.path().join("readonly");
    std::fs::create_dir(&readonly).unwrap();
    let mut perms = std::fs::metadata(&readonly).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o555);
    std::fs::set_permissions(&readonly, perms).unwrap();
    let writable = std::fs::File::create(readonly.join("probe")).is_ok();
    if !writable {
        let err = refused(&readonly, &quick, &[]);
        assert!(
            err.contains("not writable") || err.contains("failed to"),
            "{err}"
        );
    } // (root ignores permissions: nothing to test there)

    // A checkout whose fuzz binaries were never built.
    let checkout = dir.path().join("checkout");
    std::fs::create_dir_all(checkout.join("fuzz_targets")).unwrap();
    std::fs::write(checkout.join("fuzz_targets/Cargo.toml"), "").unwrap();
    let config = Path::new(env!("CARGO_MANIFEST_DIR")).join("../soak.toml");
    std::fs::copy(config, checkout.join("soak.toml")).unwrap();
    let fresh = dir.path().join("fresh");
    let err = refused(&fresh, &quick, &[("ALLOCSOAK_ROOT", &checkout)]);
    assert!(
        err.contains("fuzz binary") && err.contains("allocsoak build"),
        "{err}"
    );
}

#[test]
fn corpora_are_pruned_on_their_cadence_and_seeds_stay() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let config = dir.path().join("soak.toml");
    // A cadence of about a second: every slice after the first merge prunes.
    std::fs::write(
        &config,
        "targets = [\"alloc_ops\"]\nallocators = [\"system\"]\nprune_hours = 0.0003\n",
    )
    .unwrap();
    let seeds = Path::new(env!("CARGO_MANIFEST_DIR")).join("../corpus/alloc_ops/seeds");
    let seeds_before = listing(&seeds);
    let pruned = "SELECT COUNT(*) FROM corpus_event WHERE what = 'prune'";
    soak_until(
        &state,
        &[
            "--config",
            config.to_str().unwrap(),
            "--jobs",
            "1",
            "--duration",
            "24",
            "--slice-secs",
            "6",
        ],
        |s| count(s, pruned) > 0,
    );
    let db = db(&state);
    let (prunes, before, after): (i64, i64, i64) = db
        .query_row(
            "SELECT COUNT(*), MAX(before), MIN(after) FROM corpus_event WHERE what = 'prune'",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .unwrap();
    assert!(prunes >= 1, "no prune ran");
    assert!(after > 0 && after <= before, "prune {before} -> {after}");
    let corpus = state.join("corpus/alloc_ops");
    assert!(std::fs::symlink_metadata(&corpus)
        .unwrap()
        .file_type()
        .is_symlink());
    let last: i64 = db
        .query_row(
            "SELECT after FROM corpus_event ORDER BY id DESC LIMIT 1",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(std::fs::read_dir(&corpus).unwrap().count() as i64, last);
    assert_eq!(listing(&seeds), seeds_before, "the committed seeds changed");
}

fn run_ok(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{cmd:?}: {text}");
    text
}

/// The morning after: list, replay, emit a test, verify, export.
fn triage_the_group(state: &Path, id: &str, allocator: &str) {
    let list = run_ok(allocsoak().args(["triage", "--state"]).arg(state));
    assert!(
        list.contains(id)
            && list.contains(&format!("alloc_ops/{allocator}"))
            && list.contains(" new "),
        "{list}"
    );
    let none = run_ok(
        allocsoak()
            .args(["triage", "--kind", "leak", "--state"])
            .arg(state),
    );
    assert!(!none.contains(id), "{none}");

    let dir = tempfile::tempdir().unwrap();
    let test_file = dir.path().join("emitted.rs");
    let text = common::repro_group(state, &id[..8], &test_file);
    assert!(
        text.contains("fails here") && text.contains("alignment"),
        "{text}"
    );
    assert!(
        text.contains("stack:") && text.contains("same signature"),
        "the minimized input left its group: {text}"
    );
    common::emitted_test_fails_on_the_zoo_and_passes_on_system(&test_file, "alignment");

    let verified = run_ok(allocsoak().args(["triage", "verify", "--state"]).arg(state));
    assert!(
        verified.contains(&format!("verify {id} new -> known (3 of 3")),
        "{verified}"
    );

    let exported = run_ok(
        allocsoak()
            .args(["triage", "export", id, "--out"])
            .arg(dir.path())
            .arg("--state")
            .arg(state),
    );
    assert!(exported.contains("export:"), "{exported}");
    let bundle = dir.path().join(format!("allocsoak-{id}"));
    for file in [
        "REPORT.md",
        "README.md",
        "original",
        "program.txt",
        "stack.txt",
        "test.rs",
    ] {
        assert!(
            bundle.join(file).is_file(),
            "{file} missing from the bundle"
        );
    }
    // A group whose original was already minimal has no minimized copy
    // (one_bug_is_one_group_and_a_restart_gets_past_it); one that has
    // it exports it.
    let minimized = state.join("crashes").join(id).join("minimized");
    assert_eq!(
        bundle.join("minimized").is_file(),
        minimized.is_file(),
        "the bundle has the group's minimized copy, or none when it has none"
    );
}
