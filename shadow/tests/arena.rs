//! Allocators over a fixed region: a refusal is legitimate only when the
//! region cannot fit the request, and capacity lost by the end of a
//! program is a `capacity-leak`.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard};

use shadow::allocator::{Allocator, Arena, FixedArena, GlobalAllocAdapter};
use zoo::Zoo;

/// Every allocator these tests name is `arena` or planted in it, one
/// region: one test at a time, or a program would see another's blocks.
fn region() -> MutexGuard<'static, ()> {
    static REGION: Mutex<()> = Mutex::new(());
    REGION.lock().unwrap_or_else(|e| e.into_inner())
}

/// Fills the 8 MiB arena past full with 40 KB blocks, frees every other
/// one (4 MB free, in 40 KB holes), then asks for more than any hole holds.
fn fill_fragment_and_overask() -> String {
    "target alloc_ops\n".to_string()
        + &"alloc size=40000 align=8\n".repeat(220)
        + "bulk-free slot=0 count=256 order=alternate\n\
           alloc size=100000 align=8\n\
           alloc size=100000 align=4096\n\
           calloc count=1000 size=1000\n\
           realloc slot=newest to=double\n\
           realloc slot=newest to=3000000\n\
           alloc size=30000 align=8\n"
}

#[test]
fn filling_the_arena_until_it_refuses_is_clean() {
    let _region = region();
    let program = common::program(&fill_fragment_and_overask());
    let stats = common::run(&program, "arena").unwrap_or_else(|v| panic!("false alarm: {v}"));
    // Requests did fail: the arena was full, then fragmented.
    assert!(stats.failed >= 10, "{stats:?}");
    // And the next program has the whole region again.
    assert_eq!(common::kind(&program, "arena"), None, "second run");
}

#[test]
fn refusals_on_worker_threads_and_in_race_sections_are_judged_alike() {
    let _region = region();
    let program = "target mt_ops\n".to_string()
        + &"worker-alloc worker=1 size=1000000 align=8\n".repeat(10)
        + "free slot=0\nfree slot=0\n"
        + &"race-alloc worker=0 size=1000000 align=8\nrace-alloc worker=1 size=1000000 align=8\n"
            .repeat(3)
        + "race-free worker=2 slot=0\nrace-alloc worker=3 size=2000000 align=8\n";
    let program = common::program(&program);
    let stats = common::run(&program, "arena").unwrap_or_else(|v| panic!("false alarm: {v}"));
    // Two of the worker's ten requests found the region full.
    assert!(stats.failed >= 2, "{stats:?}");
}

#[test]
fn a_refusal_the_region_could_serve_is_still_null() {
    let _region = region();
    // The arena has nearly all of its 8 MiB free: refusing 32 bytes is a bug.
    let program = common::program("target alloc_ops\nrealloc-null size=32\n");
    assert_eq!(
        common::kind(&program, "zoo:realloc-null-fails@arena").as_deref(),
        Some("null")
    );
}

#[test]
fn lost_capacity_is_found_at_the_end_of_the_program() {
    let _region = region();
    let program = common::program(
        "target alloc_ops\nalloc size=3000 align=8\nrealloc slot=0 to=100\nfree slot=0\n",
    );
    let line = common::violation(&program, "zoo:capacity-leak").expect("a capacity-leak");
    assert!(
        line.starts_with(
            "allocsoak violation: capacity-leak: op #3 `end of program` (end): free bytes "
        ),
        "{line}"
    );
    // Each program is held to its own start: a second run loses as much
    // again and is reported again, as a replay in a fresh process would be.
    assert_eq!(
        common::kind(&program, "zoo:capacity-leak").as_deref(),
        Some("capacity-leak")
    );
    // Off the bug's path (a shrink to half or more) nothing is lost.
    let benign =
        common::program("target alloc_ops\nalloc size=3000 align=8\nrealloc slot=0 to=1600\n");
    assert_eq!(common::kind(&benign, "zoo:capacity-leak"), None);
}

