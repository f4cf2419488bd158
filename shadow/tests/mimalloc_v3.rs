//! The `mimalloc-v3` build links mimalloc's v3 line: it shows a v3 bug the
//! bundled v2 does not have (corpus/findings/):
//! `cargo test --no-default-features --features jemalloc,mimalloc-v3`.
#![cfg(feature = "mimalloc-v3")]

mod common;

#[test]
fn mimalloc_v3_visit_misses_a_heap_block_aligned_above_64_kib() {
    let program = |align: usize| {
        common::program(&format!(
            "target heap_api\nheap-new\nheap-alloc heap=0 size=1 align={align}\nheap-visit heap=0\n"
        ))
    };
    assert_eq!(
        common::kind(&program(131072), "mimalloc-v3").as_deref(),
        Some("heap-visit")
    );
    assert_eq!(common::kind(&program(65536), "mimalloc-v3"), None);
}
