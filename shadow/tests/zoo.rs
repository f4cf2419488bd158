//! Each planted bug, reached by a short hand-written program, is reported
//! with its kind; the same program runs clean on the correct allocator.
//! (`just zoo` proves the fuzzer finds them on its own.)

mod common;

use std::sync::{Mutex, MutexGuard};

use zoo::Bug;

/// Held for a whole test that runs programs: a check of what the process
/// holds (jemalloc's count of bytes in use, `kept-bytes`; pages given
/// back lazily, `released-live`) missed its bug in 5 of 80 runs of this
/// file while another test's programs ran beside it, and in 0 of 50 alone.
/// A fuzz process runs one program at a time.
fn alone() -> MutexGuard<'static, ()> {
    static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());
    ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner())
}

/// A program that walks into `bug`, in the text form. A bug in a large
/// block is only seen where that block's seed puts a window (or checks it
/// whole), so its program walks in many times.
fn reaching(bug: Bug) -> String {
    let text = match bug {
        Bug::LargeReallocHole => {
            return "target alloc_ops\n".to_string()
                + &"alloc size=70000 align=8\nrealloc slot=newest to=double\n".repeat(60)
        }
        Bug::LargeDirtyZeroed => {
            return "target alloc_ops\n".to_string()
                + &"alloc size=140000 align=8 zeroed\nfree slot=newest\n".repeat(150)
        }
        Bug::SmallUnderalign => "target alloc_ops\nalloc size=8 align=16\n",
        Bug::SizeEqAlign => "target alloc_ops\nalloc size=4096 align=4096\n",
        Bug::AlignIgnored => "target alloc_ops\nalloc size=100 align=64\n",
        Bug::DoubleIssue => "target alloc_ops\nalloc size=40 align=8\nfree slot=0\nalloc size=40 align=8\nalloc size=40 align=8\n",
        Bug::UsableOversize => "target alloc_ops\nalloc size=100 align=8\nusable-size slot=0\nalloc size=100 align=8\nusable-size slot=1\n",
        Bug::ShortReallocCopy => "target alloc_ops\nalloc size=300 align=8\nrealloc slot=0 to=double\n",
        Bug::DirtyZeroed => "target alloc_ops\nalloc size=220 align=8\nfree slot=0\nalloc size=220 align=8\nfree slot=0\nalloc size=220 align=8 zeroed\n",
        Bug::CallocWrap => "target alloc_ops\ncalloc count=9223372036854775809 size=2\n",
        Bug::HugeSuccess => "target alloc_ops\nalloc size=9223372036854775807 align=8\n",
        Bug::StaleLink => "target alloc_ops\nalloc size=80 align=8\nfree slot=0\nalloc size=80 align=8\nalloc size=80 align=8\nfree slot=1\nfree slot=0\n",
        Bug::XthreadWrongFree => "target mt_ops\nworker-alloc worker=0 size=200 align=8\nalloc size=200 align=8\nworker-free worker=0 slot=1\n",
        Bug::HeapSizedFreeTwice => "target heap_api\nheap-new\nheap-alloc heap=0 size=64 align=8\nfree-sized slot=0\nheap-destroy heap=0\n",
        Bug::HeapRezallocFreesTwice => "target heap_api\nheap-new\nheap-alloc heap=0 size=64 align=8\nrealloc-zeroed slot=0 to=4000\nheap-destroy heap=0\n",
        Bug::HeapExpandOverclaims => "target heap_api\nheap-new\nheap-alloc heap=0 size=64 align=8\nresize-in-place slot=0 to=double extra=0\n",
        Bug::HeapRemoteFreeTwice => "target heap_api\nheap-new\nheap-alloc heap=0 size=64 align=8\nrace-free worker=1 slot=0\nheap-destroy heap=0\n",
        Bug::HeapDeleteDrops => "target heap_api\nheap-new\nheap-alloc heap=0 size=64 align=8\nheap-alloc heap=0 size=128 align=8\nheap-alloc heap=0 size=256 align=8\nheap-delete heap=0\n",
        Bug::LeakOnShrink => "target alloc_ops\nalloc size=4096 align=8\nrealloc slot=0 to=100\n",
        Bug::CacheMissesDoubleFree => "target alloc_ops\nalloc size=100 align=8\nattack kind=double-free size=100\nfree slot=0\n",
        Bug::CacheRawLinks => "target alloc_ops\nalloc size=180 align=8\nattack kind=freed-write size=180\nfree slot=0\n",
        Bug::CacheTrustsSpan => "target alloc_ops\nalloc size=300 align=8\nattack kind=interior-free size=300\nfree slot=0\n",
        Bug::CacheTrustsHeader => "target alloc_ops\nalloc size=2000 align=8\nattack kind=overflow size=2000\nfree slot=0\n",
        Bug::CacheGuardsHeader => "target alloc_ops\nalloc size=2000 align=8\nattack kind=header-write size=2000\nfree slot=0\n",
        Bug::MisalignedReallocShort => "target alloc_ops\nalloc size=8 align=16\nrealloc slot=0 to=64\n",
        Bug::PanicClass => "target alloc_ops\nalloc size=2500 align=8\n",
        Bug::WildWrite => "target alloc_ops\nalloc size=3700 align=8\n",
        Bug::TinyReallocShort => "target alloc_ops\nalloc size=12 align=8\nrealloc slot=0 to=double\n",
        Bug::LatentCorruption => "target alloc_ops\nalloc size=3100 align=8\nfree slot=0\n",
        Bug::HugeTruncate => "target alloc_ops\nalloc size=4294967312 align=8\n",
        Bug::FullPageReissue => "target alloc_ops\nbulk-alloc size=56 align=8 count=600\n",
        Bug::CrowdedReissue => "target workload\nworkload kind=larson threads=1 ops=20000 slots=16000 sizes=17..64 seed=1\n",
        Bug::RezallocDirty => "target alloc_ops\nalloc size=600 align=8\nrealloc-zeroed slot=0 to=2000\n",
        Bug::RegrowStale => "target alloc_ops\nalloc size=100 align=8\nusable-size slot=0\nrealloc-zeroed slot=0 to=120\n",
        // A 256-byte room left dirty first, then a zeroed block moved
        // into it and grown within it.
        Bug::RezallocMovedSlack => "target alloc_ops\nalloc size=250 align=8\nfree slot=0\nalloc size=100 align=8 zeroed\nrealloc-zeroed slot=0 to=200\nrealloc-zeroed slot=0 to=250\n",
        Bug::LargeReuseDirty => "target alloc_ops\nalloc size=41943040 align=8\nfree slot=0\nalloc size=41943040 align=8 zeroed\n",
        Bug::InteriorClass => "target alloc_ops\nalloc size=300 align=1\n",
        Bug::HugeZeroedFooter => "target alloc_ops\nalloc size=134217727 align=8 zeroed\n",
        Bug::ExpandOverclaims => "target alloc_ops\nalloc size=600 align=8\nresize-in-place slot=0 to=1000 extra=0\n",
        Bug::SizedFreeMisclass => "target alloc_ops\nalloc size=1500 align=8\nfree-sized slot=0\nalloc size=1700 align=8\n",
        Bug::PlainReallocMisaligns => "target alloc_ops\nalloc size=100 align=64\nrealloc-plain slot=0 to=200\n",
        Bug::ReallocNullFails => "target alloc_ops\nrealloc-null size=32\n",
        Bug::FreeNullPanics => "target alloc_ops\nfree-null\n",
        Bug::GoodSizeLies => "target alloc_ops\nalloc size=120 align=8\n",
        Bug::PurgeDropsLive => "target alloc_ops\nalloc size=20000 align=8\npurge delay=now force\n",
        Bug::PurgeLazyFreesLive => "target alloc_ops\nalloc size=20000 align=8\npurge delay=now force\n",
        // A large block's pages freed just before: dirty until a purge.
        Bug::PurgeIgnoresDelay => "target alloc_ops\nalloc size=300000 align=8\nfree slot=0\npurge delay=now force\n",
        // The freed block is cached; the next request takes it and, before
        // clearing the cache, calls the hook, whose own request takes it too.
        Bug::HookReentryReissue => "target alloc_ops\nalloc size=5000 align=8\nalloc size=5000 align=8\nhook-free slot=0\nfree slot=0\nalloc size=5000 align=8\n",
        Bug::OsFailLeaks => "target alloc_ops\nos-fail ops=1\nalloc size=300000 align=8\n",
        Bug::CapacityLeak => "target alloc_ops\nalloc size=3000 align=8\nrealloc slot=0 to=100\n",
        Bug::SlowLeak => "target alloc_ops\nalloc size=64 align=8\nfree slot=0\n",
        Bug::HoardedFrees => "target diff_mimalloc\nalloc size=8192 align=8\nfree slot=0\n",
        Bug::LateRemoteLeak => "target workload\nworkload kind=xmalloc threads=4 ops=20000 slots=1000 sizes=8..1024 seed=1\n",
        Bug::ForkHeldLock => "target mt_ops\nrace-fork worker=0 size=18000 align=8\n",
        // Worker 0's first call fills its cache; its exit hands the cache to
        // the orphans, its late destructor pops it, and the next request
        // takes the same block off the orphans.
        Bug::ExitStaleCache => "target mt_ops\nworker-alloc worker=0 size=100 align=8\nexit-alloc worker=0 size=100 align=8\nalloc size=100 align=8\n",
        Bug::SplitNeverMerged => "target workload\nworkload kind=frag threads=4 ops=20000 slots=500 sizes=512..4096 seed=7\n",
        Bug::RacyFreeList => "target mt_ops\nworker-alloc worker=0 size=400 align=8\nalloc size=400 align=8\nrace-free worker=1 slot=0\nrace-alloc worker=0 size=400 align=8\nrace-alloc worker=2 size=400 align=8\n",
        Bug::LostRemoteFree => "target mt_ops\nrace-remote-free freer=1 owner=0 size=1500 align=8 count=32\n",
        Bug::ExitReclaimRace => "target mt_ops\nrace-exit worker=0 size=5000 align=8 count=16\n",
        Bug::XthreadZeroedLink => "target mt_ops\nrace-alloc worker=1 size=7000 align=8 zeroed\n",
        Bug::DroppedRemoteFree => "target mt_ops\nalloc size=14000 align=8\nrace-free worker=1 slot=0\n",
        Bug::LargeInteriorSpan => "target alloc_ops\nalloc size=5000000 align=8\nusable-size slot=0\n",
        Bug::HugeReallocMisaligns => "target alloc_ops\nalloc size=100000000 align=65536\nalloc size=300000000 align=8\n",
        Bug::HugeCrossShort => "target alloc_ops\nalloc size=5000 align=8\nrealloc slot=0 to=100000000\n",
        Bug::SlackFooter => "target alloc_ops\nalloc size=9000 align=8\nusable-size slot=0\nfree slot=0\n",
        Bug::NarrowProvenance => "target alloc_ops\nalloc size=64 align=8\nfree slot=0\n",
    };
    text.to_string()
}

