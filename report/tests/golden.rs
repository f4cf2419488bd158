//! The logs in `testdata/` are real engine logs (see
//! `testdata/README.md`); each `<name>.sig` holds what
//! [`Signature::from_log`] makes of `<name>.log`: the title, the id,
//! then the key. `REPORT_BLESS=1 cargo test -p report` rewrites those
//! that changed, and fails naming them.

use report::{key, stack, Signature};
use std::path::{Path, PathBuf};

/// The slot every golden log is read with; the timeout and OOM logs
/// came from `alloc_ops` on `system`.
const SLOT: &str = "alloc_ops/system";

fn dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata")
}

fn sig(name: &str) -> Signature {
    let path = dir().join(format!("{name}.log"));
    let log = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    Signature::from_log(&log, SLOT).unwrap_or_else(|| panic!("{}: no finding", path.display()))
}

fn render(sig: &Signature) -> String {
    let mut text = format!("{}\n{}\n{}\n", sig.title(), sig.id(), sig.key());
    for alt in &sig.alt {
        text.push_str(&format!("alt: {alt}\n"));
    }
    text
}

#[test]
fn every_log_has_its_signature() {
    let bless = std::env::var_os("REPORT_BLESS").is_some_and(|v| v == "1");
    let mut names: Vec<String> = std::fs::read_dir(dir())
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().into_string().unwrap();
            name.strip_suffix(".log").map(str::to_string)
        })
        .collect();
    names.sort();
    assert!(names.len() >= 10, "testdata/ holds {} logs", names.len());
    let mut wrong = Vec::new();
    for name in &names {
        let got = render(&sig(name));
        let path = dir().join(format!("{name}.sig"));
        if std::fs::read_to_string(&path).ok().as_deref() != Some(got.as_str()) {
            eprintln!("{name}.sig: want\n{got}");
            if bless {
                std::fs::write(&path, &got).unwrap();
            }
            wrong.push(name.as_str());
        }
    }
    // Blessing rewrites the changed files and still fails, naming them:
    // nothing passes until a run without REPORT_BLESS agrees.
    assert!(
        wrong.is_empty(),
        "signatures changed for {wrong:?}; {}",
        if bless {
            "rewritten: check `git diff testdata/`, then rerun without REPORT_BLESS"
        } else {
            "check, then rerun with REPORT_BLESS=1"
        }
    );
}

#[test]
fn two_zoo_bugs_that_fail_in_the_same_function_with_different_violation_kinds_land_in_different_groups(
) {
    let (overlap, alignment) = (
        "violation-overlap-alloc_ops-double-issue",
        "violation-alignment-alloc_ops-small-underalign",
    );
    // Both stop in the same executor function by the same path ...
    let site = |name: &str| -> Vec<String> {
        let log = std::fs::read_to_string(dir().join(format!("{name}.log"))).unwrap();
        stack(&log)
            .into_iter()
            .map(|f| f.function)
            .filter(|f| f.starts_with("shadow::executor::"))
            .take(3)
            .collect()
    };
    assert_eq!(site(overlap), site(alignment));
    assert_eq!(site(overlap)[1], "shadow::executor::Executor::adopt");
    // ... and are two groups.
    let (a, b) = (sig(overlap), sig(alignment));
    assert_eq!((a.kind.as_str(), b.kind.as_str()), ("overlap", "alignment"));
    assert_ne!(a.id(), b.id());
}

#[test]
fn the_same_bug_reached_through_two_targets_lands_in_one_group() {
    let alloc_ops = sig("violation-alignment-alloc_ops-small-underalign");
    let mt_ops = sig("violation-alignment-mt_ops-small-underalign");
    let heap_api = sig("violation-alignment-heap_api-small-underalign");
    assert_eq!(alloc_ops.id(), mt_ops.id());
    assert_eq!(alloc_ops.id(), heap_api.id());
    // The group's key is the one the harness tolerates.
    let line = "allocsoak violation: alignment: op #0 `worker-alloc worker=146 size=0 align=16`: \
                block 0x7c17a75e18a8 (size 0) is not aligned to 16 [allocator zoo:small-underalign]";
    // Written out, not computed: the site is the op family (an old line
    // has no site), and every number is `N`.
    let want = "alignment in alloc: block N (size N) is not aligned to N";
    assert_eq!(key::key_of(line).as_deref(), Some(want));
    assert_eq!(mt_ops.violation_key(), Some(want));
}

