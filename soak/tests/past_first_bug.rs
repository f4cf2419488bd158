//! End-to-end: a soak gets past every kind of first bug to the ones behind
//! it — a bug only reachable through a sound violation, a panic inside the
//! allocator, a sanitizer report — and keys two bugs of one kind in two
//! functions apart; a deadly signal that left no input is filed from the
//! input history, and got past in libFuzzer's -fork; a bug of
//! `diff_mimalloc`'s reference is one group, the reference's. The real daemon and
//! fuzz binaries, as in `soak.rs`.

mod common;

use std::path::Path;
use std::process::Output;

use common::{count, groups, kinds, signatures, soak, soak_until, strings, ONE_AT_A_TIME};

/// Soaks `alloc_ops` on `allocator` with 2 jobs for `secs`, plus `more`.
fn soak_alloc_ops(state: &Path, allocator: &str, secs: &str, more: &[&str]) -> Output {
    soak_target(state, "alloc_ops", allocator, secs, more)
}

/// Soaks `target` on `allocator` with 2 jobs for `secs`, plus `more`.
fn soak_target(state: &Path, target: &str, allocator: &str, secs: &str, more: &[&str]) -> Output {
    soak(state, &args(target, allocator, secs, more))
}

/// Soaks `alloc_ops` on `allocator` with 2 jobs until `done` holds of
/// the store, for `secs` at most, plus `more`.
fn soak_alloc_ops_until(
    state: &Path,
    allocator: &str,
    secs: &str,
    more: &[&str],
    done: impl Fn(&Path) -> bool,
) -> Output {
    soak_until(state, &args("alloc_ops", allocator, secs, more), done)
}