/// Where a bug's kind is checked.
enum Check {
    /// Here, in-process: the shadow model alone reports this kind.
    Here(&'static str),
    /// Not here, for the reason given. `in_test` is the test (file, fn)
    /// whose body reaches the bug
    /// ([`every_bug_not_checked_here_is_checked_elsewhere`]); `None` where
    /// only `allocsoak zoo` does: the last step of `just test`, which
    /// checks every bug's kind through the real fuzz binary under ASan.
    Elsewhere {
        why: &'static str,
        in_test: Option<(&'static str, &'static str)>,
    },
}

/// Where `bug`'s kind is checked, and, when not here, why not.
fn check(bug: Bug) -> Check {
    let elsewhere = |why, in_test| Check::Elsewhere { why, in_test };
    match bug {
        Bug::UsableOversize => elsewhere(
            "the harness writes up to the usable size it is told: past the real block, which only ASan sees",
            None,
        ),
        Bug::HeapSizedFreeTwice | Bug::HeapRezallocFreesTwice | Bug::HeapRemoteFreeTwice => elsewhere(
            "the block is freed twice: ASan's double free (glibc aborts)",
            None,
        ),
        Bug::HeapDeleteDrops => elsewhere(
            "the dropped blocks are freed behind the harness: ASan's use-after-free and double free",
            None,
        ),
        Bug::XthreadWrongFree => elsewhere(
            "a block freed to the wrong thread's heap is handed out twice; ASan sees the use after free first",
            Some((
                "soak/tests/past_first_bug.rs",
                "a_sanitizer_report_is_got_past_once_filed",
            )),
        ),
        Bug::LeakOnShrink => elsewhere(
            "a leak: LeakSanitizer's and the RSS drift workers'",
            Some((
                "soak/tests/drift.rs",
                "a_leaking_allocator_is_filed_as_rss_drift_with_its_culprits",
            )),
        ),
        Bug::SlowLeak => elsewhere(
            "a leak the programs' checks never see",
            Some((
                "shadow/tests/zoo.rs",
                "slow_leak_keeps_a_block_per_thousand_calls",
            )),
        ),
        Bug::HoardedFrees => elsewhere(
            "memory the reference holds over a fuzzing process's programs",
            Some((
                "soak/tests/past_first_bug.rs",
                "a_reference_that_holds_memory_is_one_group_of_the_reference",
            )),
        ),
        Bug::LateRemoteLeak => elsewhere(
            "a leak the programs' checks never see, after a million cross-thread frees",
            Some((
                "shadow/tests/workload.rs",
                "late_remote_leak_keeps_memory_only_past_a_million_remote_frees",
            )),
        ),
        Bug::SplitNeverMerged => elsewhere(
            "memory that grows run after run, with every block freed",
            Some((
                "shadow/tests/workload.rs",
                "split_never_merged_grows_without_bound_only_on_worker_threads",
            )),
        ),
        Bug::MisalignedReallocShort => elsewhere(
            "it hides behind the misaligned block it needs, an alignment violation",
            Some((
                "shadow/tests/tolerance.rs",
                "known_bugs_are_got_past_and_new_ones_still_fail",
            )),
        ),
        Bug::RacyFreeList => elsewhere(
            "it needs a race",
            Some((
                "shadow/tests/race.rs",
                "a_racy_free_list_is_found_by_a_race_and_never_one_op_at_a_time",
            )),
        ),
        Bug::LostRemoteFree => elsewhere(
            "it needs a race",
            Some((
                "shadow/tests/race.rs",
                "a_lost_remote_free_is_found_by_a_race_and_never_one_op_at_a_time",
            )),
        ),
        Bug::ForkHeldLock => elsewhere(
            "it needs a race",
            Some((
                "shadow/tests/race.rs",
                "a_lock_held_at_a_fork_is_found_by_a_race_and_never_one_op_at_a_time",
            )),
        ),
        Bug::ExitReclaimRace => elsewhere(
            "it needs a race",
            Some((
                "shadow/tests/race.rs",
                "an_exit_reclaim_race_is_found_by_a_race_and_never_one_op_at_a_time",
            )),
        ),
        Bug::LatentCorruption => elsewhere(
            "it breaks a later program, not its own",
            Some((
                "shadow/tests/zoo.rs",
                "latent_corruption_crashes_a_later_program_not_its_own",
            )),
        ),
        Bug::NarrowProvenance => elsewhere(
            "only Miri sees a pointer used past the reference it was made from",
            Some((
                "soak/tests/miri.rs",
                "a_soaks_miri_passes_file_the_provenance_bug_once_and_leave_the_arena_clean",
            )),
        ),
        Bug::WildWrite => elsewhere(
            "it kills the process with a SIGSEGV",
            Some((
                "soak/tests/past_first_bug.rs",
                "a_deadly_signal_is_filed_from_the_input_history_and_got_past",
            )),
        ),
        _ => Check::Here(bug.expected_kinds()[0]),
    }
}

/// The text of `fn name` in `text`, up to the next test or function.
fn body_of<'t>(text: &'t str, name: &str) -> Option<&'t str> {
    let rest = &text[text.find(&format!("fn {name}("))?..];
    let end = ["\n#[test]", "\nfn "]
        .iter()
        .filter_map(|next| rest[1..].find(next))
        .min()
        .map_or(rest.len(), |e| e + 1);
    Some(&rest[..end])
}

