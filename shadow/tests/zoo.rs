//! Each planted bug, reached by a short hand-written program, is reported
//! with its kind; the same program runs clean on the correct allocator.
//! (`just zoo` proves the fuzzer finds them on its own.)

mod common;

use shadow::allocator::zoo::Bug;

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
        Bug::HeapDeleteDrops => "target heap_api\nheap-new\nheap-alloc heap=0 size=64 align=8\nheap-alloc heap=0 size=128 align=8\nheap-alloc heap=0 size=256 align=8\nheap-delete heap=0\n",
        Bug::LeakOnShrink => "target alloc_ops\nalloc size=4096 align=8\nrealloc slot=0 to=100\n",
        Bug::MisalignedReallocShort => "target alloc_ops\nalloc size=8 align=16\nrealloc slot=0 to=64\n",
        Bug::PanicClass => "target alloc_ops\nalloc size=2500 align=8\n",
        Bug::WildWrite => "target alloc_ops\nalloc size=3700 align=8\n",
        Bug::TinyReallocShort => "target alloc_ops\nalloc size=12 align=8\nrealloc slot=0 to=double\n",
        Bug::LatentCorruption => "target alloc_ops\nalloc size=3100 align=8\nfree slot=0\n",
        Bug::HugeTruncate => "target alloc_ops\nalloc size=4294967312 align=8\n",
        Bug::FullPageReissue => "target alloc_ops\nbulk-alloc size=56 align=8 count=600\n",
        Bug::RezallocDirty => "target alloc_ops\nalloc size=600 align=8\nrealloc-zeroed slot=0 to=2000\n",
        Bug::ExpandOverclaims => "target alloc_ops\nalloc size=600 align=8\nresize-in-place slot=0 to=1000 extra=0\n",
        Bug::SizedFreeMisclass => "target alloc_ops\nalloc size=1500 align=8\nfree-sized slot=0\nalloc size=1700 align=8\n",
        Bug::PlainReallocMisaligns => "target alloc_ops\nalloc size=100 align=64\nrealloc-plain slot=0 to=200\n",
        Bug::ReallocNullFails => "target alloc_ops\nrealloc-null size=32\n",
        Bug::FreeNullPanics => "target alloc_ops\nfree-null\n",
        Bug::GoodSizeLies => "target alloc_ops\nalloc size=120 align=8\n",
        Bug::PurgeDropsLive => "target alloc_ops\nalloc size=20000 align=8\npurge delay=now force\n",
        Bug::CapacityLeak => "target alloc_ops\nalloc size=3000 align=8\nrealloc slot=0 to=100\n",
        Bug::SlowLeak => "target alloc_ops\nalloc size=64 align=8\nfree slot=0\n",
        Bug::RacyFreeList => "target mt_ops\nworker-alloc worker=0 size=400 align=8\nalloc size=400 align=8\nrace-free worker=1 slot=0\nrace-alloc worker=0 size=400 align=8\nrace-alloc worker=2 size=400 align=8\n",
    };
    text.to_string()
}

/// What the shadow model alone reports for the bug, in-process. `None`:
/// the bug corrupts the real heap before the model can look (ASan finds it
/// first, in `just zoo`), it is a leak (LeakSanitizer's and the RSS
/// monitor's), it kills the process (a SIGSEGV: `soak/tests/past_first_bug.rs`),
/// it hides behind another bug (tests/tolerance.rs) or it
/// needs a race (tests/race.rs) or a program after it (below), so the
/// program is not run here.
fn in_process_kind(bug: Bug) -> Option<&'static str> {
    match bug {
        Bug::UsableOversize
        | Bug::XthreadWrongFree
        | Bug::HeapDeleteDrops
        | Bug::LeakOnShrink
        | Bug::SlowLeak
        | Bug::MisalignedReallocShort
        | Bug::RacyFreeList
        | Bug::LatentCorruption
        | Bug::WildWrite => None,
        _ => Some(bug.expected_kinds()[0]),
    }
}

#[test]
fn every_planted_bug_is_reported_with_its_kind() {
    let mut missed = Vec::new();
    for bug in Bug::ALL {
        let program = common::program(&reaching(bug));
        assert_eq!(
            common::kind(&program, "system"),
            None,
            "{} program on system",
            bug.name()
        );
        let Some(expected) = in_process_kind(bug) else {
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
    use shadow::allocator::zoo::Zoo;
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