fn args<'a>(target: &'a str, allocator: &'a str, secs: &'a str, more: &[&'a str]) -> Vec<&'a str> {
    let mut args = vec![
        "--target",
        target,
        "--allocator",
        allocator,
        "--jobs",
        "2",
        "--duration",
        secs,
    ];
    args.extend_from_slice(more);
    args
}

/// A group filed before slice `after` was neither filed again since nor
/// left unreached: its raw crash count is `crashes`, and later slices
/// counted it as tolerated.
fn got_past(state: &Path, group: &(String, String, i64, String, String), after: i64, log: &str) {
    let now = groups(state).into_iter().find(|g| g.0 == group.0).unwrap();
    assert_eq!(now.2, group.2, "{} was filed again\n{log}", group.4);
    let tolerated = count(
        state,
        &format!(
            "SELECT COALESCE(SUM(count), 0) FROM tolerated WHERE group_id = '{}' AND slice_id > {after}",
            group.0
        ),
    );
    assert!(tolerated > 0, "{} was never got past\n{log}", group.4);
}

#[test]
fn a_bug_behind_a_tolerated_violation_is_filed() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    // small-underalign fires on most inputs; only a program that gets a
    // misaligned block (its violation) and then grows it reaches the
    // second bug. (Two bugs side by side are filed too: a slice goes on
    // past the first one either way.)
    let allocator = "zoo:small-underalign+misaligned-realloc-short";
    let out = soak_alloc_ops_until(&state, allocator, "70", &["--slice-secs", "20"], |s| {
        kinds(s) == ["alignment", "realloc-prefix"]
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(
        kinds(&state),
        vec!["alignment", "realloc-prefix"],
        "{stdout}"
    );
    let behind = groups(&state)
        .into_iter()
        .find(|g| g.1 == "realloc-prefix")
        .unwrap();
    let program =
        std::fs::read_to_string(state.join("crashes").join(&behind.0).join("program.txt")).unwrap();
    assert!(program.contains("align=16"), "{program}");
}

#[test]
fn a_panicking_allocator_is_got_past_and_its_next_bug_filed() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let allocator = "zoo:panic-class+dirty-zeroed";
    let out = soak_alloc_ops_until(&state, allocator, "60", &["--slice-secs", "60"], |s| {
        kinds(s) == ["panic", "zeroed"]
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    let filed = groups(&state);
    assert_eq!(
        kinds(&state),
        vec!["panic", "zeroed"],
        "{filed:?}\n{stdout}"
    );
    let panic = filed.iter().find(|g| g.1 == "panic").unwrap();
    assert!(panic.4.contains("@ zoo/src/planted.rs:"), "{panic:?}");
    // The panic ended the first slice of each job; the slices after them
    // went on past it while it waited to be filed (until the stop).
    let ended = count(
        &state,
        "SELECT COUNT(*) FROM slice WHERE outcome NOT IN ('time', 'stop')",
    );
    assert!(ended <= 2, "{ended} slices ended early\n{stdout}");
    // Once filed, the panic no longer ends slices: a second soak on the
    // state counts it as tolerated, and its slices all run their time.
    let slices_before = count(&state, "SELECT MAX(id) FROM slice");
    let out = soak_alloc_ops(&state, allocator, "15", &["--slice-secs", "15"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    got_past(&state, panic, slices_before, &stdout);
    let outcomes = strings(
        &state,
        &format!("SELECT outcome FROM slice WHERE id > {slices_before}"),
    );
    assert!(
        !outcomes.is_empty() && outcomes.iter().all(|o| o == "time"),
        "{outcomes:?}\n{stdout}"
    );
}

#[test]
fn a_sanitizer_report_is_got_past_once_filed() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    // xthread-wrong-free files a block freed on another thread in the
    // wrong heap: it is handed out again while live, which ASan reports
    // where the harness next reads it (a heap-use-after-free), or where
    // the allocator frees it twice (a double-free), or asks its size
    // (ASan's bad-malloc_usable_size, in the zoo's usable_size). Nothing
    // else is filed.
    let allocator = "zoo:xthread-wrong-free";
    let soak_mt_ops = |secs: &str| soak_target(&state, "mt_ops", allocator, secs, &[]);
    let mt_ops = args("mt_ops", allocator, "45", &[]);
    let out = soak_until(&state, &mt_ops, |s| !groups(s).is_empty());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let filed = groups(&state);
    assert!(
        filed.iter().all(|g| matches!(
            g.1.as_str(),
            "heap-use-after-free" | "double-free" | "bad-malloc_usable_size"
        )),
        "{filed:?}\n{stdout}"
    );
    // Which report comes first depends on the op that next touches the
    // block (with race sections three ops in ten, often a usable size).
    let asan = filed
        .iter()
        .max_by_key(|g| g.2)
        .unwrap_or_else(|| panic!("no sanitizer report filed: {filed:?}\n{stdout}"));
    // Once filed, ASan's report returns to the harness, which ends the
    // program quietly: a second soak counts it and files it no more. The
    // bug's other symptoms (a double free, a usable-size query of the
    // block) join its group, each as a variant, until it is tolerated too.
    let slices_before = count(&state, "SELECT MAX(id) FROM slice");
    let variants = || {
        count(
            &state,
            &format!(
                "SELECT COALESCE(SUM(count), 0) FROM variant WHERE group_id = '{}'",
                asan.0
            ),
        )
    };
    let variants_before = variants();
    let out = soak_mt_ops("25");
    let log = String::from_utf8_lossy(&out.stdout);
    // Its crashes from this soak's slices: what the first soak found and
    // left waiting when it was stopped is filed now too, under its own
    // slice, and tolerated by nothing it ran with.
    let refiled = count(
        &state,
        &format!(
            "SELECT COUNT(*) FROM crash WHERE group_id = '{}' AND slice_id > {slices_before}",
            asan.0
        ),
    );
    assert!(
        refiled <= variants() - variants_before,
        "{} was filed again {refiled} times (not as another symptom)\n{log}",
        asan.4
    );
    let filed_now = groups(&state);
    assert_eq!(filed_now.len(), filed.len(), "{filed_now:?}\n{log}");
    let tolerated = count(
        &state,
        &format!(
            "SELECT COALESCE(SUM(count), 0) FROM tolerated WHERE group_id = '{}' AND slice_id > {slices_before}",
            asan.0
        ),
    );
    assert!(tolerated > 0, "{} was never got past\n{log}", asan.4);
}

#[test]
fn a_deadly_signal_is_filed_from_the_input_history_and_got_past() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    // wild-write's SEGV: ASan reports it from its signal handler and ends
    // the process holding its crash state, so libFuzzer writes no input;
    // the slice's input history has it. A SEGV is never tolerated, so the
    // slices after it run libFuzzer's -fork, which goes on past each
    // child that dies of it (that child's own history has the input), to
    // dirty-zeroed.
    let allocator = "zoo:wild-write+dirty-zeroed";
    // 120 s: `dirty-zeroed` was missed once in 90 (the first slices die
    // of the SEGV until it is filed, and forked children go on dying).
    let long = |s: &Path| count(s, "SELECT COUNT(*) FROM slice WHERE fuzz_secs > 20");
    let out = soak_alloc_ops_until(&state, allocator, "120", &["--slice-secs", "30"], |s| {
        let filed = groups(s);
        let segv: Vec<_> = filed.iter().filter(|g| g.1 == "SEGV").collect();
        let crashes: i64 = segv.iter().map(|g| g.2).sum();
        kinds(s) == ["SEGV", "zeroed"] && crashes > segv.len() as i64 && long(s) >= 2
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    let filed = groups(&state);
    let segv: Vec<_> = filed.iter().filter(|g| g.1 == "SEGV").collect();
    assert!(!segv.is_empty(), "{filed:?}\n{stdout}");
    assert!(
        filed.iter().all(|g| g.1 == "SEGV" || g.1 == "zeroed"),
        "{filed:?}\n{stdout}"
    );
    assert!(filed.iter().any(|g| g.1 == "zeroed"), "{filed:?}\n{stdout}");
    for (id, _, _, _, title) in &segv {
        assert!(title.contains("class_of"), "{title}");
        let folder = state.join("crashes").join(id);
        assert!(folder.join("original").is_file(), "{}", folder.display());
        assert!(folder.join("program.txt").is_file(), "{}", folder.display());
    }
    // Children died of it and were filed as repeats, while their slices
    // fuzzed for most of their 30 s.
    let crashes: i64 = segv.iter().map(|g| g.2).sum();
    assert!(crashes > segv.len() as i64, "{crashes} crashes\n{stdout}");
    let long = long(&state);
    assert!(long >= 2, "{long} slices fuzzed past 20 s\n{stdout}");
    // (The run's duty cycle is a figure of the machine's load:
    // BENCHMARKS.md has it.)
}

/// A bug of `diff_mimalloc`'s reference allocator (here the zoo's SEGV,
/// a sanitizer report raised inside the reference's call), met by two
/// slots that compare against it, is one group, the reference's, and its
/// repro command runs the reference beside the slot's allocator. Before
/// the harness marked the reference's reports, each slot filed it as a
/// bug of its own allocator: two groups.
#[test]
fn a_reference_bug_met_by_two_slots_is_one_group_of_the_reference() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let both = |s: &Path| count(s, "SELECT COUNT(DISTINCT slot_id) FROM crash") >= 2;
    let args = args(
        "diff_mimalloc",
        "system",
        "150",
        &["--allocator", "jemalloc"],
    );
    let env = [("ALLOCSOAK_REFERENCE", "zoo:wild-write")];
    let out = common::soak_until_env(&state, &args, &env, both);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let filed = groups(&state);
    assert!(both(&state), "{filed:?}\n{stdout}");
    assert_eq!(filed.len(), 1, "{filed:?}\n{stdout}");
    let (_, kind, _, repro, title) = &filed[0];
    assert_eq!(kind, "SEGV");
    assert!(
        title.contains("[reference allocator zoo:wild-write]"),
        "{title}"
    );
    assert!(
        repro.contains("ALLOCSOAK_REFERENCE='zoo:wild-write'"),
        "{repro}"
    );
}

/// A reference that keeps memory (`hoarded-frees`: each free of a
/// 1–256 KiB block keeps as many bytes for good) would grow every
/// `diff_mimalloc` process to its RSS limit, an `oom` of each slot's
/// allocator. The harness counts what the reference mapped (`diff/held.rs`)
/// and files it once, as the reference's `held`, then retires it for the
/// process: one group over both slots, no `oom`. Without the count, each
/// slot filed an `oom` of its own allocator (two groups, 361 s at 2 GiB).
#[test]
fn a_reference_that_holds_memory_is_one_group_of_the_reference() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let config = dir.path().join("soak.toml");
    let slots = "targets = [\"diff_mimalloc\"]\nallocators = [\"system\", \"jemalloc\"]\n\
                 rss_limit_mb = 1024\n";
    std::fs::write(&config, slots).unwrap();
    let both = |s: &Path| count(s, "SELECT COUNT(DISTINCT slot_id) FROM crash") >= 2;
    let config = config.to_str().unwrap();
    // Short slices: a slot's findings are filed as its slice ends.
    let args = ["--config", config, "--drift-share", "0", "--jobs", "2"];
    let args = [&args[..], &["--duration", "400", "--slice-secs", "30"]].concat();
    let env = [("ALLOCSOAK_REFERENCE", "zoo:hoarded-frees")];
    let out = common::soak_until_env(&state, &args, &env, both);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let filed = groups(&state);
    assert!(both(&state), "{filed:?}\n{stdout}");
    assert_eq!(filed.len(), 1, "{filed:?}\n{stdout}");
    let (_, kind, _, _, title) = &filed[0];
    assert_eq!(kind, "held", "{filed:?}\n{stdout}");
    assert!(
        title.contains("[reference allocator zoo:hoarded-frees]"),
        "{title}"
    );
}

/// Two pairs of bugs of one kind in one allocator, each pair two groups:
/// two realloc copies in two functions, and a misalignment on the alloc
/// path (`small-underalign`) beside one only a plain realloc meets
/// (`plain-realloc-misaligns`). The second pair was one group while the
/// harness's layout probe (small plain requests after a misaligned block)
/// ran on the op's path: the realloc's path then held the alloc bug's.
#[test]
fn two_bugs_of_one_kind_in_two_functions_are_two_groups() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let allocator =
        "zoo:tiny-realloc-short+short-realloc-copy+small-underalign+plain-realloc-misaligns";
    let out = soak_alloc_ops(&state, allocator, "45", &["--slice-secs", "15"]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    // Each bug is one group, keyed by its function, whichever of the calls
    // (`realloc`, `realloc-zeroed`, `realloc-plain`: the zoo's optional
    // calls resize with its realloc) and size tiers reached it; never one
    // group for two.
    let filed = groups(&state);
    let of_kind = |kind: &str| filed.iter().filter(|g| g.1 == kind).count();
    assert!(
        filed.len() == 4 && of_kind("realloc-prefix") == 2 && of_kind("alignment") == 2,
        "{filed:?}\n{stdout}"
    );
    let paths = signatures(&state);
    let has = |f: &str| paths.iter().filter(|p| p.contains(f)).count();
    assert_eq!(
        [
            "Zoo>::tiny_realloc_short",
            "Zoo>::short_realloc_copy",
            "Zoo>::small_underalign",
            "Extras>::realloc_plain",
        ]
        .map(has),
        [1; 4],
        "{paths:#?}\n{stdout}"
    );
}

/// A C library whose realloc loses every grown block's tail past 200
/// bytes: most programs meet it.
const LOSES_TAILS: &str = r#"
#include <stdlib.h>
#include <string.h>
void *my_malloc(size_t n) { return malloc(n); }
void my_free(void *p) { free(p); }
void *my_calloc(size_t k, size_t n) { return calloc(k, n); }
void *my_realloc(void *p, size_t n) {
    if (!p || n <= 200) return realloc(p, n);
    void *q = malloc(n);
    if (q) { memcpy(q, p, 200); free(p); }
    return q;
}
"#;

#[test]
fn a_bug_most_inputs_meet_is_fuzzed_past_and_its_executions_counted() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    let source = dir.path().join("loses_tails.c");
    std::fs::write(&source, LOSES_TAILS).unwrap();
    let library = dir.path().join("libloses_tails.so");
    common::instrumented_dylib(&library, &[&source], &[]);
    let allocator = format!("dylib:{}:my_", library.display());
    // Past the first filing, its slices run libFuzzer's -fork: a child
    // seldom lives past a few programs, and the parent counts none of
    // them. `soak_until` checks each slice's executions were counted.
    let long = |s: &Path| count(s, "SELECT COUNT(*) FROM slice WHERE fuzz_secs > 10");
    // It ends as soon as that holds (about 60 s on an idle machine); the
    // duration is only the limit a loaded machine may need. A slice's
    // fuzzing time starts when its corpus is read, which a loaded machine
    // takes seconds over: 15-s slices beside a busy core never fuzzed
    // 10 s (issue 50's suite run under load).
    let out = soak_alloc_ops_until(&state, &allocator, "300", &["--slice-secs", "30"], |s| {
        !kinds(s).is_empty() && long(s) >= 2
    });
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(long(&state) >= 2, "{stdout}");
}