/// Every bug not checked here, but those only `allocsoak zoo` checks,
/// names a test whose body reaches it (by its name or its variant).
#[test]
fn every_bug_not_checked_here_is_checked_elsewhere() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let mut unchecked = Vec::new();
    for bug in Bug::ALL {
        let Check::Elsewhere {
            why,
            in_test: Some((file, test)),
        } = check(bug)
        else {
            continue;
        };
        let text = std::fs::read_to_string(root.join(file)).unwrap_or_default();
        let reached = body_of(&text, test).is_some_and(|body| {
            body.contains(bug.name()) || body.contains(&format!("Bug::{bug:?}"))
        });
        if !reached {
            unchecked.push(format!(
                "{} ({why}): {file}'s {test} does not reach it",
                bug.name()
            ));
        }
    }
    assert!(unchecked.is_empty(), "{}", unchecked.join("\n"));
}

#[test]
fn every_planted_bug_is_reported_with_its_kind() {
    let _alone = alone();
    let mut missed = Vec::new();
    for bug in Bug::ALL {
        let program = common::program(&reaching(bug));
        assert_eq!(
            common::kind(&program, "system"),
            None,
            "{} program on system",
            bug.name()
        );
        let Check::Here(expected) = check(bug) else {
            continue;
        };
        let found = common::kind(&program, &format!("zoo:{}", bug.name()));
        if found.as_deref() != Some(expected) {
            missed.push(format!(
                "{}: expected {expected}, found {found:?}",
                bug.name()
            ));
        }
    }
    assert!(missed.is_empty(), "{}", missed.join("\n"));
}

