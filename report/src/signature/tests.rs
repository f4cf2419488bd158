use super::*;
use crate::ON_REFERENCE;

#[test]
fn an_rss_drift_is_one_group_per_series_and_never_tolerated() {
    let a = Signature::rss_drift("alloc_ops/system");
    assert_eq!(a.title(), "rss-drift in alloc_ops/system");
    assert_eq!(a.tolerance_key(), None);
    assert_eq!(a.id(), Signature::rss_drift("alloc_ops/system").id());
    assert_ne!(a.id(), Signature::rss_drift("heap_api/system").id());
}

#[test]
fn a_group_belongs_to_one_allocator_but_a_reference_bug_to_the_reference() {
    let line = |by: &str| {
        format!("allocsoak violation: alignment: op #0 `alloc size=1 align=16` (alloc size 0..64 align ..16): block 0x18 (size 1) is not aligned to 16 [{by}]\n")
    };
    let system = Signature::from_log(&line("allocator zoo:x"), "alloc_ops/zoo:x").unwrap();
    let jemalloc = Signature::from_log(
        &line("allocator zoo:x@jemalloc"),
        "alloc_ops/zoo:x@jemalloc",
    )
    .unwrap();
    assert_eq!(system.message, jemalloc.message, "one symptom");
    assert_eq!(system.allocator, "zoo:x");
    assert_ne!(system.id(), jemalloc.id(), "two allocators, two groups");
    let reference = line("reference allocator mimalloc");
    let a = Signature::from_log(&reference, "diff_mimalloc/system").unwrap();
    let b = Signature::from_log(&reference, "diff_mimalloc/zoo:x").unwrap();
    assert_eq!(a.allocator, "mimalloc");
    assert_eq!(a.id(), b.id(), "the reference's bug, whoever compared");
    let dylib = Signature::from_log(&line("allocator x"), "alloc_ops/dylib:/a/lib.so:p_");
    assert_eq!(dylib.unwrap().allocator, "dylib:/a/lib.so:p_");
}

#[test]
fn a_record_signs_as_its_line_does() {
    let line = "allocsoak violation: alignment: op #0 `alloc size=1 align=16` (alloc size 0..64 align ..16): block 0x18 (size 1) is not aligned to 16 [allocator zoo:x]";
    let record = Record {
        kind: "alignment".into(),
        key: key::key_of(line).unwrap(),
        allocator: "zoo:x".into(),
        reference: false,
        op_index: 0,
        op: "alloc size=1 align=16".into(),
        site: "alloc size 0..64 align ..16".into(),
        sound: true,
        line: line.into(),
        path: Vec::new(),
        what: String::new(),
        family: key::family_of(line).unwrap(),
    };
    let from_log = Signature::from_log(line, "alloc_ops/zoo:x").unwrap();
    assert_eq!(Signature::from_record(&record), from_log);
    let back = Record::from_json(&record.to_json()).unwrap();
    assert_eq!(back, record);
}

