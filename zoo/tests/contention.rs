//! The two bugs only contention reaches, driven straight through the
//! zoo with plain threads: one call at a time they never show, and
//! threads inside the allocator at once find them within a few hundred
//! rounds. The zoo's base here is a quarantine over `system` that never
//! hands a freed block out again, as ASan's does in the fuzz builds, so
//! a block the base has freed stays visible as freed.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Barrier, Mutex, MutexGuard};
use std::thread;

use shadow::allocator::Allocator;
use zoo::Zoo;

const REMOTE: usize = 1500;
const EXIT: usize = 5000;

/// `system`, but a freed block is kept (never reused) until [`release`]:
/// which blocks the base has freed, and how often, stays known.
///
/// [`release`]: Quarantine::release
struct Quarantine {
    system: &'static dyn Allocator,
    /// Every block the base handed out -> how often it was freed since.
    blocks: Mutex<HashMap<usize, (usize, usize)>>,
}

impl Quarantine {
    fn leaked() -> &'static Quarantine {
        Box::leak(Box::new(Quarantine {
            system: shadow::allocator::by_name("system").unwrap(),
            blocks: Mutex::new(HashMap::new()),
        }))
    }

    fn blocks(&self) -> MutexGuard<'_, HashMap<usize, (usize, usize)>> {
        self.blocks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How often the base freed `p` (0: live in the base).
    fn frees(&self, p: usize) -> usize {
        self.blocks().get(&p).map_or(0, |&(_, frees)| frees)
    }

    /// Blocks the base freed more than once.
    fn double_frees(&self) -> usize {
        self.blocks().values().filter(|&&(_, f)| f > 1).count()
    }

    /// Really frees every freed block; live ones stay.
    fn release(&self) {
        self.blocks().retain(|&p, &mut (size, frees)| {
            if frees > 0 {
                // SAFETY: `p` came from `system.alloc(size, 16)` and, kept
                // here since the base's free, is freed to system once.
                unsafe { self.system.free(p as *mut u8, size, 16) };
            }
            frees == 0
        });
    }
}

impl Allocator for Quarantine {
    fn name(&self) -> &str {
        "quarantine"
    }

    unsafe fn alloc(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        // SAFETY: `align` is a power of two within max_align (this fn's contract), and so is
        // `align.max(16)`.
        let p = unsafe { self.system.alloc(size, align.max(16), zeroed) };
        if !p.is_null() {
            self.blocks().insert(p as usize, (size, 0));
        }
        p
    }

    unsafe fn realloc(&self, p: *mut u8, old: usize, align: usize, new_size: usize) -> *mut u8 {
        // SAFETY: `align` is the one `p` was allocated with (this fn's contract), a valid one.
        let q = unsafe { self.alloc(new_size, align, false) };
        if !q.is_null() {
            // SAFETY: `p` is a live block of `old` bytes (this fn's contract), `q` a new one of
            // `new_size`.
            unsafe { std::ptr::copy_nonoverlapping(p, q, old.min(new_size)) };
            // SAFETY: `p` is a live block with `old` and `align` (this fn's contract), freed
            // once, here.
            unsafe { self.free(p, old, align) };
        }
        q
    }

    unsafe fn free(&self, p: *mut u8, _size: usize, _align: usize) {
        if let Some((_, frees)) = self.blocks().get_mut(&(p as usize)) {
            *frees += 1;
        }
    }
}

/// Holds the machine for one test at a time: a race needs its threads
/// running at once, and another test's threads on the other core keep
/// them from it (and a test run one call at a time is not one then).
fn alone() -> MutexGuard<'static, ()> {
    static ONE: Mutex<()> = Mutex::new(());
    ONE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A zoo with `bug` planted over a fresh quarantine.
fn zoo(bug: &str) -> (&'static Zoo, &'static Quarantine) {
    let base = Quarantine::leaked();
    let zoo = Zoo::new(&format!("zoo:{bug}"), bug, base).unwrap();
    (Box::leak(Box::new(zoo)), base)
}

/// `count` blocks of `size` on the calling thread, as addresses.
fn alloc_many(zoo: &Zoo, size: usize, count: usize) -> Vec<usize> {
    (0..count)
        // SAFETY: align 8 is within every allocator's max_align; each block
        // is freed once, with this size and alignment.
        .map(|_| unsafe { zoo.alloc(size, 8, false) } as usize)
        .inspect(|&p| assert_ne!(p, 0))
        .collect()
}