/// A block the allocator freed behind the harness's back is met by the
/// harness's next read of it (a `heap-use-after-free` in its contents
/// check), by its free of it (a `double-free` in the allocator's free) or
/// by its usable-size query (`bad-malloc_usable_size`): three ASan titles
/// of one bug, keyed by where the block was freed, that
/// share the alternative title `bad-free in <that function>`. Two such
/// bugs, freeing in two functions, are two groups.
#[test]
fn a_block_freed_behind_the_harness_is_one_bug_whichever_symptom_shows_it() {
    let xthread_read = sig("asan-heap-use-after-free-mt_ops-xthread-wrong-free");
    let xthread_free = sig("asan-double-free-mt_ops-xthread-wrong-free");
    let xthread_query = sig("asan-bad-malloc_usable_size-mt_ops-xthread-wrong-free");
    assert!(xthread_query.same_bug(&xthread_read) && xthread_query.same_bug(&xthread_free));
    let delete_read = sig("asan-heap-use-after-free-heap_api-heap-delete-drops");
    let delete_free = sig("asan-double-free-heap_api-heap-delete-drops");
    assert_eq!(xthread_read.frames, ["wrong_free"]);
    assert!(xthread_read.same_bug(&xthread_free) && xthread_free.same_bug(&xthread_read));
    assert!(delete_read.same_bug(&delete_free) && delete_free.same_bug(&delete_read));
    for (a, b) in [(&xthread_read, &delete_read), (&xthread_free, &delete_free)] {
        assert!(!a.same_bug(b), "{a} and {b}");
    }
    // A double free inside the allocator, of a block the harness does
    // not hold (`wrong_free` frees one a realloc had freed): keyed where
    // it happened, as any crash.
    let inside = sig("asan-double-free-mt_ops-xthread-wrong-free-inside");
    assert_eq!(inside.title(), "double-free in wrong_free");
    // ... and that function freeing the wrong block is the one bug.
    assert!(inside.same_bug(&xthread_read) && !inside.same_bug(&delete_read));
    // Another allocator's crash never joins by an alternative title.
    let mut elsewhere = xthread_free.clone();
    elsewhere.allocator = "other".into();
    assert!(!xthread_read.same_bug(&elsewhere));
}

/// An overflow is a `heap-buffer-overflow`, an `unknown-crash` or a `SEGV`
/// by where it ended; one copy's are one bug (`bad-access in f`), and
/// libc's `memcpy` is never the frame.
#[test]
fn one_copy_past_the_end_is_one_bug_whatever_asan_calls_it() {
    let segv = sig("asan-SEGV-alloc_ops-huge-success");
    let overflow = sig("asan-heap-buffer-overflow-alloc_ops-huge-success");
    assert_ne!(segv.id(), overflow.id());
    assert!(segv.same_bug(&overflow));
    assert_eq!(segv.frames, overflow.frames);
    // Not an access the harness made: its read of a freed block.
    let read = sig("asan-heap-use-after-free-mt_ops-xthread-wrong-free");
    assert!(!read.alt.iter().any(|t| t.starts_with("bad-access")));
}

#[test]
fn a_fuzz_log_and_its_replay_are_one_group() {
    let fuzz = sig("leak-alloc_ops-leak-on-shrink-fuzz");
    let replay = sig("leak-alloc_ops-leak-on-shrink");
    assert_eq!(fuzz.id(), replay.id());
}

#[test]
fn out_of_memory_is_one_group_per_slot() {
    let rss = sig("oom-rss-alloc_ops-system");
    let malloc = sig("oom-malloc-alloc_ops-system");
    assert_eq!(rss.id(), malloc.id());
    let log = std::fs::read_to_string(dir().join("oom-rss-alloc_ops-system.log")).unwrap();
    let elsewhere = Signature::from_log(&log, "heap_api/system").unwrap();
    assert_ne!(elsewhere.id(), rss.id());
    assert_eq!(rss.violation_key(), None);
}
