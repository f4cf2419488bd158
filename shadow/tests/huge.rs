//! A program's first huge block (over 64 MiB) is kept across its later
//! ops, and its second huge request reallocates it with its alignment:
//! huge grows and shrinks, and aligned reallocs of over-aligned huge
//! blocks, are made and checked. A normal block reallocated to a huge
//! size becomes the kept block, and the program's end shrinks half the
//! kept blocks to a normal size: reallocs across 64 MiB both ways.

mod common;

use shadow::allocator::Allocator;

/// A huge block aligned to 64 KiB, ordinary ops beside it, then a second
/// huge request that grows (or shrinks) it.
fn kept_then(second: usize) -> String {
    format!(
        "target alloc_ops\nalloc size=100000000 align=65536\nalloc size=5000 align=8\n\
         realloc slot=0 to=double\nalloc size={second} align=8\nfree slot=0\n"
    )
}

/// One test, so that one thread runs the programs on each allocator, as a
/// fuzz process does: jemalloc's count of bytes in use (`kept-bytes`)
/// moved by 20 KiB under another test thread's programs on it.
#[test]
fn huge_blocks_kept_reallocated_and_crossing_64_mib_run_clean_on_correct_allocators() {
    let kept = [300_000_000, 70_000_000].map(kept_then);
    let crossing = [(0, true), (1, true), (2, false), (3, false)].map(|(p, g)| crossing(p, g));
    for text in kept.iter().chain(&crossing) {
        let program = common::program(text);
        for allocator in ["system", "mimalloc", "jemalloc"] {
            for _ in 0..3 {
                common::run(&program, allocator)
                    .unwrap_or_else(|line| panic!("{allocator}, {text}: {line}"));
            }
        }
    }
}

/// A huge realloc that moves an over-aligned block to an address only
/// page-aligned is found on the realloc of the kept block; a huge request
/// alone, or two not aligned past a page, run clean.
#[test]
fn a_huge_realloc_that_drops_the_alignment_is_found() {
    let base = common::by_name("system").unwrap();
    let name = "zoo:huge-realloc-misaligns@system";
    let zoo: &'static dyn Allocator = Box::leak(Box::new(
        zoo::Zoo::new(name, "huge-realloc-misaligns", base).unwrap(),
    ));
    let _one = common::exclusive(name);
    let alone = "target alloc_ops\nalloc size=100000000 align=65536\nalloc size=5000 align=8\n";
    common::caught(&common::program(alone), zoo).expect("one huge block is fine");
    let page_aligned = kept_then(300_000_000).replace("align=65536", "align=4096");
    common::caught(&common::program(&page_aligned), zoo).expect("page-aligned is fine");
    for second in [300_000_000, 70_000_000] {
        let line = common::caught_as(&common::program(&kept_then(second)), zoo, "alignment");
        assert!(line.contains("realloc"), "{line}");
    }
}

/// `system`, but a huge realloc moves the block without copying it.
struct ForgetsHuge;

impl Allocator for ForgetsHuge {
    fn name(&self) -> &str {
        "forgets-huge"
    }

    unsafe fn alloc(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        // SAFETY: forwarded as called, under the caller's `alloc` contract.
        unsafe {
            common::by_name("system")
                .unwrap()
                .alloc(size, align, zeroed)
        }
    }

    unsafe fn realloc(&self, p: *mut u8, old: usize, align: usize, new: usize) -> *mut u8 {
        // SAFETY: `align` is `p`'s, which this allocator served.
        let q = unsafe { self.alloc(new, align, false) };
        if !q.is_null() {
            let kept = match new > shadow::edges::MAX_BLOCK {
                true => 0,
                false => old.min(new),
            };
            // SAFETY: `kept` is at most `old`, the bytes `p` holds (the caller's
            // contract), and `new`, those of `q`, a new block apart from `p`.
            unsafe { std::ptr::copy_nonoverlapping(p, q, kept) };
            // SAFETY: the caller's contract: `p` is live with `old` and `align`; freed once.
            unsafe { self.free(p, old, align) };
        }
        q
    }

    unsafe fn free(&self, p: *mut u8, size: usize, align: usize) {
        // SAFETY: our blocks are `system`'s: the caller's contract for `p` holds there.
        unsafe { common::by_name("system").unwrap().free(p, size, align) }
    }
}

/// The pages of the kept block that its realloc keeps must hold what
/// they held.
#[test]
fn a_huge_realloc_that_loses_the_contents_is_found() {
    let forgets: &'static dyn Allocator = &ForgetsHuge;
    let line = common::caught_as(
        &common::program(&kept_then(300_000_000)),
        forgets,
        "realloc-prefix",
    );
    assert!(line.contains("realloc"), "{line}");
}

/// `pad` small blocks (each draws a seed, so the kept block's seed, which
/// picks whether the program's end shrinks it, differs by `pad`), then a
/// huge block: grown into from a normal block (`grown`), or allocated.
fn crossing(pad: usize, grown: bool) -> String {
    let mut text = "target alloc_ops\n".to_string() + &"alloc size=48 align=8\n".repeat(pad);
    text += match grown {
        true => "alloc size=5000 align=64\nrealloc slot=newest to=100000000\n",
        false => "alloc size=100000000 align=64\n",
    };
    text
}

/// A realloc across 64 MiB that copies a page short is found both ways:
/// a normal block grown to a huge size, and a huge block shrunk at the
/// program's end (in the programs whose seed picks the shrink).
#[test]
fn a_realloc_across_64_mib_that_copies_short_is_found_both_ways() {
    let base = common::by_name("system").unwrap();
    let name = "zoo:huge-cross-short@system";
    let zoo: &'static dyn Allocator = Box::leak(Box::new(
        zoo::Zoo::new(name, "huge-cross-short", base).unwrap(),
    ));
    let _one = common::exclusive(name);
    let line = common::caught_as(&common::program(&crossing(0, true)), zoo, "realloc-prefix");
    assert!(line.contains("100000000"), "{line}");
    let shrunk: Vec<usize> = (0..6)
        .filter(|&pad| common::caught(&common::program(&crossing(pad, false)), zoo).is_err())
        .collect();
    assert!(
        !shrunk.is_empty() && shrunk.len() < 6,
        "programs that shrank the kept block short: {shrunk:?} of 0..6"
    );
}
