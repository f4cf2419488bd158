//! Race sections put several threads inside the allocator at once: a bug
//! that only a race triggers (the zoo's racy free list) is found by them
//! and never by the same ops run one at a time; correct allocators run
//! race sections clean.

mod common;

use std::collections::HashMap;
use std::fmt::Write;
use std::sync::{Mutex, MutexGuard};

use shadow::allocator::Allocator;

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

/// A block handed out twice inside a section is an `overlap` seen when
/// the second worker takes it, before either writes or frees it; left to
/// the checks after the section it was a broken pattern or a double free
/// (a second group for one bug). The zoo's double issue hands the cached
/// 40-byte block to every request of its class.
#[test]
fn a_block_handed_out_twice_in_a_section_is_an_overlap() {
    let _alone = alone();
    let program = common::program(
        "target mt_ops\nalloc size=40 align=8\nfree slot=0\n\
         race-churn size=40 align=8 count=4\n",
    );
    for _ in 0..50 {
        let found = common::kind(&program, "zoo:double-issue");
        assert_eq!(found.as_deref(), Some("overlap"));
    }
}

/// Race sections run serially while held: the serial replay.
struct Serially;

impl Serially {
    fn on() -> Serially {
        shadow::executor::serial_races(true);
        Serially
    }
}

impl Drop for Serially {
    fn drop(&mut self) {
        shadow::executor::serial_races(false);
    }
}

/// `program` runs clean on `allocator` 200 times with its race sections
/// serial, and shows one of `expected` within 2,000 runs at once.
fn found_by_a_race_alone(program: &str, allocator: &'static dyn Allocator, expected: &[&str]) {
    let program = common::program(program);
    let kind = |line: String| {
        shadow::violation::kind_of(&line)
            .unwrap_or_default()
            .to_string()
    };
    {
        let _serial = Serially::on();
        for _ in 0..200 {
            let found = common::caught(&program, allocator).err().map(kind);
            assert_eq!(found, None, "serially");
        }
    }
    let found = (0..2000).find_map(|i| {
        common::caught(&program, allocator)
            .err()
            .map(|l| (i, kind(l)))
    });
    let (tries, found) = found.expect("2000 race sections never showed it");
    eprintln!(
        "{}: the race showed after {} runs",
        allocator.name(),
        tries + 1
    );
    assert!(expected.contains(&found.as_str()), "{found}");
}

/// `system`, but a freed block is kept aside (nothing written into it)
/// and handed out again by the next request of its layout: a block the
/// zoo freed while it also handed it out comes back to a second owner,
/// an overlap the shadow sees, where glibc's own reuse would crash on the
/// free-list links the harness overwrote.
struct Recycler {
    freed: Mutex<HashMap<(usize, usize), Vec<usize>>>,
}

impl Allocator for Recycler {
    fn name(&self) -> &str {
        "recycler"
    }

    unsafe fn alloc(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        let kept = self
            .freed
            .lock()
            .unwrap()
            .get_mut(&(size, align))
            .and_then(Vec::pop);
        match kept {
            Some(p) => {
                if zeroed {
                    // SAFETY: `p` is a block of `size` bytes `free` kept aside, never
                    // given back to `system`: its bytes are still writable.
                    unsafe { std::ptr::write_bytes(p as *mut u8, 0, size) };
                }
                p as *mut u8
            }
            // SAFETY: forwarded as called, under the caller's `alloc` contract.
            None => unsafe { system().alloc(size, align, zeroed) },
        }
    }

    unsafe fn realloc(&self, p: *mut u8, old: usize, align: usize, new: usize) -> *mut u8 {
        // SAFETY: the caller's contract: `p` is a live block of ours with `old`, `align`.
        unsafe { common::moved(self, p, old, align, new) }
    }

    unsafe fn free(&self, p: *mut u8, size: usize, align: usize) {
        self.freed
            .lock()
            .unwrap()
            .entry((size, align))
            .or_default()
            .push(p as usize);
    }
}

