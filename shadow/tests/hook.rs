//! The allocator's hook (`hook-free`): mimalloc calls it from inside its
//! own allocation path, where it frees and allocates (reentrant calls),
//! and a correct allocator runs such programs clean.

mod common;

/// Two blocks handed to the hook, then `requests` large blocks, each
/// freed at once: each takes mimalloc's slow path, which calls the
/// deferred free every 100th time.
fn hooked_program(requests: usize) -> String {
    let mut text = "target alloc_ops\nalloc size=5000 align=8\nalloc size=300 align=16\nhook-free slot=0\nhook-free slot=0\n".to_string();
    for _ in 0..requests {
        text += "alloc size=200000 align=8\nfree slot=0\n";
    }
    text
}

#[test]
fn mimalloc_calls_the_hook_from_inside_its_calls_and_runs_clean() {
    let stats = common::run(&common::program(&hooked_program(250)), "mimalloc").expect("clean");
    // Once to free the given blocks and allocate its own, once to free those.
    assert!(stats.hook_calls >= 2, "hook calls: {}", stats.hook_calls);
}

#[test]
fn an_allocator_without_a_hook_skips_the_op() {
    let stats = common::run(&common::program(&hooked_program(10)), "system").expect("clean");
    assert_eq!((stats.hook_calls, stats.skipped), (0, 2));
}

#[test]
fn an_allocator_over_a_fixed_region_skips_the_op() {
    // The harness's size search after a refusal would run the hook, which
    // frees the given block: room made in the middle of the search, a
    // false `null` (the zoo gate's capacity-leak case, once).
    let text = "target alloc_ops\nalloc size=4194303 align=4\nhook-free slot=newest\nrealloc-null size=4194303\n";
    let stats = common::run(&common::program(text), "zoo:capacity-leak").expect("clean");
    assert_eq!(stats.skipped, 1);
}
