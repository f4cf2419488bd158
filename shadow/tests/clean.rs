//! Correct allocators never trip the oracle: random programs of every
//! target on every bundled allocator run clean.

mod common;

use shadow::Target;

fn all_targets(allocator: &str, seed: u64) {
    for target in [
        Target::AllocOps,
        Target::HeapApi,
        Target::MtOps,
        Target::DiffMimalloc,
    ] {
        common::assert_clean(target, allocator, seed, 150);
    }
}

#[test]
fn system_runs_clean() {
    all_targets("system", 1);
}

#[test]
fn mimalloc_runs_clean() {
    // The flavor this build links: mimalloc, mimalloc-secure or mimalloc-debug.
    let bundled = shadow::allocator::bundled_names();
    all_targets(
        bundled
            .iter()
            .find(|n| n.starts_with("mimalloc"))
            .expect("a mimalloc flavor"),
        2,
    );
}

#[test]
fn jemalloc_runs_clean() {
    all_targets("jemalloc", 3);
}

#[test]
fn dlmalloc_runs_clean() {
    all_targets("dlmalloc", 4);
}

#[test]
fn rlsf_runs_clean() {
    all_targets("rlsf", 5);
}