#[test]
fn bugs_stay_hidden_off_their_condition() {
    let _alone = alone();
    // Same op shapes, sizes just outside each bug's condition.
    let benign = "target alloc_ops\nalloc size=80 align=16\nalloc size=4096 align=16\nalloc size=64 align=8\nfree slot=2\n\
                  alloc size=64 align=8\nalloc size=64 align=8\nrealloc slot=0 to=double\nalloc size=300 align=8 zeroed\n";
    let program = common::program(benign);
    for bug in Bug::ALL {
        assert_eq!(
            common::kind(&program, &format!("zoo:{}", bug.name())),
            None,
            "{}",
            bug.name()
        );
    }
}

#[test]
fn latent_corruption_crashes_a_later_program_not_its_own() {
    let _alone = alone();
    let damage = common::program(&reaching(Bug::LatentCorruption));
    let later = common::program("target alloc_ops\nalloc size=24 align=8\n");
    // An instance of its own: the bug's state outlives a program.
    let zoo = "zoo:latent-corruption@system";
    assert_eq!(common::kind(&later, zoo), None, "the later program alone");
    assert_eq!(
        common::kind(&damage, zoo),
        None,
        "the program that does the damage"
    );
    assert_eq!(
        common::kind(&later, zoo).as_deref(),
        Some("panic"),
        "the program after it"
    );
    assert_eq!(common::kind(&later, zoo), None, "the corruption is spent");
}

