//! The `workload` target: every stress program runs clean on the bundled
//! allocators and on soak.toml's declared ones (a single-threaded run
//! included), and a block handed out twice, which only many live blocks
//! reach, is found by the pattern check at a free.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicUsize, Ordering};

use shadow::allocator::Allocator;
use shadow::op::workload::Kind;
use shadow::op::Workload;
use shadow::{Op, Program, Target};

fn program(kind: Kind, threads: usize, slots: usize) -> Program {
    Program {
        target: Target::Workload,
        ops: vec![Op::Workload(Workload {
            kind,
            threads,
            ops: 4000,
            slots,
            min: 8,
            max: 4096,
            seed: 7,
        })],
    }
}

fn every_kind_runs_clean(allocator: &str) {
    for kind in Kind::ALL {
        let p = program(kind, 4, 300);
        let stats = common::run(&p, allocator)
            .unwrap_or_else(|v| panic!("false alarm on {allocator}: {v}\n{p}"));
        assert!(
            stats.calls >= 4000,
            "{kind:?} on {allocator}: {} calls",
            stats.calls
        );
    }
}

#[test]
fn the_bundled_allocators_run_every_workload_clean() {
    let names = shadow::allocator::bundled_names();
    for name in names
        .iter()
        .filter(|n| ["system", "jemalloc", "arena"].contains(n) || n.starts_with("mimalloc"))
    {
        every_kind_runs_clean(name);
    }
}

#[test]
fn the_declared_allocators_run_every_workload_clean() {
    common::declare_examples();
    every_kind_runs_clean("dlmalloc");
    every_kind_runs_clean("rlsf");
}

/// `System`, except that once over 3,000 blocks are live, one small
/// request in a hundred gets the block handed out last again, while its
/// owner still holds it.
struct TwiceOver {
    live: AtomicUsize,
    last: AtomicUsize,
    calls: AtomicUsize,
}

impl Allocator for TwiceOver {
    fn name(&self) -> &str {
        "twice-over"
    }

    unsafe fn alloc(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        let live = self.live.fetch_add(1, Ordering::Relaxed);
        let last = self.last.load(Ordering::Relaxed);
        if live > 3000
            && size <= 8
            && align <= 16
            && last != 0
            && self.calls.fetch_add(1, Ordering::Relaxed) % 100 == 99
        {
            return last as *mut u8;
        }
        let layout = Layout::from_size_align(size.max(8), align).unwrap();
        // SAFETY: `layout` is valid and its size non-zero (`size.max(8)`).
        let p = unsafe {
            match zeroed {
                true => System.alloc_zeroed(layout),
                false => System.alloc(layout),
            }
        };
        if size <= 8 && align <= 16 {
            self.last.store(p as usize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn realloc(&self, p: *mut u8, old: usize, align: usize, new: usize) -> *mut u8 {
        // SAFETY: the caller's contract: `p` came from `System` in `alloc` with
        // this layout; `new.max(8)` is non-zero.
        unsafe {
            System.realloc(
                p,
                Layout::from_size_align(old.max(8), align).unwrap(),
                new.max(8),
            )
        }
    }

    unsafe fn free(&self, p: *mut u8, size: usize, align: usize) {
        self.live.fetch_sub(1, Ordering::Relaxed);
        let _ = self
            .last
            .compare_exchange(p as usize, 0, Ordering::Relaxed, Ordering::Relaxed);
        // SAFETY: the caller's contract: `p` came from `System` in `alloc` with
        // this layout.
        unsafe { System.dealloc(p, Layout::from_size_align(size.max(8), align).unwrap()) }
    }
}

#[test]
fn a_block_handed_out_twice_under_many_live_blocks_is_found_at_a_free() {
    let twice: &'static TwiceOver = Box::leak(Box::new(TwiceOver {
        live: AtomicUsize::new(0),
        last: AtomicUsize::new(0),
        calls: AtomicUsize::new(0),
    }));
    // One thread, so that how many blocks are live at once is the
    // program's alone, not the scheduler's.
    let small = |slots| Program {
        target: Target::Workload,
        ops: vec![Op::Workload(Workload {
            min: 8,
            max: 8,
            ..*workload(&program(Kind::Larson, 1, slots))
        })],
    };
    assert!(
        common::caught(&small(2000), twice).is_ok(),
        "2,000 live blocks stay under the bug"
    );
    let v = common::caught(&small(4000), twice).expect_err("4,000 live blocks reach it");
    assert!(
        v.starts_with("allocsoak violation: contents: op #0 `workload kind=larson"),
        "{v}"
    );
}