/// An arena allocator that keeps no count of free bytes: only the largest
/// block it serves is compared. It serves alignments up to its second
/// field, as an embedded heap may serve 8 and no more.
struct Uncounted(&'static dyn Allocator, usize);

impl Allocator for Uncounted {
    fn name(&self) -> &str {
        "uncounted"
    }
    fn max_align(&self) -> usize {
        self.1
    }
    unsafe fn alloc(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        match align > self.1 {
            true => std::ptr::null_mut(),
            // SAFETY: the caller's contract: `align` is a power of two within
            // `self.1`, which the test keeps within `self.0`'s `max_align`.
            false => unsafe { self.0.alloc(size, align, zeroed) },
        }
    }
    unsafe fn realloc(&self, p: *mut u8, old: usize, align: usize, new_size: usize) -> *mut u8 {
        // SAFETY: our blocks are `self.0`'s: the caller's contract for `p` holds there.
        unsafe { self.0.realloc(p, old, align, new_size) }
    }
    unsafe fn free(&self, p: *mut u8, size: usize, align: usize) {
        // SAFETY: our blocks are `self.0`'s: the caller's contract for `p` holds there.
        unsafe { self.0.free(p, size, align) }
    }
    unsafe fn usable_size(&self, p: *mut u8, size: usize, align: usize) -> usize {
        // SAFETY: our blocks are `self.0`'s: the caller's contract for `p` holds there.
        unsafe { self.0.usable_size(p, size, align) }
    }
    fn arena(&self) -> Option<Arena> {
        self.0.arena().map(|a| Arena { free: None, ..a })
    }
}

#[test]
fn without_a_count_a_loss_that_splits_the_region_is_found_by_size_search() {
    // Also by an allocator that serves 8-aligned blocks and no more: the
    // search probes with the alignment it serves.
    for max_align in [shadow::edges::MAX_ALIGN, 8] {
        // A region of its own, so where the lost bytes land does not depend
        // on what earlier tests left in the shared one.
        let base: &'static dyn Allocator = Box::leak(Box::new(FixedArena::new()));
        let zoo = Zoo::new("zoo:capacity-leak@fresh", "capacity-leak", base).unwrap();
        let alloc: &'static dyn Allocator =
            Box::leak(Box::new(Uncounted(Box::leak(Box::new(zoo)), max_align)));
        // The lost bytes land after a 5 MB block: the largest free block left
        // once everything is freed is about 3 MB.
        let program = common::program(
            "target alloc_ops\nalloc size=5000000 align=8\nalloc size=3000 align=8\nrealloc slot=1 to=100\n",
        );
        let line = common::caught(&program, alloc)
            .expect_err(&format!("a capacity-leak (max_align {max_align})"));
        assert!(
            line.starts_with("allocsoak violation: capacity-leak: op #3 `end of program` (end): largest block served "),
            "max_align {max_align}: {line}"
        );
    }
}

/// `arena`'s region through `GlobalAlloc`, as a user's fixed-region
/// allocator would be plugged in.
struct ViaGlobalAlloc(FixedArena);

// SAFETY: `FixedArena` hands out each byte of its region to one live
// block at a time, aligned as asked (what the arena tests check), and
// takes back only what it handed out, as `GlobalAlloc` requires.
unsafe impl GlobalAlloc for ViaGlobalAlloc {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        // SAFETY: a `Layout`'s align is a power of two; the adapter asks no more
        // than its `max_align`, `MAX_ALIGN`, which is the arena's too.
        unsafe { self.0.alloc(l.size(), l.align(), false) }
    }
    unsafe fn dealloc(&self, p: *mut u8, l: Layout) {
        // SAFETY: `GlobalAlloc`'s contract: `p` is a live block of ours, so of
        // the arena, allocated with `l`.
        unsafe { self.0.free(p, l.size(), l.align()) }
    }
    unsafe fn realloc(&self, p: *mut u8, l: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `GlobalAlloc`'s contract: `p` is a live block of ours, so of
        // the arena, allocated with `l`.
        unsafe { self.0.realloc(p, l.size(), l.align(), new_size) }
    }
}

#[test]
fn a_global_alloc_declared_an_arena_is_judged_by_size_search() {
    let region = || ViaGlobalAlloc(FixedArena::new());
    let declared: &'static dyn Allocator = Box::leak(Box::new(
        GlobalAllocAdapter::new("global-arena", region()).with_arena(8 << 20),
    ));
    assert_eq!(
        declared.arena(),
        Some(Arena {
            size: 8 << 20,
            free: None
        })
    );
    let program = common::program(&fill_fragment_and_overask());
    if let Err(v) = common::caught(&program, declared) {
        panic!("false alarm: {v}");
    }
    // Undeclared, the same refusals are `null`.
    let undeclared: &'static dyn Allocator =
        Box::leak(Box::new(GlobalAllocAdapter::new("global-region", region())));
    let line = common::caught(&program, undeclared).expect_err("a null");
    assert!(line.starts_with("allocsoak violation: null: "), "{line}");
}

/// A 4096-byte region that stands for an allocator merging free blocks
/// lazily, as emballoc merges a freed block only with the one after it:
/// freeing a 1-byte block leaves the region split (nothing over 2048 bytes
/// fits) until a later free of a block of 1 KiB or more merges it again.
struct LazyMerge {
    live: AtomicUsize,
    split: AtomicBool,
}

