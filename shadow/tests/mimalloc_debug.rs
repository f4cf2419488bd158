//! mimalloc's debug build catches an overflow inside a mimalloc block that
//! neither the plain build nor ASan sees: `cargo test --features mimalloc-debug`.
#![cfg(feature = "mimalloc-debug")]

mod common;

#[test]
fn debug_mimalloc_reports_an_overflow_past_the_usable_size() {
    // The planted bug reports 8 bytes more usable than the block has; the
    // slack written on one new block in four goes into mimalloc's
    // padding, and free checks it. (A usable-size probe after that write
    // trips mimalloc's own assertion in `mi_usable_size`, an abort.)
    let program = common::program(
        &("target alloc_ops\n".to_string() + &"alloc size=100 align=8\n".repeat(8)),
    );
    assert_eq!(
        common::kind(&program, "zoo:usable-oversize@mimalloc-debug").as_deref(),
        Some("allocator-error")
    );
    assert_eq!(common::kind(&program, "mimalloc-debug"), None);
}