fn workload(p: &Program) -> &Workload {
    match &p.ops[0] {
        Op::Workload(w) => w,
        _ => unreachable!(),
    }
}

/// A trace file's bytes, as the recorder writes them.
fn trace_bytes(records: &[(u32, u32, u64, u64, u64)]) -> Vec<u8> {
    let mut w = shadow::op::trace::Writer::new();
    for &(kind, thread, a, b, result) in records {
        w.record(kind, thread, a, b, result);
    }
    w.out
}

/// Two threads: 1 allocates 3,500 blocks of 8 bytes (and a calloc, a
/// memalign, a realloc), 2 frees every one of them.
fn crossing_trace() -> shadow::op::trace::Trace {
    let mut records = Vec::new();
    for i in 0..3500u64 {
        records.push((1, 11, 8, 0, 0x10_0000 + i * 16));
    }
    records.push((3, 11, 4, 16, 0x20_0000));
    records.push((5, 11, 64, 100, 0x30_0000));
    records.push((4, 11, 0x30_0000, 500, 0x40_0000));
    for i in 0..3500u64 {
        records.push((2, 22, 0x10_0000 + i * 16, 0, 0));
    }
    records.push((2, 22, 0x20_0000, 0, 0));
    shadow::op::trace::Trace::parse(&trace_bytes(&records)).unwrap()
}

#[test]
fn a_trace_replays_clean_with_its_frees_crossing_threads() {
    let trace = crossing_trace();
    assert_eq!(trace.threads.len(), 2);
    for name in ["system", "jemalloc", "mimalloc"] {
        let alloc = shadow::allocator::by_name(name).unwrap();
        let _one = common::exclusive(name);
        let stats = shadow::executor::workload::replay(
            &trace,
            "crossing",
            alloc,
            shadow::Mode::Checked,
            None,
        );
        // The memalign'd block, reallocated, is never freed: the replay's
        // end frees it.
        assert_eq!(stats.calls, 3500 * 2 + 3 + 1 + 1, "{name}");
    }
}

/// `TwiceOver` that says it is single-threaded: the replay switches
/// between the recorded threads on one.
struct OneThread(TwiceOver);

impl Allocator for OneThread {
    fn name(&self) -> &str {
        "one-thread"
    }
    fn single_threaded(&self) -> bool {
        true
    }
    unsafe fn alloc(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        // SAFETY: forwarded as called, under the caller's `alloc` contract.
        unsafe { self.0.alloc(size, align, zeroed) }
    }
    unsafe fn realloc(&self, p: *mut u8, old: usize, align: usize, new: usize) -> *mut u8 {
        // SAFETY: our blocks are `self.0`'s: the caller's contract for `p` holds there.
        unsafe { self.0.realloc(p, old, align, new) }
    }
    unsafe fn free(&self, p: *mut u8, size: usize, align: usize) {
        // SAFETY: our blocks are `self.0`'s: the caller's contract for `p` holds there.
        unsafe { self.0.free(p, size, align) }
    }
}

