//! Correct allocators never trip the oracle: random programs of every
//! target on every bundled allocator, and soak.toml's declared `dlmalloc` and
//! `rlsf`, run clean.

mod common;

use shadow::Target;

/// The op programs' targets: the `workload` target's long runs have
/// their own test (`workload.rs`).
const PROGRAMS: [Target; 4] = [
    Target::AllocOps,
    Target::HeapApi,
    Target::MtOps,
    Target::DiffMimalloc,
];

fn targets(allocator: &str, seed: u64, targets: &[Target]) {
    for &target in targets {
        common::assert_clean(target, allocator, seed, 150);
    }
}

#[test]
fn system_runs_clean() {
    targets("system", 1, &PROGRAMS);
}

#[test]
fn glibc_runs_clean() {
    targets("glibc", 7, &Target::ALL);
}

#[test]
fn mimalloc_runs_clean() {
    // The flavor this build links: mimalloc or one of MIMALLOC_FLAVORS.
    let bundled = shadow::allocator::bundled_names();
    let name = bundled
        .iter()
        .find(|n| n.starts_with("mimalloc"))
        .expect("a mimalloc flavor");
    match *name {
        // mimalloc 2.3.2's debug build crashes on heap_api and mt_ops
        // programs, and 3.3.2 mishandles heap blocks aligned above 64 KiB:
        // upstream bugs allocsoak found, kept in corpus/findings/.
        "mimalloc-debug" => targets(name, 2, &[Target::AllocOps, Target::DiffMimalloc]),
        "mimalloc-v3" => targets(
            name,
            2,
            &[Target::AllocOps, Target::MtOps, Target::DiffMimalloc],
        ),
        _ => targets(name, 2, &PROGRAMS),
    }
}

#[test]
fn jemalloc_runs_clean() {
    targets("jemalloc", 3, &PROGRAMS);
}

#[test]
fn dlmalloc_runs_clean() {
    common::declare_examples();
    targets("dlmalloc", 4, &PROGRAMS);
}

#[test]
fn rlsf_runs_clean() {
    common::declare_examples();
    targets("rlsf", 5, &PROGRAMS);
}

#[test]
fn arena_runs_clean() {
    // A fixed 8 MiB region that programs fill: its refusals are legitimate
    // (no `null`) and it loses no capacity (no `capacity-leak`).
    targets("arena", 6, &PROGRAMS);
}