fn system() -> &'static dyn Allocator {
    common::by_name("system").unwrap()
}

/// `zoo:<bug>` over `base`, made once per test.
fn zoo_over(bug: &str, base: &'static dyn Allocator) -> &'static dyn Allocator {
    let name = format!("zoo:{bug}@{}", base.name());
    Box::leak(Box::new(zoo::Zoo::new(&name, bug, base).unwrap()))
}

/// Three threads free one owner's blocks at once: a remote-free list
/// whose push is a load and a store loses one, and the owner never gets
/// it back.
#[test]
fn a_lost_remote_free_is_found_by_a_race_and_never_one_op_at_a_time() {
    let _alone = alone();
    found_by_a_race_alone(
        "target mt_ops\nrace-remote-free freer=1 owner=0 size=1500 align=8 count=32\n",
        zoo_over("lost-remote-free", system()),
        &["remote-free-lost"],
    );
}

/// A thread exits while the others allocate its size: a cache drained by
/// the exit and reclaimed by the others at once hands a block out twice.
#[test]
fn an_exit_reclaim_race_is_found_by_a_race_and_never_one_op_at_a_time() {
    let _alone = alone();
    found_by_a_race_alone(
        "target mt_ops\nrace-exit worker=0 size=5000 align=8 count=32\nrace-churn size=5000 align=8 count=8\n",
        zoo_over("exit-reclaim-race", Box::leak(Box::new(Recycler { freed: Mutex::default() }))),
        zoo::Bug::ExitReclaimRace.expected_kinds(),
    );
}

/// Another thread holds the allocator's lock as one forks: the child's
/// own request of the size waits on it for ever, and is killed.
#[test]
fn a_lock_held_at_a_fork_is_found_by_a_race_and_never_one_op_at_a_time() {
    let _alone = alone();
    found_by_a_race_alone(
        "target mt_ops\nrace-fork worker=0 size=18000 align=8\n",
        zoo_over("fork-held-lock", common::by_name("system").unwrap()),
        zoo::Bug::ForkHeldLock.expected_kinds(),
    );
}

/// The contention ops run clean on the correct allocators, at once and
/// serially: remote frees of every size tier come back, threads exit
/// while others free their blocks, every thread churns one class, a
/// child forked while the others churn makes its own calls.
#[test]
fn contention_ops_run_clean_on_correct_allocators() {
    let _alone = alone();
    let mut text = String::from("target mt_ops\n");
    for (i, size) in [8, 24, 100, 1500, 5000, 20000, 70000, 300000]
        .iter()
        .enumerate()
    {
        writeln!(
            text,
            "race-remote-free freer={i} owner={} size={size} align=8 count=32",
            i + 1
        )
        .unwrap();
        writeln!(text, "race-exit worker={i} size={size} align=16 count=16").unwrap();
        writeln!(text, "race-churn size={size} align=8 count=16").unwrap();
        writeln!(text, "race-fork worker={i} size={size} align=8").unwrap();
    }
    let program = common::program(&text);
    for allocator in ["system", "mimalloc", "jemalloc"] {
        for serial in [false, true] {
            let _serial = serial.then(Serially::on);
            for _ in 0..50 {
                common::run(&program, allocator)
                    .unwrap_or_else(|line| panic!("{allocator}: {line}"));
            }
        }
    }
}

/// Calls in a thread's last destructors, after the allocator's own
/// thread exit (mimalloc's thread-done, jemalloc's tsd cleanup): blocks
/// made there live on and are freed by other threads, and blocks made
/// elsewhere are freed there, of every size tier.
#[test]
fn calls_in_a_threads_last_destructors_run_clean_on_correct_allocators() {
    let _alone = alone();
    common::declare_examples();
    let mut text = String::from("target mt_ops\n");
    for (i, size) in [8, 24, 100, 1500, 5000, 20000, 70000, 300000]
        .iter()
        .enumerate()
    {
        writeln!(text, "worker-alloc worker={i} size={size} align=8").unwrap();
        writeln!(text, "alloc size={size} align=16").unwrap();
        writeln!(text, "exit-alloc worker={i} size={size} align=8").unwrap();
        writeln!(text, "exit-free worker={} slot=newest", i + 1).unwrap();
        writeln!(text, "exit-alloc worker={i} size={size} align=64").unwrap();
        writeln!(text, "exit-free worker={} slot=0", i + 2).unwrap();
        writeln!(text, "worker-free worker={} slot=newest", i + 3).unwrap();
    }
    let program = common::program(&text);
    for allocator in [
        "system", "glibc", "mimalloc", "jemalloc", "dlmalloc", "rlsf",
    ] {
        for _ in 0..20 {
            let stats = common::run(&program, allocator)
                .unwrap_or_else(|line| panic!("{allocator}: {line}"));
            assert_eq!(stats.skipped, 0, "{allocator}: every call made");
        }
    }
}

#[test]
fn race_sections_run_clean_on_correct_allocators() {
    let _alone = alone();
    let raced = common::program(&program(true));
    for allocator in ["system", "mimalloc", "jemalloc"] {
        // Clean only counts where the threads met inside the allocator: run
        // until 100 sections did. How often they meet depends on how fast
        // the allocator's calls are (mimalloc's: 29 to 47 % of sections on
        // one 2-core machine, 87 to 95 % on another).
        let (mut sections, mut races) = (0, 0);
        while races < 100 && sections < 2000 {
            let stats = common::run(&raced, allocator).unwrap_or_else(|line| panic!("{line}"));
            (sections, races) = (sections + stats.race_sections, races + stats.races);
        }
        eprintln!("{allocator}: {races} of {sections} sections raced");
        assert!(
            races >= 100,
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

/// A thread of a contention op allocates at most 1 MiB: asked for 32
/// blocks of 256 KiB it makes the calls 4 make, where 32 blocks of 16 KiB
/// make more than 4; asked for none it makes none, and asked for one of 4
/// MiB (past the budget) it makes that one.
#[test]
fn a_contention_ops_threads_allocate_within_a_budget() {
    let _alone = alone();
    let calls = |op: &str, size: usize, count: usize| {
        let text = format!("target mt_ops\n{op} size={size} align=8 count={count}\n");
        common::run(&common::program(&text), "system")
            .unwrap_or_else(|line| panic!("{text}{line}"))
            .calls
    };
    for op in ["race-exit worker=0", "race-churn"] {
        let calls = |size, count| calls(op, size, count);
        assert_eq!(calls(256 << 10, 32), calls(256 << 10, 4), "{op}, 256 KiB");
        assert!(calls(16 << 10, 32) > calls(16 << 10, 4), "{op}, 16 KiB");
        assert!(calls(16 << 10, 1) > calls(16 << 10, 0), "{op}, none");
    }
    // A churn's blocks are 64 KiB at most: an exit's owner takes the large one.
    let exit = |count| calls("race-exit worker=0", 4 << 20, count);
    assert!(exit(1) > exit(0), "race-exit, one block of 4 MiB");
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

// SAFETY: every call is forwarded unchanged to `System`, whose contract
// is the one `GlobalAlloc` states; `here` only checks the calling thread.
unsafe impl std::alloc::GlobalAlloc for OneThread {
    unsafe fn alloc(&self, layout: std::alloc::Layout) -> *mut u8 {
        self.here();
        // SAFETY: forwarded unchanged, under the caller's `GlobalAlloc` contract.
        unsafe { std::alloc::System.alloc(layout) }
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: std::alloc::Layout) {
        self.here();
        // SAFETY: the caller's contract: `p` came from `alloc` above, so from
        // `System`, with `layout`.
        unsafe { std::alloc::System.dealloc(p, layout) }
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

/// What fuzzing's `mt_ops` programs do, over random inputs: at least a
/// quarter of their allocator calls are inside race sections, and on two
/// cores or more two workers are inside the allocator at once. 150 inputs
/// make some 450,000 calls, half of them raced (400 took a minute of
/// `just test` for the same ratio).
#[test]
fn a_quarter_of_mt_ops_calls_race() {
    let _alone = alone();
    for allocator in ["mimalloc", "system"] {
        let (mut calls, mut race_calls, mut most) = (0, 0, 0);
        for input in common::inputs(27, 150, 4096) {
            let program = shadow::Program::decode(shadow::Target::MtOps, &input);
            let stats = common::run(&program, allocator).unwrap_or_else(|line| {
                eprintln!("{program}\n{line}");
                panic!("{line}")
            });
            calls += stats.calls;
            race_calls += stats.race_calls;
            most = most.max(stats.most_inside);
        }
        eprintln!(
            "{allocator}: {race_calls} of {calls} calls raced, at most {most} inside at once"
        );
        assert!(
            race_calls * 4 >= calls,
            "{allocator}: {race_calls} of {calls} calls raced"
        );
        // Raced for real: on two cores or more, workers were inside the
        // allocator together (3 or 4 at most, over these inputs).
        if std::thread::available_parallelism().map_or(1, |n| n.get()) >= 2 {
            assert!(
                most >= INSIDE_TOGETHER,
                "{allocator}: at most {most} inside the allocator at once, never two"
            );
        }
    }
}

/// Workers inside the allocator at once that a race must reach.
const INSIDE_TOGETHER: usize = 2;

/// A heap's blocks reallocated from other threads (where the heap API has
/// a plain realloc any thread may make) and freed through other threads'
/// caches, then the heap visited, allocated in and ended: clean.
#[test]
fn a_heaps_blocks_reallocated_from_other_threads_run_clean() {
    let _alone = alone();
    let mut text = String::from("target heap_api\nheap-new\nheap-new\n");
    for i in 0..24 {
        writeln!(
            text,
            "heap-alloc heap={} size={} align=8",
            i % 2,
            24 + i * 40
        )
        .unwrap();
    }
    for i in 0..12 {
        let to = ["double", "half", "+1", "4000"][i % 4];
        writeln!(text, "race-realloc worker={} slot={i} to={to}", 1 + i % 3).unwrap();
        writeln!(text, "race-free worker={} slot={}", 1 + i % 3, 12 + i).unwrap();
    }
    text.push_str("heap-visit heap=0\nheap-visit heap=1\nheap-alloc heap=0 size=400 align=8\nheap-delete heap=1\nheap-destroy heap=0\n");
    let raced = common::program(&text);
    for allocator in ["system", "mimalloc", "jemalloc"] {
        for _ in 0..100 {
            common::run(&raced, allocator).unwrap_or_else(|line| panic!("{allocator}: {line}"));
        }
    }
}

/// A block mimalloc counts in use that holds a live block is that block's.
/// Blocks are larger than asked (a size class, an aligned request served
/// from a larger block), so once a page is carved again from another
/// start, a new one can cover a remotely freed block's address past its
/// own end: a soak on mimalloc filed that as
/// `remote-free-lost` (a block of 135,160 bytes, a live 64-KiB block at
/// its start, the freed one's address 128 KiB in). `p + 8` stands for the
/// covered address here.
#[test]
fn a_used_block_that_holds_a_live_one_is_not_a_lost_remote_free() {
    let mimalloc = shadow::allocator::by_name("mimalloc").unwrap();
    let (size, align) = (64 << 10, 64 << 10);
    // SAFETY: a request mimalloc serves; the block is freed below with the same layout.
    let p = unsafe { mimalloc.alloc(size, align, false) } as usize;
    assert_ne!(p, 0);
    let covered = p + 8;
    assert_eq!(
        mimalloc.in_use_after_collect(&[covered], &[]),
        Some(vec![covered]),
        "an address inside a block in use is counted in use"
    );
    assert_eq!(
        mimalloc.in_use_after_collect(&[covered], &[p]),
        Some(vec![]),
        "the block in use is the live block's"
    );
    // SAFETY: `p` came from `alloc(size, align)` above and is freed once.
    unsafe { mimalloc.free(p as *mut u8, size, align) };
}