#[test]
fn a_path_keys_the_group_whichever_site_reached_it() {
    let record = |site: &str, path: &[&str]| Record {
        kind: "alignment".into(),
        key: format!("alignment in {site}: block N (size N) is not aligned to N"),
        allocator: "port".into(),
        reference: false,
        op_index: 0,
        op: "alloc size=1 align=64".into(),
        site: site.into(),
        sound: true,
        line: String::new(),
        path: path.iter().map(|f| f.to_string()).collect(),
        what: "alignment: block N (size N) is not aligned to N".into(),
        family: String::new(),
    };
    let alloc = Signature::from_record(&record(
        "alloc size 0..64 align 32..",
        &["port::aligned", "port::alloc"],
    ));
    let zeroed = Signature::from_record(&record(
        "alloc-zeroed size 4K..256K align 32..",
        &["port::aligned", "port::alloc"],
    ));
    assert_eq!(alloc.id(), zeroed.id(), "one path, one group");
    assert_eq!(alloc.tolerance_key(), None, "its variants' keys are");
    assert_eq!(
        alloc.title(),
        "alignment: block N (size N) is not aligned to N in aligned, alloc"
    );
    for (function, own) in [
        ("<port::Heap as core::alloc::GlobalAlloc>::alloc", "alloc"),
        ("<zoo::Zoo>::align_ignored", "align_ignored"),
        ("rlsf::tlsf::Tlsf<u32, u32, 24, 8>::allocate", "allocate"),
        (
            "mi_heap_malloc_zero_aligned_at",
            "mi_heap_malloc_zero_aligned_at",
        ),
        ("<port::Heap>::alloc::{closure#0}", "alloc::{closure#0}"),
    ] {
        assert_eq!(own_name(function), own);
    }
    let wrapped = Signature::from_record(&record(
        "calloc size 0..64 align 32..",
        &["port::aligned", "port::alloc", "port::calloc"],
    ));
    assert_ne!(alloc.id(), wrapped.id());
    assert!(alloc.same_path(&wrapped) && wrapped.same_path(&alloc));
    let other = Signature::from_record(&record(
        "alloc size 0..64 align 32..",
        &["port::alloc", "port::small"],
    ));
    assert!(!alloc.same_path(&other), "two functions, two bugs");
    let mut elsewhere = wrapped.clone();
    elsewhere.allocator = "other".into();
    assert!(!alloc.same_path(&elsewhere), "two allocators, two groups");
    let kind = |sig: &Signature, kind: &str| Signature {
        kind: kind.into(),
        ..sig.clone()
    };
    let (freed, realloced) = (kind(&alloc, "contents"), kind(&wrapped, "realloc-prefix"));
    assert!(
        freed.same_path(&realloced),
        "a block changed by a call and a realloc's lost prefix: one family"
    );
    assert!(!kind(&alloc, "overlap").same_path(&realloced), "two kinds");
    assert!(alloc.same_bug(&wrapped) && alloc.same_bug(&alloc));
    assert_eq!(Signature::from_key(&wrapped.key(), true), Some(wrapped));
    let no_path = Signature::from_record(&record("alloc size 0..64 align 32..", &[]));
    assert!(!no_path.path && no_path.violation_key().is_some());
    assert!(!no_path.same_path(&no_path));
}

#[test]
fn without_a_path_one_calls_bug_is_one_group_at_every_size() {
    // A wrapped C library's realloc, inlined into the harness: no counters,
    // so no path. Its one bug met at four sizes was four groups.
    let line = |op: &str, site: &str| {
        format!("allocsoak violation: alignment: op #2 `{op}` ({site}): block 0x18 (size 100) is not aligned to 32 [allocator port]")
    };
    let record = |op: &str, site: &str| {
        let line = line(op, site);
        Record {
            kind: "alignment".into(),
            key: key::key_of(&line).unwrap(),
            allocator: "port".into(),
            reference: false,
            op_index: 2,
            op: op.into(),
            site: site.into(),
            sound: true,
            line: line.clone(),
            path: Vec::new(),
            what: "alignment: block N (size N) is not aligned to N".into(),
            family: key::family_of(&line).unwrap(),
        }
    };
    let small = record(
        "realloc slot=0 size=100 align=32",
        "realloc size 65..4K align 32..",
    );
    let large = record(
        "realloc slot=1 size=9000 align=64",
        "realloc size 4K..256K align 32..",
    );
    let (a, b) = (
        Signature::from_record(&small),
        Signature::from_record(&large),
    );
    assert_ne!(small.key, large.key, "their keys keep the tiers");
    assert_eq!(a.id(), b.id(), "one call, one group");
    assert_eq!(
        a.title(),
        "alignment in realloc: block N (size N) is not aligned to N"
    );
    assert_eq!(
        Signature::from_log(&small.line, "alloc_ops/port"),
        Some(a.clone())
    );
    let alloc = record("alloc size=100 align=32", "alloc size 65..4K align 32..");
    assert_ne!(
        Signature::from_record(&alloc).id(),
        a.id(),
        "two calls, two groups"
    );
    // A record from before the family key signs by its key.
    let old = Record {
        family: String::new(),
        ..small.clone()
    };
    assert_eq!(Signature::from_record(&old).message, small.key);
}