fn free_all(zoo: &Zoo, size: usize, blocks: &[usize]) {
    for &p in blocks {
        // SAFETY: `p` came from `zoo.alloc(size, 8)` and is freed once.
        unsafe { zoo.free(p as *mut u8, size, 8) };
    }
}

/// How many of `freed` the calling thread gets back within
/// `freed.len() + 4` allocations of `size` (the zoo's `remote_reuse`);
/// the probes are freed again.
fn come_back(zoo: &Zoo, size: usize, freed: &[usize]) -> usize {
    let probes = alloc_many(zoo, size, freed.len() + 4);
    let back = freed.iter().filter(|p| probes.contains(p)).count();
    free_all(zoo, size, &probes);
    back
}

/// `blocks` freed by `freers` threads at once (dealt round robin), or one
/// thread after the other.
fn remote_free(zoo: &'static Zoo, blocks: &[usize], freers: usize, at_once: bool) {
    let start = Barrier::new(if at_once { freers } else { 1 });
    thread::scope(|s| {
        for f in 0..freers {
            let mine: Vec<usize> = blocks.iter().skip(f).step_by(freers).copied().collect();
            let start = &start;
            let freer = s.spawn(move || {
                start.wait();
                free_all(zoo, REMOTE, &mine);
            });
            if !at_once {
                freer.join().unwrap();
            }
        }
    });
}

#[test]
fn remote_frees_one_at_a_time_all_come_back_to_the_owner() {
    let _alone = alone();
    let (zoo, base) = zoo("lost-remote-free");
    assert_eq!(zoo.remote_reuse(REMOTE, 8), Some(4));
    assert_eq!(zoo.remote_reuse(REMOTE, 32), None);
    for round in 0..50 {
        let owned = alloc_many(zoo, REMOTE, 24);
        remote_free(zoo, &owned, 3, false);
        assert_eq!(come_back(zoo, REMOTE, &owned), owned.len(), "round {round}");
        // Handed back, then freed by their owner: to the base, once.
        assert!(owned.iter().all(|&p| base.frees(p) == 1), "round {round}");
        zoo.reset();
        base.release();
    }
}

#[test]
fn remote_frees_at_once_into_one_owner_lose_blocks() {
    let _alone = alone();
    let (zoo, base) = zoo("lost-remote-free");
    let (mut lost, mut rounds_lost) = (0, 0);
    let rounds = 300;
    for _ in 0..rounds {
        let owned = alloc_many(zoo, REMOTE, 24);
        remote_free(zoo, &owned, 3, true);
        let back = come_back(zoo, REMOTE, &owned);
        // A lost block is neither handed back nor freed, even at reset.
        zoo.reset();
        assert_eq!(
            owned.iter().filter(|&&p| base.frees(p) == 0).count(),
            owned.len() - back
        );
        lost += owned.len() - back;
        rounds_lost += usize::from(back < owned.len());
        base.release();
    }
    eprintln!("lost-remote-free: {lost} blocks lost in {rounds_lost} of {rounds} rounds");
    assert!(
        lost > 0,
        "{rounds} rounds of 3 threads at once lost nothing"
    );
}

/// A thread allocates `count` blocks of the exit class, frees the first
/// half (into its cache) and exits after `start`; returns its live half.
fn exiting(zoo: &'static Zoo, count: usize, start: &Barrier) -> Vec<usize> {
    let blocks = alloc_many(zoo, EXIT, count);
    free_all(zoo, EXIT, &blocks[..count / 2]);
    start.wait();
    blocks[count / 2..].to_vec()
}

/// Blocks of the exit class allocated one at a time after `start`, until
/// `exited` (or a few thousand): with three threads on two cores, the
/// exiting one may run last, and the takers are still taking when its
/// cache drains.
fn taking(zoo: &Zoo, start: &Barrier, exited: &AtomicBool) -> Vec<usize> {
    start.wait();
    let mut got = Vec::new();
    while !exited.load(Ordering::Acquire) && got.len() < 4096 {
        got.extend(alloc_many(zoo, EXIT, 1));
    }
    got
}

