//! `attack`: a heap corruption the allocator promises to stop, made in a
//! forked child. glibc (the machine's own C library), mimalloc's secure
//! build and jemalloc stop each attack they promise at every size tier,
//! and the program's heap is untouched by them.

mod common;

use common::{kind, program};
use shadow::allocator::Attack;

/// Sizes across glibc's bins: fast, tcache, small, large, mmapped.
const SIZES: [usize; 14] = [
    16,
    24,
    48,
    100,
    128,
    200,
    1000,
    1032,
    1040,
    4096,
    10_000,
    65_536,
    200_000,
    1 << 20,
];

/// Makes each of `promised`, which `allocator` must promise (an attack
/// it does not is skipped, and would pass unmade), at every size: it
/// must stop each.
fn stops_every_attack_at_every_size(allocator: &str, promised: &[Attack]) {
    let stops = common::by_name(allocator).expect("allocator").stops();
    for &attack in promised {
        assert!(
            stops.contains(&attack),
            "{allocator} does not promise {attack}"
        );
        for size in SIZES {
            // Each attack forks once a program: one program each, with a
            // live block of the size on either side.
            let text = format!(
                "target alloc_ops\nalloc size={size} align=8\nattack kind={attack} size={size}\nalloc size={size} align=8\nfree slot=0\n"
            );
            assert_eq!(
                kind(&program(&text), allocator),
                None,
                "{allocator}: {text}"
            );
        }
    }
}

#[test]
fn glibc_stops_every_attack_at_every_size() {
    use Attack::*;
    stops_every_attack_at_every_size(
        "glibc",
        &[DoubleFree, ForeignFree, FreedWrite, InteriorFree],
    );
}

/// jemalloc keeps nothing in or beside its blocks: a write into a freed
/// block or past a live one is harmless to it.
#[test]
fn jemalloc_stops_a_freed_write_and_an_overflow_at_every_size() {
    use Attack::*;
    stops_every_attack_at_every_size("jemalloc", &[FreedWrite, Overflow, HeaderWrite]);
}

/// mimalloc's secure build (the registry's libmimalloc-sys, `secure`)
/// stops each attack: `cargo test --features mimalloc-secure`.
#[cfg(feature = "mimalloc-secure")]
#[test]
fn secure_mimalloc_stops_every_attack_at_every_size() {
    stops_every_attack_at_every_size("mimalloc-secure", &Attack::ALL);
}

/// Each of the zoo's caches breaks one of its base's promises (glibc's,
/// jemalloc's), and only that one: its attack is `hardening`, the others
/// are stopped (a foreign free by the cache's own check), and every
/// attack at a size outside its class is the base's to stop. The header
/// cache's one bug (it trusts its header) is met by both attacks that
/// reach the header: an overflow from the block before, and a write of
/// the header itself.
#[test]
fn each_zoo_cache_breaks_one_promise_alone() {
    // cache-trusts-header's base is the jemalloc the test above holds to
    // its count of bytes in use.
    let _jemalloc = common::exclusive("jemalloc");
    use Attack::*;
    for (bug, size, breaks, outside) in [
        ("cache-misses-double-free", 100, &[DoubleFree][..], 300),
        ("cache-raw-links", 180, &[FreedWrite], 1000),
        ("cache-trusts-span", 300, &[InteriorFree], 100),
        (
            "cache-trusts-header",
            2000,
            &[Overflow, HeaderWrite],
            20_000,
        ),
        ("cache-guards-header", 2000, &[HeaderWrite], 20_000),
    ] {
        for attack in Attack::ALL {
            for at in [size, outside] {
                let text = format!("target alloc_ops\nalloc size={at} align=8\nattack kind={attack} size={at}\nfree slot=0\n");
                let expected = (breaks.contains(&attack) && at == size).then_some("hardening");
                assert_eq!(
                    kind(&program(&text), &format!("zoo:{bug}")).as_deref(),
                    expected,
                    "{bug}: {text}"
                );
            }
        }
    }
}