#[test]
fn a_report_raised_on_the_reference_side_is_the_references() {
    let report = "==1==ERROR: AddressSanitizer: heap-use-after-free on address 0x7b at pc 0x55\n\
                  \x20   #0 0x55 in zoo::Zoo::free /w/zoo/src/lib.rs:330:9\n\
                  SUMMARY: AddressSanitizer: heap-use-after-free /w/zoo/src/lib.rs:330:9 in free\n";
    let marked = format!("{report}{ON_REFERENCE} [reference allocator zoo:x]\n");
    let a = Signature::from_log(&marked, "diff_mimalloc/system").unwrap();
    let b = Signature::from_log(&marked, "diff_mimalloc/jemalloc").unwrap();
    assert_eq!(a.allocator, "zoo:x");
    assert_eq!(a.id(), b.id(), "the reference's bug, whoever compared");
    let key = a.tolerance_key().unwrap();
    assert_eq!(crate::key::reference_of(&key), Some("zoo:x"), "{key}");
    // Without the harness's line it is the slot's, as before.
    let own = Signature::from_log(report, "diff_mimalloc/system").unwrap();
    assert_eq!(own.allocator, "system");
    assert_eq!(crate::key::reference_of(&own.title()), None);
}

/// A timeout's stack and a leaked block's allocation, as libFuzzer and
/// LeakSanitizer print them in a `diff_mimalloc` process that named its
/// reference (frames cut from a real timeout in a spinning reference).
const NAMED: &str = "allocsoak: diff_mimalloc's reference: dylib:/t/libspin.so:sp_\n";
const HUNG: &str = "==1== ERROR: libFuzzer: timeout after 3 seconds\n\
    \x20   #0 0x55 in __sanitizer_print_stack_trace /rustc/llvm/asan_stack.cpp:87:3\n\
    \x20   #5 0x7f in sp_malloc (/t/libspin.so+0x117d) (BuildId: 63a0)\n\
    \x20   #6 0x55 in <shadow::allocator::dylib::Dylib as shadow::allocator::Allocator>::alloc /w/shadow/src/allocator/dylib/mod.rs:428:22\n\
    \x20   #7 0x55 in on_reference_side<shadow::executor::Outcome, shadow::diff::run::{closure_env#0}> /w/shadow/src/sanitizer.rs:260:5\n\
    SUMMARY: libFuzzer: timeout\n";
const LEAKED: &str = "==1==ERROR: LeakSanitizer: detected memory leaks\n\n\
    Direct leak of 64 byte(s) in 1 object(s) allocated from:\n\
    \x20   #0 0x55 in malloc /rustc/llvm/asan_malloc_linux.cpp:67:3\n\
    \x20   #1 0x7f in sp_malloc (/t/libspin.so+0x1180)\n\
    \x20   #2 0x55 in shadow::sanitizer::on_reference_side /w/shadow/src/sanitizer.rs:260:5\n\n\
    SUMMARY: AddressSanitizer: 64 byte(s) leaked in 1 allocation(s).\n";

#[test]
fn a_timeout_or_leak_in_the_references_calls_is_the_references() {
    for finding in [HUNG, LEAKED] {
        let log = format!("{NAMED}{finding}");
        let a = Signature::from_log(&log, "diff_mimalloc/system").unwrap();
        let b = Signature::from_log(&log, "diff_mimalloc/jemalloc").unwrap();
        assert_eq!(a.allocator, "dylib:/t/libspin.so:sp_", "{finding}");
        assert_eq!(
            a.id(),
            b.id(),
            "the reference's, whoever compared: {finding}"
        );
        // Without the reference's frame, or its name, the slot's as before.
        for own in [log.replace("on_reference_side", "run"), finding.to_string()] {
            let a = Signature::from_log(&own, "diff_mimalloc/system").unwrap();
            let b = Signature::from_log(&own, "diff_mimalloc/jemalloc").unwrap();
            assert_eq!(a.allocator, "system", "{own}");
            assert_ne!(a.id(), b.id(), "{own}");
        }
    }
}

