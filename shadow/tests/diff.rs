//! `diff_mimalloc` reports disagreements with the reference (C mimalloc) as
//! `diff`, never a difference both APIs allow, and names the side that
//! raised a violation.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};

use common::by_name;
use shadow::allocator::{Allocator, GlobalAllocAdapter, ReallocToZero};
use shadow::{Mode, Program, Target};

/// The violation line a differential run of `text` panics with, if any.
fn diff_line(
    text: &str,
    under_test: &'static dyn Allocator,
    reference: &'static dyn Allocator,
) -> Option<String> {
    run(&common::program(text), under_test, reference)
}

fn run(
    program: &Program,
    under_test: &'static dyn Allocator,
    reference: &'static dyn Allocator,
) -> Option<String> {
    run_counted(program, under_test, reference).err()
}

/// What a differential run of `program` did, or its violation line.
fn run_counted(
    program: &Program,
    under_test: &'static dyn Allocator,
    reference: &'static dyn Allocator,
) -> Result<shadow::Stats, String> {
    common::quiet_panics();
    catch_unwind(AssertUnwindSafe(|| {
        shadow::diff::run(program, under_test, reference, Mode::Checked)
    }))
    .map_err(|e| e.downcast_ref::<String>().cloned().unwrap_or_default())
}

fn kind(line: &Option<String>) -> Option<&str> {
    line.as_deref()
        .map(|l| shadow::violation::kind_of(l).unwrap_or(""))
}

fn mimalloc() -> &'static dyn Allocator {
    shadow::harness::reference().expect("mimalloc in this build")
}

/// An allocator under test that differs from mimalloc only where C lets
/// it: `inner`'s blocks, but null for every size-0 request, realloc to 0
/// frees, and no alignment past 16.
struct Picky {
    inner: &'static dyn Allocator,
    classes: Option<&'static str>,
}

impl Allocator for Picky {
    fn name(&self) -> &str {
        "picky"
    }
    unsafe fn alloc(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        match size {
            0 => std::ptr::null_mut(),
            // SAFETY: the caller's contract: `align` is a power of two within
            // 16, which `inner` serves.
            _ => unsafe { self.inner.alloc(size, align, zeroed) },
        }
    }
    unsafe fn calloc(&self, count: usize, size: usize) -> *mut u8 {
        match count.checked_mul(size) {
            Some(0) => std::ptr::null_mut(),
            // SAFETY: forwarded as called, under the caller's `calloc` contract.
            _ => unsafe { self.inner.calloc(count, size) },
        }
    }
    unsafe fn realloc(&self, p: *mut u8, old: usize, align: usize, new: usize) -> *mut u8 {
        if new == 0 {
            // SAFETY: our blocks are `inner`'s: the caller's contract for `p`
            // holds there; it is freed once.
            unsafe { self.inner.free(p, old, align) };
            return std::ptr::null_mut();
        }
        // SAFETY: our blocks are `inner`'s: the caller's contract for `p` holds there.
        unsafe { self.inner.realloc(p, old, align, new) }
    }
    fn realloc_to_zero(&self) -> ReallocToZero {
        ReallocToZero::Frees
    }
    unsafe fn free(&self, p: *mut u8, size: usize, align: usize) {
        // SAFETY: our blocks are `inner`'s: the caller's contract for `p` holds there.
        unsafe { self.inner.free(p, size, align) }
    }
    unsafe fn usable_size(&self, p: *mut u8, size: usize, align: usize) -> usize {
        // SAFETY: our blocks are `inner`'s: the caller's contract for `p` holds there.
        unsafe { self.inner.usable_size(p, size, align) }
    }
    fn size_classes(&self) -> Option<&'static str> {
        self.classes
    }
    fn max_align(&self) -> usize {
        16
    }
}

fn picky(inner: &'static dyn Allocator, classes: Option<&'static str>) -> &'static dyn Allocator {
    Box::leak(Box::new(Picky { inner, classes }))
}

#[test]
fn a_port_claiming_mimalloc_size_classes_must_match_them() {
    // dlmalloc's usable sizes are not mimalloc's: a port claiming mimalloc's
    // classes with them is caught; the same allocator without the claim is not.
    let port: &'static dyn Allocator = Box::leak(Box::new(
        GlobalAllocAdapter::new("port", dlmalloc::GlobalDlmalloc).with_size_classes("mimalloc"),
    ));
    let plain: &'static dyn Allocator = Box::leak(Box::new(GlobalAllocAdapter::new(
        "plain",
        dlmalloc::GlobalDlmalloc,
    )));
    let text = "target diff_mimalloc\nalloc size=100 align=8\n";
    let line = diff_line(text, port, mimalloc());
    assert_eq!(kind(&line), Some("diff"), "{line:?}");
    assert!(
        line.as_deref()
            .unwrap()
            .ends_with("[allocator port, reference mimalloc]"),
        "a disagreement is the allocator under test's: {line:?}"
    );
    assert_eq!(diff_line(text, plain, mimalloc()), None);
}

