//! `diff_mimalloc` reports disagreements with C mimalloc as `diff`.

mod common;

use std::panic::{catch_unwind, AssertUnwindSafe};

use shadow::allocator::{Allocator, GlobalAllocAdapter};
use shadow::Mode;

fn diff_kind(text: &str, under_test: &'static dyn Allocator) -> Option<String> {
    let program = common::program(text);
    let reference = shadow::harness::reference().expect("mimalloc in this build");
    common::quiet_panics();
    catch_unwind(AssertUnwindSafe(|| {
        shadow::diff::run(&program, under_test, reference, Mode::Checked)
    }))
    .err()
    .map(|e| e.downcast_ref::<String>().cloned().unwrap_or_default())
    .map(|line| shadow::violation::kind_of(&line).unwrap_or("").to_string())
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
    assert_eq!(diff_kind(text, port).as_deref(), Some("diff"));
    assert_eq!(diff_kind(text, plain), None);
}