#[test]
fn a_deadly_signal_is_never_tolerated() {
    let log = "AddressSanitizer:DEADLYSIGNAL\n\
               ==1==ERROR: AddressSanitizer: SEGV on unknown address 0x0001f0 (pc 0x55 bp 0x7f sp 0x7f T0)\n\
               ==1==The signal is caused by a WRITE memory access.\n\
               \x20   #0 0x55 in zoo::Zoo::class_of /w/zoo/src/lib.rs:180:9\n\
               SUMMARY: AddressSanitizer: SEGV /w/zoo/src/lib.rs:180:9 in class_of\n";
    let sig = Signature::from_log(log, "").unwrap();
    assert_eq!(sig.kind, "SEGV");
    assert_eq!(sig.tolerance_key(), None, "{}", sig.title());
    let uaf = "==9==ERROR: AddressSanitizer: heap-use-after-free on address 0x7b at pc 0x55\n\
               \x20   #0 0x55 in f /w/a.c:1:1\n";
    assert!(Signature::from_log(uaf, "")
        .unwrap()
        .tolerance_key()
        .is_some());
}

#[test]
fn violation_outranks_the_signal_it_causes() {
    let log = "thread '<unnamed>' panicked at shadow/src/executor.rs:1:1:\n\
               allocsoak violation: overlap: op #3 `alloc size=41 align=4`: block 0x10+41 overlaps live block 0x10+41\n\
               ==1== ERROR: libFuzzer: deadly signal\n";
    assert_eq!(kind(log).as_deref(), Some("overlap"));
}

#[test]
fn sanitizer_and_engine_errors_have_kinds() {
    let uaf = "==9==ERROR: AddressSanitizer: heap-use-after-free on address 0x7b at pc 0x55\n";
    assert_eq!(kind(uaf).as_deref(), Some("heap-use-after-free"));
    assert_eq!(
        kind("==9==ERROR: LeakSanitizer: detected memory leaks\n").as_deref(),
        Some("leak")
    );
    assert_eq!(
        kind("==9== ERROR: libFuzzer: timeout after 25 seconds\n").as_deref(),
        Some("timeout")
    );
    assert_eq!(
        kind("==9== ERROR: libFuzzer: out-of-memory (used: 2100Mb)\n").as_deref(),
        Some("oom")
    );
    assert_eq!(
        kind("#1000 DONE cov: 10 ft: 20\nDone 1000 runs in 1 second(s)\n"),
        None
    );
}

#[test]
fn an_allocator_assert_outranks_the_abort_it_causes() {
    let mimalloc = "mimalloc: assertion failed: at \"internal.h\":698, mi_page_set_in_full\n\
                    ==7== ERROR: libFuzzer: deadly signal\n";
    assert_eq!(kind(mimalloc).as_deref(), Some("assertion"));
    let c = "alloc_ops: arena.c:12: arena_free: Assertion `p != NULL' failed.\n";
    assert_eq!(kind(c).as_deref(), Some("assertion"));
}

#[test]
fn the_summary_names_the_sanitizer_error_when_the_first_line_does_not() {
    let log = "==1==ERROR: AddressSanitizer: attempting double-free on 0x6020 in thread T0:\n\
               \x20   #0 0x55 in free /rustc/llvm/src/llvm-project/compiler-rt/lib/asan/asan_malloc_linux.cpp:51:3\n\
               \x20   #1 0x55 in arena_free /src/arena.c:40:5\n\
               SUMMARY: AddressSanitizer: double-free /src/arena.c:40:5 in arena_free\n";
    assert_eq!(kind(log).as_deref(), Some("double-free"));
    let sig = Signature::from_log(log, "alloc_ops/arena").unwrap();
    assert_eq!(sig.title(), "double-free in arena_free");
}

// C's assert format, written here by hand: no bundled allocator uses
// `assert.h` (the golden logs hold mimalloc's real one).
#[test]
fn a_c_assertion_keys_on_its_expression_and_function() {
    let log = "alloc_ops: arena.c:12: arena_free: Assertion `p->size == 16' failed.\n\
               ==7== ERROR: libFuzzer: deadly signal\n\
               \x20   #0 0x7f in abort stdlib/./stdlib/abort.c:79:7\n\
               \x20   #1 0x7f in __assert_fail assert/assert.c:101:3\n\
               \x20   #2 0x55 in arena_free /src/arena.c:12:5\n";
    let sig = Signature::from_log(log, "alloc_ops/arena").unwrap();
    assert_eq!(sig.message, "assertion `p->size == N` (arena_free)");
    assert_eq!(sig.frames, ["arena_free"]);
    let other = log.replace("p->size == 16", "p->next != NULL");
    assert_ne!(
        Signature::from_log(&other, "alloc_ops/arena").unwrap().id(),
        sig.id()
    );
}