#[test]
fn a_block_handed_out_twice_is_found_in_a_replay_on_one_thread() {
    let twice: &'static OneThread = Box::leak(Box::new(OneThread(TwiceOver {
        live: AtomicUsize::new(0),
        last: AtomicUsize::new(0),
        calls: AtomicUsize::new(0),
    })));
    let trace = crossing_trace();
    common::quiet_panics();
    let replay = || {
        shadow::executor::workload::replay(&trace, "crossing", twice, shadow::Mode::Checked, None)
    };
    let e = std::panic::catch_unwind(replay).expect_err("3,500 live blocks reach it");
    let v = e.downcast_ref::<String>().cloned().unwrap_or_default();
    assert!(
        v.starts_with("allocsoak violation: contents: op #0 `trace crossing`"),
        "{v}"
    );
}

/// `late-remote-leak` keeps memory only for frees made on another thread
/// than the block's, and only past a million of them: single-threaded
/// programs never start it, and a producer/consumer workload does once
/// it has made that many. (Here, beside the other tests that hold
/// jemalloc, the zoo's base: a zoo elsewhere on it resets it.)
#[test]
fn late_remote_leak_keeps_memory_only_past_a_million_remote_frees() {
    use zoo::Zoo;
    let base = shadow::allocator::by_name("jemalloc").unwrap();
    let _one = common::exclusive("jemalloc");
    let zoo: &'static Zoo = Box::leak(Box::new(
        Zoo::new("zoo:late-remote-leak", "late-remote-leak", base).unwrap(),
    ));
    let ops = "alloc size=100 align=8\nfree slot=0\n".repeat(500);
    let local = common::program(&format!("target alloc_ops\n{ops}"));
    for _ in 0..2100 {
        shadow::Executor::new(zoo, shadow::Mode::Checked).run(&local);
    }
    assert_eq!(zoo.kept_blocks(), 0, "1,050,000 frees on their own thread");
    // xmalloc: every block is freed by a consumer, not its producer.
    let remote = common::program(
        "target workload\nworkload kind=xmalloc threads=4 ops=60000 slots=1000 sizes=8..1024 seed=1\n",
    );
    let mut runs = 0;
    while zoo.kept_blocks() == 0 {
        runs += 1;
        assert!(runs <= 200, "nothing kept after {runs} xmalloc runs");
        shadow::harness::run_program(&remote, zoo, shadow::Mode::Checked);
    }
    assert!(
        runs > 2,
        "kept after {runs} runs: before a million remote frees"
    );
}

/// `split-never-merged` grows its region run after run of a workload of
/// mixed sizes on worker threads, and never for the same sizes asked on
/// the thread that made the allocator (an op program's).
#[test]
fn split_never_merged_grows_without_bound_only_on_worker_threads() {
    use zoo::Zoo;
    let base = shadow::allocator::by_name("mimalloc").unwrap();
    let zoo: &'static Zoo = Box::leak(Box::new(
        Zoo::new("zoo:split-never-merged", "split-never-merged", base).unwrap(),
    ));
    let mut ops = String::new();
    for i in 0..400 {
        ops += &format!("alloc size={} align=8\n", 2049 + (i * 37) % 512);
        if i % 3 != 0 {
            ops += "free slot=newest\n";
        }
    }
    let local = common::program(&format!("target alloc_ops\n{ops}"));
    for _ in 0..50 {
        shadow::Executor::new(zoo, shadow::Mode::Checked).run(&local);
    }
    assert_eq!(zoo.splintered_bytes(), 0, "the maker's thread is spared");
    let frag = common::program(
        "target workload\nworkload kind=frag threads=4 ops=50000 slots=500 sizes=512..4096 seed=7\n",
    );
    let mut tops = Vec::new();
    for _ in 0..12 {
        shadow::harness::run_program(&frag, zoo, shadow::Mode::Checked);
        tops.push(zoo.splintered_bytes());
    }
    eprintln!("region top after each run: {tops:?}");
    // The last runs grow it about as much as the ones before them, over a
    // MiB a run: no bound is in sight. (Chunks handed out whole, never
    // split, grow it a few KiB a run, less and less.)
    let grew = |a: usize, b: usize| tops[b] - tops[a];
    assert!(
        grew(8, 11) * 4 > grew(4, 7) * 3 && grew(8, 11) > 3 << 20,
        "the region stopped growing: {tops:?}"
    );
}