/// `slow-leak` keeps 64 bytes every 32,000 calls, whatever the calls are,
/// and the programs' own checks see nothing.
#[test]
fn slow_leak_keeps_a_block_per_thousand_calls() {
    let _alone = alone();
    use zoo::Zoo;
    let base = shadow::allocator::by_name("system").unwrap();
    let zoo: &'static Zoo = Box::leak(Box::new(
        Zoo::new("zoo:slow-leak", "slow-leak", base).unwrap(),
    ));
    let ops = "alloc size=100 align=8\nfree slot=0\n".repeat(50);
    let program = common::program(&format!("target alloc_ops\n{ops}"));
    for _ in 0..1000 {
        shadow::Executor::new(zoo, shadow::Mode::Checked).run(&program);
    }
    // 1,000 programs × 50 × (alloc + free) = 100,000 calls.
    assert_eq!(zoo.kept_blocks(), 3);
}

/// A block the zoo keeps by its size class stays in the class when it is
/// resized in place: shrunk out of the double issue's class, its free went
/// to the base while the class still held it, and the zoo's reset freed it
/// again (a double free, a second group for the one planted bug).
#[test]
fn a_class_block_resized_in_place_stays_in_its_class() {
    let _alone = alone();
    let program = common::program(
        "target alloc_ops\nrealloc-null size=48\nrealloc slot=newest to=-1\n\
         realloc slot=newest to=-1\nresize-in-place slot=newest to=1 extra=0\n",
    );
    for _ in 0..3 {
        assert_eq!(common::kind(&program, "zoo:double-issue"), None);
    }
}

/// `exit-stale-cache` needs an allocation in the exiting thread's last
/// destructors: the same calls made by a thread that exits and a fresh
/// one on its slot find nothing.
#[test]
fn a_stale_cache_is_found_only_by_a_call_in_a_threads_exit() {
    let _alone = alone();
    let zoo = "zoo:exit-stale-cache";
    let without = "target mt_ops\nworker-alloc worker=0 size=100 align=8\nthread-exit worker=0\n\
                   worker-alloc worker=0 size=100 align=8\nalloc size=100 align=8\nalloc size=22000 align=8\n\
                   alloc size=100 align=8\nalloc size=100 align=8\nalloc size=100 align=8\n";
    assert_eq!(common::kind(&common::program(without), zoo), None);
    let late = common::program(&reaching(Bug::ExitStaleCache));
    assert_eq!(common::kind(&late, zoo).as_deref(), Some("overlap"));
}