// A Rust panic that is not a violation, written here by hand from the
// lines a real one prints (no zoo bug panics outside the shadow's checks).
#[test]
fn a_panic_keys_on_its_message_and_the_frames_below_the_panic_machinery() {
    let log = "thread '<unnamed>' (3029) panicked at /work/main/shadow/src/model.rs:88:14:\n\
               index out of bounds: the len is 3 but the index is 7\n\
               ==3029== ERROR: libFuzzer: deadly signal\n\
               \x20   #0 0x55 in __sanitizer_print_stack_trace /rustc/llvm/src/llvm-project/compiler-rt/lib/asan/asan_stack.cpp:87:3\n\
               \x20   #1 0x55 in fuzzer::PrintStackTrace() /x/libfuzzer-sys-0.4.13/libfuzzer/FuzzerUtil.cpp:210:38\n\
               \x20   #2 0x7f  (/lib/x86_64-linux-gnu/libc.so.6+0x3c04f) (BuildId: 93ac)\n\
               \x20   #3 0x7f in abort stdlib/./stdlib/abort.c:79:7\n\
               \x20   #4 0x55 in core::panicking::panic_bounds_check /rustc/e50a/library/core/src/panicking.rs:280:5\n\
               \x20   #5 0x55 in <shadow::model::ShadowHeap>::remove::h0123456789abcdef /work/main/shadow/src/model.rs:88:14\n\
               \x20   #6 0x55 in {closure#0} /work/main/shadow/src/executor.rs:380:23\n\
               \x20   #7 0x55 in free_block /work/main/shadow/src/executor.rs:379:22\n\
               \x20   #8 0x55 in free_block /work/main/shadow/src/executor.rs:379:22\n\
               \x20   #9 0x55 in <shadow::executor::Executor>::step /work/main/shadow/src/executor.rs:152:28\n";
    let sig = Signature::from_log(log, "alloc_ops/system").unwrap();
    assert_eq!(sig.kind, "crash");
    assert_eq!(
        sig.message,
        "panic: index out of bounds: the len is N but the index is N"
    );
    // The harness's own callers below the first frame are noise.
    assert_eq!(sig.frames, ["shadow::model::ShadowHeap::remove"]);
    assert_eq!(sig.violation_key(), None);
    assert_eq!(stack(log).len(), 10);
}

#[test]
fn a_panic_inside_the_allocator_is_a_tolerable_violation() {
    let log = "thread '<unnamed>' panicked at shadow/src/executor.rs:140:9:\n\
               allocsoak violation: panic: op #1 `alloc size=2500 align=8` (alloc size 65..4K align ..16): allocator panicked: index out of bounds: the len is 40 but the index is 43 @ zoo/src/lib.rs:322 [allocator zoo:panic-class]\n\
               ==1== ERROR: libFuzzer: deadly signal\n";
    let sig = Signature::from_log(log, "alloc_ops/zoo:panic-class").unwrap();
    assert_eq!(sig.kind, "panic");
    assert_eq!(
        sig.violation_key(),
        Some("panic: allocator panicked: index out of bounds: the len is N but the index is N @ zoo/src/lib.rs:322")
    );
}

const UAF: &str = "==9==ERROR: AddressSanitizer: heap-use-after-free on address 0x7b at pc 0x55\n\
                   READ of size 8 at 0x7b thread T0\n\
                   \x20   #0 0x55 in mi_free /src/mimalloc/free.c:40:5\n\
                   \x20   #1 0x55 in <shadow::executor::Executor>::free_block /work/shadow/src/executor.rs:373:18\n\
                   SUMMARY: AddressSanitizer: heap-use-after-free /src/mimalloc/free.c:40:5 in mi_free\n";

