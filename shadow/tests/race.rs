//! Race sections put several threads inside the allocator at once: a bug
//! that only a race triggers (the zoo's racy free list) is found by them
//! and never by the same ops run one at a time; correct allocators run
//! race sections clean.

mod common;

use std::fmt::Write;
use std::sync::{Mutex, MutexGuard};

/// Holds the machine for one test of this file at a time: a race needs its
/// threads running at once, and another test's race section on the other
/// core can keep them from it for all 2,000 tries.
fn alone() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Worker 0 owns 24 blocks of the racy class; then, in one section (or
/// one op at a time), workers 1 and 2 free them while worker 0 allocates.
fn program(race: bool) -> String {
    let mut text = String::from("target mt_ops\n");
    for _ in 0..24 {
        writeln!(text, "worker-alloc worker=0 size=400 align=8").unwrap();
    }
    let (free, alloc) = if race {
        ("race-free", "race-alloc")
    } else {
        ("worker-free", "worker-alloc")
    };
    for i in 0..12 {
        writeln!(text, "{free} worker={} slot={i}", 1 + i % 2).unwrap();
        writeln!(text, "{alloc} worker=0 size=400 align=8").unwrap();
    }
    text.push_str("alloc size=400 align=8\n");
    text
}

#[test]
fn a_racy_free_list_is_found_by_a_race_and_never_one_op_at_a_time() {
    let _alone = alone();
    let serial = common::program(&program(false));
    for _ in 0..300 {
        assert_eq!(common::kind(&serial, "zoo:racy-free-list"), None);
    }
    let raced = common::program(&program(true));
    let expected = ["overlap", "contents", "realloc-prefix"];
    let found = (0..2000).find_map(|i| common::kind(&raced, "zoo:racy-free-list").map(|k| (i, k)));
    let (tries, found) = found.expect("2000 race sections never lost an update");
    eprintln!("the race showed after {} sections", tries + 1);
    assert!(expected.contains(&found.as_str()), "{found}");
}

#[test]
fn race_sections_run_clean_on_correct_allocators() {
    let _alone = alone();
    let raced = common::program(&program(true));
    for allocator in ["system", "mimalloc", "jemalloc"] {
        let (mut sections, mut races) = (0, 0);
        for _ in 0..200 {
            let stats = common::run(&raced, allocator).unwrap_or_else(|line| panic!("{line}"));
            (sections, races) = (sections + stats.race_sections, races + stats.races);
        }
        // Clean only counts where the threads met inside the allocator:
        // at least half the sections (87 to 95 % did on 2 cores).
        eprintln!("{allocator}: {races} of {sections} sections raced");
        assert!(sections >= 200, "{allocator}: {sections} sections");
        assert!(
            races * 2 >= sections,
            "{allocator}: {races} of {sections} sections raced"
        );
    }
}

#[test]
fn one_remote_free_op_races_the_owner() {
    let _alone = alone();
    let op = common::program(
        "target mt_ops\nrace-remote-free freer=1 owner=0 size=400 align=8 count=12\nalloc size=24 align=8\n",
    );
    let found = (0..2000).find_map(|_| common::kind(&op, "zoo:racy-free-list"));
    assert!(
        found.is_some(),
        "2000 remote-free races never lost an update"
    );
    for allocator in ["system", "mimalloc", "jemalloc"] {
        for _ in 0..200 {
            assert_eq!(common::kind(&op, allocator), None, "{allocator}");
        }
    }
}

/// A heap's blocks freed by other threads while the heap lives on, then
/// visited, allocated in again and destroyed: clean on the allocators'
/// own heaps (mimalloc's, jemalloc's arenas) and on emulated ones.
#[test]
fn a_heaps_blocks_freed_in_race_sections_run_clean() {
    let _alone = alone();
    let mut text = String::from("target heap_api\nheap-new\n");
    for _ in 0..24 {
        writeln!(text, "heap-alloc heap=0 size=400 align=8").unwrap();
    }
    for i in 0..12 {
        writeln!(text, "race-free worker={} slot={i}", 1 + i % 2).unwrap();
        writeln!(text, "race-alloc worker=0 size=400 align=8").unwrap();
    }
    text.push_str("heap-visit heap=0\nheap-alloc heap=0 size=400 align=8\nheap-destroy heap=0\n");
    let raced = common::program(&text);
    for allocator in ["system", "mimalloc", "jemalloc"] {
        let (mut sections, mut races) = (0, 0);
        for _ in 0..100 {
            let stats = common::run(&raced, allocator).unwrap_or_else(|line| {
                eprintln!("{line}");
                panic!("{line}")
            });
            (sections, races) = (sections + stats.race_sections, races + stats.races);
        }
        eprintln!("{allocator}: {races} of {sections} sections raced");
        assert!(sections >= 100, "{allocator}: {sections} sections");
        assert!(races > 0, "{allocator}: no section raced");
    }
}

/// A heap documented as single-threaded, as embedded heaps are: `Sync`
/// only to be a `#[global_allocator]` on one core. It panics when a second
/// thread calls it.
#[derive(Default)]
struct OneThread {
    owner: std::sync::OnceLock<std::thread::ThreadId>,
}

impl OneThread {
    fn here(&self) {
        let me = std::thread::current().id();
        assert_eq!(
            *self.owner.get_or_init(|| me),
            me,
            "called from a second thread"
        );
    }
}

unsafe impl std::alloc::GlobalAlloc for OneThread {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        self.here();
        std::alloc::System.alloc(layout)
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: std::alloc::Layout) {
        self.here();
        std::alloc::System.dealloc(p, layout)
    }
}

#[test]
fn a_single_threaded_allocator_is_never_called_from_another_thread() {
    let _alone = alone();
    use shadow::allocator::{Allocator, GlobalAllocAdapter};
    let mixed = common::program(&format!(
        "{}worker-alloc worker=1 size=64 align=8\nthread-exit worker=1 restart=true\n",
        program(true)
    ));
    let declared: &'static dyn Allocator = Box::leak(Box::new(
        GlobalAllocAdapter::new("one-thread", OneThread::default()).with_single_thread(),
    ));
    let stats = common::caught(&mixed, declared).expect("no op ran on another thread");
    assert!(
        stats.skipped >= 50,
        "the thread ops were not skipped: {stats:?}"
    );
    // Undeclared, the same heap is called from the workers, and panics.
    let undeclared: &'static dyn Allocator = Box::leak(Box::new(GlobalAllocAdapter::new(
        "one-thread-undeclared",
        OneThread::default(),
    )));
    let line = common::caught(&mixed, undeclared).unwrap_err();
    assert!(line.contains("panic"), "{line}");
}