#[test]
fn a_thread_exiting_alone_drains_its_cache_to_the_base() {
    let _alone = alone();
    let (zoo, base) = zoo("exit-reclaim-race");
    assert_eq!(zoo.remote_reuse(EXIT, 8), Some(4));
    for round in 0..50 {
        let (cached, live) = thread::scope(|s| {
            s.spawn(|| {
                let blocks = alloc_many(zoo, EXIT, 16);
                free_all(zoo, EXIT, &blocks[..8]);
                (blocks[..8].to_vec(), blocks[8..].to_vec())
            })
            .join()
            .unwrap()
        });
        // Its exit freed its cache, each block once; then no one gets one.
        assert!(cached.iter().all(|&p| base.frees(p) == 1), "round {round}");
        let after = alloc_many(zoo, EXIT, 16);
        assert!(after.iter().all(|&p| base.frees(p) == 0), "round {round}");
        free_all(zoo, EXIT, &live);
        free_all(zoo, EXIT, &after);
        zoo.reset();
        assert_eq!(base.double_frees(), 0, "round {round}");
        base.release();
    }
}

#[test]
fn a_thread_exiting_while_others_allocate_hands_out_a_freed_block() {
    let _alone = alone();
    let (zoo, base) = zoo("exit-reclaim-race");
    let (mut stale, mut double, mut rounds_hit) = (0, 0, 0);
    let rounds = 300;
    for _ in 0..rounds {
        let start = Barrier::new(3);
        let exited = AtomicBool::new(false);
        let (live, got) = thread::scope(|s| {
            let exit = s.spawn(|| exiting(zoo, 16, &start));
            let takers: Vec<_> = (0..2)
                .map(|_| s.spawn(|| taking(zoo, &start, &exited)))
                .collect();
            let live = exit.join().unwrap();
            exited.store(true, Ordering::Release);
            let got: Vec<usize> = takers.into_iter().flat_map(|t| t.join().unwrap()).collect();
            (live, got)
        });
        // Handed out live, yet freed by the base (the drain freed it), or
        // handed out to both takers.
        let freed = got.iter().filter(|&&p| base.frees(p) > 0).count();
        let twice = got.len() - {
            let mut distinct = got.clone();
            distinct.sort_unstable();
            distinct.dedup();
            distinct.len()
        };
        (stale, double) = (stale + freed, double + twice);
        rounds_hit += usize::from(freed + twice > 0);
        let mut all = got;
        all.extend(live);
        all.sort_unstable();
        all.dedup();
        free_all(zoo, EXIT, &all);
        zoo.reset();
        base.release();
    }
    eprintln!(
        "exit-reclaim-race: {stale} freed blocks handed out, {double} handed out twice, in {rounds_hit} of {rounds} rounds"
    );
    assert!(
        stale + double > 0,
        "{rounds} exits while two threads allocated handed out nothing freed"
    );
}

/// A block of either class handed out again comes back zeroed when asked,
/// keeps its contents through a realloc within, into and out of the
/// class, and reports its request as its usable size.
#[test]
fn reused_class_blocks_are_zeroed_and_realloc_keeps_contents() {
    let _alone = alone();
    for (bug, size) in [("lost-remote-free", REMOTE), ("exit-reclaim-race", EXIT)] {
        let (zoo, _) = zoo(bug);
        let owned = alloc_many(zoo, size, 4);
        for &p in &owned {
            // SAFETY: `p` is a live block of `size` bytes.
            unsafe { std::ptr::write_bytes(p as *mut u8, 0xa5, size) };
        }
        // Back to the owner, or (the exit class) into this thread's cache.
        match bug {
            "lost-remote-free" => remote_free(zoo, &owned, 1, false),
            _ => free_all(zoo, size, &owned),
        }
        // SAFETY: each block is live until freed below, with the size and
        // alignment it was last allocated or reallocated with.
        unsafe {
            let p = zoo.alloc(size, 8, true);
            assert!(owned.contains(&(p as usize)), "{bug}: handed back");
            assert!((0..size).all(|i| *p.add(i) == 0), "{bug}: zeroed");
            assert_eq!(zoo.usable_size(p, size, 8), size, "{bug}");
            std::ptr::write_bytes(p, 0x3c, size);
            let grown = zoo.realloc(p, size, 8, size + 100);
            let small = zoo.realloc(grown, size + 100, 8, 100);
            assert!((0..100).all(|i| *small.add(i) == 0x3c), "{bug}: prefix");
            let back = zoo.realloc(small, 100, 8, size);
            assert!((0..100).all(|i| *back.add(i) == 0x3c), "{bug}: prefix");
            zoo.free(back, size, 8);
        }
        zoo.reset();
    }
}