/// One bug the harness's checks meet through two callers, and one leak
/// the allocator made through two harness calls: one signature each.
#[test]
fn the_harness_below_the_first_frame_never_splits_a_group() {
    let uaf = |caller: &str| {
        format!(
            "==9==ERROR: AddressSanitizer: heap-use-after-free on address 0x7b at pc 0x55
             READ of size 8 at 0x7b thread T0
             \x20   #0 0x55 in verify /work/shadow/src/executor/blocks.rs:209:13
             \x20   #1 0x55 in {caller} /work/shadow/src/executor/race.rs:90:5
             \x20   #2 0x55 in shadow::executor::Executor::finish /work/shadow/src/executor/mod.rs:349:9
"
        )
    };
    let (a, b) = (
        Signature::from_log(
            &uaf("shadow::executor::Executor::free_block"),
            "mt_ops/zoo:x",
        )
        .unwrap(),
        Signature::from_log(&uaf("remote_free_race"), "mt_ops/zoo:x").unwrap(),
    );
    assert_eq!(
        (a.key(), a.frames.clone()),
        (b.key(), vec!["verify".to_string()])
    );
    let leak = |entry: &str| {
        format!(
            "==9==ERROR: LeakSanitizer: detected memory leaks
Direct leak of 8 byte(s) in 1 object(s) allocated from:
             \x20   #0 0x55 in malloc asan_malloc_linux.cpp:1:1
             \x20   #1 0x55 in <shadow::allocator::system::System as shadow::allocator::Allocator>::alloc /work/shadow/src/allocator/system.rs:53:9
             \x20   #2 0x55 in {entry} /work/shadow/src/allocator/system.rs:60:9
             \x20   #3 0x55 in alloc_inner /work/zoo/src/lib.rs:450:9
             \x20   #4 0x55 in call /work/shadow/src/guard.rs:81:5
"
        )
    };
    let (a, b) = (
        Signature::from_log(&leak("aligned"), "alloc_ops/zoo:x").unwrap(),
        Signature::from_log(&leak("plain"), "alloc_ops/zoo:x").unwrap(),
    );
    assert_eq!(
        (a.key(), a.frames.clone()),
        (b.key(), vec!["alloc_inner".to_string()])
    );
}

#[test]
fn a_sanitizer_report_is_tolerated_by_its_title_and_nothing_else_is_but_violations() {
    let sig = Signature::from_log(UAF, "alloc_ops/mimalloc").unwrap();
    assert_eq!(
        sig.tolerance_key().as_deref(),
        Some("asan: heap-use-after-free READ in mi_free")
    );
    let leak = "==9==ERROR: LeakSanitizer: detected memory leaks\nDirect leak of 8 byte(s)\n    #0 0x55 in malloc x.c:1:1\n    #1 0x55 in f y.rs:1:1\n";
    assert_eq!(
        Signature::from_log(leak, "s").unwrap().tolerance_key(),
        None
    );
    let timeout = "==9== ERROR: libFuzzer: timeout after 25 seconds\n";
    assert_eq!(
        Signature::from_log(timeout, "s").unwrap().tolerance_key(),
        None
    );
}

#[test]
fn a_reports_address_is_read_from_its_error_line() {
    for (line, at) in [
        ("==1==ERROR: AddressSanitizer: attempting double-free on 0x7bd04b5f94d0 in thread T0:", 0x7bd04b5f94d0),
        ("==1==ERROR: AddressSanitizer: heap-use-after-free on address 0x7b70 at pc 0x55 bp 0x7f", 0x7b70),
        ("==1==ERROR: AddressSanitizer: attempting to call malloc_usable_size() for pointer which is not owned: 0x7b50cf5fa010", 0x7b50cf5fa010),
    ] {
        assert_eq!(crate::reported_address(line), Some(at), "{line}");
    }
    assert_eq!(crate::reported_address("no report"), None);
}

#[test]
fn a_reports_region_is_read_from_its_description() {
    let report = "==1==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x7c4db21e0538 at pc 0x55\n\
                  WRITE of size 40 at 0x7c4db21e0538 thread T0\n\
                  0x7c4db21e0538 is located 0 bytes after 56-byte region [0x7c4db21e0500,0x7c4db21e0538)\n";
    assert_eq!(crate::reported_region(report), Some(0x7c4db21e0500));
    assert_eq!(crate::reported_region("no report"), None);
}