#[test]
fn what_c_allows_either_way_is_no_diff() {
    // A skip for an alignment past the allocator under test's API, and null
    // for size 0 where mimalloc returns a block, are no disagreement.
    let under_test = picky(by_name("system").unwrap(), None);
    let text = "target diff_mimalloc\nalloc size=40 align=4096\nalloc size=0 align=8\n\
                calloc count=0 size=8\nalloc size=24 align=8\nrealloc slot=0 to=48\n\
                usable-size slot=newest\nfree slot=0\nalloc size=100 align=64\n";
    assert_eq!(diff_line(text, under_test, mimalloc()), None);
    let (mut ops, mut skipped) = (0, 0);
    for data in common::inputs(21, 150, 2048) {
        let program = Program::decode(Target::DiffMimalloc, &data);
        match run_counted(&program, under_test, mimalloc()) {
            Ok(stats) => (ops, skipped) = (ops + stats.ops, skipped + stats.skipped),
            Err(line) => panic!("false alarm: {line}\nprogram:\n{program}"),
        }
    }
    eprintln!("{ops} ops, {skipped} skipped");
    // A skipped op compares nothing: at least half must have run on both
    // sides (8,038 of 12,028 did: picky skips every alignment past 16).
    assert!(
        ops - skipped >= 6_000 && skipped * 2 <= ops,
        "{skipped} of {ops} ops skipped: too few compared"
    );
}

#[test]
fn legal_differences_keep_the_sides_in_step() {
    // After an alignment only mimalloc runs and a size-0 request only
    // mimalloc serves, both sides still hold the same blocks (none: the
    // free has nothing to act on, on either side), so a usable size after
    // them is still compared.
    let port = picky(
        Box::leak(Box::new(GlobalAllocAdapter::new(
            "port",
            dlmalloc::GlobalDlmalloc,
        ))),
        Some("mimalloc"),
    );
    let text = "target diff_mimalloc\nalloc size=40 align=4096\nalloc size=0 align=8\n\
                free slot=0\nalloc size=100 align=8\n";
    let line = diff_line(text, port, mimalloc());
    assert_eq!(kind(&line), Some("diff"), "{line:?}");
    assert!(line.as_deref().unwrap().contains("op #3 "), "{line:?}");
}

#[test]
fn a_violation_of_the_reference_names_the_reference() {
    // The reference hands out a block twice; the allocator under test is
    // correct. The line, and its key, must blame the reference.
    let double_issue = "target diff_mimalloc\nalloc size=40 align=8\nfree slot=0\n\
                        alloc size=40 align=8\nalloc size=40 align=8\n";
    let reference = by_name("zoo:double-issue").unwrap();
    let line = diff_line(double_issue, by_name("system").unwrap(), reference)
        .expect("the reference's overlap is found");
    assert_eq!(kind(&Some(line.clone())), Some("overlap"), "{line}");
    assert!(
        line.ends_with("[reference allocator zoo:double-issue]"),
        "{line}"
    );
    let key = shadow::violation::key_of(&line).unwrap();
    assert!(
        key.ends_with("[reference allocator zoo:double-issue]"),
        "the key keeps who raised it: {key}"
    );
    // The same bug in the allocator under test is its own.
    let line = diff_line(double_issue, reference, by_name("system").unwrap())
        .expect("the overlap is found");
    assert!(line.ends_with("[allocator zoo:double-issue]"), "{line}");
    assert!(!shadow::violation::key_of(&line)
        .unwrap()
        .contains("reference"));
}

#[test]
fn a_bad_reference_name_is_a_one_line_error() {
    let err = shadow::harness::reference_named(Some("nosuch"))
        .err()
        .unwrap();
    assert!(
        err.starts_with("ALLOCSOAK_REFERENCE: unknown allocator `nosuch`"),
        "{err}"
    );
    assert!(!err.contains('\n'), "{err}");
    assert_eq!(
        shadow::harness::reference_named(Some("system"))
            .unwrap()
            .name(),
        "system"
    );
    assert_eq!(
        shadow::harness::reference_named(None).unwrap().name(),
        shadow::allocator::MIMALLOC
    );
}