impl Allocator for LazyMerge {
    fn name(&self) -> &str {
        "lazy-merge"
    }
    unsafe fn alloc(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        let largest = if self.split.load(Relaxed) { 2048 } else { 4096 };
        let Ok(layout) = Layout::from_size_align(size.max(1), align) else {
            return std::ptr::null_mut();
        };
        if size > largest || self.live.load(Relaxed) + size > 4096 {
            return std::ptr::null_mut();
        }
        self.live.fetch_add(size, Relaxed);
        // SAFETY: `layout` is valid and its size non-zero (`size.max(1)`).
        unsafe {
            match zeroed {
                true => System.alloc_zeroed(layout),
                false => System.alloc(layout),
            }
        }
    }
    unsafe fn realloc(&self, p: *mut u8, old: usize, align: usize, new_size: usize) -> *mut u8 {
        // SAFETY: `align` is `p`'s, which this allocator served.
        let q = unsafe { self.alloc(new_size, align, false) };
        if !q.is_null() {
            // SAFETY: `p` holds `old` live bytes (the caller's contract) and `q`,
            // a new block apart from it, `new_size`.
            unsafe { std::ptr::copy_nonoverlapping(p, q, old.min(new_size)) };
            // SAFETY: the caller's contract: `p` is live with `old` and `align`; freed once.
            unsafe { self.free(p, old, align) };
        }
        q
    }
    unsafe fn free(&self, p: *mut u8, size: usize, align: usize) {
        // SAFETY: the caller's contract: `p` came from `alloc`, so from `System`
        // with this layout.
        unsafe { System.dealloc(p, Layout::from_size_align(size.max(1), align).unwrap()) };
        self.live.fetch_sub(size, Relaxed);
        match size {
            1 => self.split.store(true, Relaxed),
            1024.. => self.split.store(false, Relaxed),
            _ => {}
        }
    }
    unsafe fn usable_size(&self, _p: *mut u8, size: usize, _align: usize) -> usize {
        size
    }
    fn arena(&self) -> Option<Arena> {
        Some(Arena {
            size: 4096,
            free: None,
        })
    }
}

#[test]
fn the_judge_of_a_refusal_does_not_make_the_room_it_finds() {
    let alloc: &'static dyn Allocator = Box::leak(Box::new(LazyMerge {
        live: AtomicUsize::new(0),
        split: AtomicBool::new(false),
    }));
    // Split, 3000 bytes do not fit: a fair refusal. A probe that served a
    // smaller block and freed it would merge the region and then find 3000
    // bytes served, calling the refusal a `null`.
    let program = common::program(
        "target alloc_ops\nalloc size=1 align=1\nfree slot=0\nalloc size=3000 align=8\n",
    );
    if let Err(line) = common::caught(&program, alloc) {
        panic!("false alarm: {line}");
    }
    // Refusing what it can serve is still a `null`: 1000 bytes fit when split.
    let unfair = Box::leak(Box::new(Refuses1000(alloc)));
    let program = common::program("target alloc_ops\nalloc size=1000 align=8\n");
    let line = common::caught(&program, unfair).expect_err("a null");
    assert!(line.contains("allocsoak violation: null:"), "{line}");
}

/// `LazyMerge` with a planted refusal of exactly 1000 bytes.
struct Refuses1000(&'static dyn Allocator);

impl Allocator for Refuses1000 {
    fn name(&self) -> &str {
        "refuses-1000"
    }
    unsafe fn alloc(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        match size {
            1000 => std::ptr::null_mut(),
            // SAFETY: forwarded as called, under the caller's `alloc` contract.
            _ => unsafe { self.0.alloc(size, align, zeroed) },
        }
    }
    unsafe fn realloc(&self, p: *mut u8, old: usize, align: usize, new_size: usize) -> *mut u8 {
        // SAFETY: our blocks are `self.0`'s: the caller's contract for `p` holds there.
        unsafe { self.0.realloc(p, old, align, new_size) }
    }
    unsafe fn free(&self, p: *mut u8, size: usize, align: usize) {
        // SAFETY: our blocks are `self.0`'s: the caller's contract for `p` holds there.
        unsafe { self.0.free(p, size, align) }
    }
    unsafe fn usable_size(&self, p: *mut u8, size: usize, align: usize) -> usize {
        // SAFETY: our blocks are `self.0`'s: the caller's contract for `p` holds there.
        unsafe { self.0.usable_size(p, size, align) }
    }
    fn arena(&self) -> Option<Arena> {
        self.0.arena()
    }
}
