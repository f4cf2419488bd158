//! mimalloc's debug build catches an overflow inside a mimalloc block that
//! neither the plain build nor ASan sees: `cargo test --features mimalloc-debug`.
#![cfg(feature = "mimalloc-debug")]

mod common;

#[test]
fn debug_mimalloc_reports_an_overflow_past_the_usable_size() {
    // The planted bug reports 8 bytes more usable than the block has; the
    // probe writes them, into mimalloc's padding, and free checks it.
    let program = common::program(
        "target alloc_ops\nalloc size=100 align=8\nusable-size slot=0\nfree slot=0\n",
    );
    assert_eq!(
        common::kind(&program, "zoo:usable-oversize@mimalloc-debug").as_deref(),
        Some("allocator-error")
    );
    assert_eq!(common::kind(&program, "mimalloc-debug"), None);
}
