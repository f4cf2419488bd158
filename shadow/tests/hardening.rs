//! `attack`: a heap corruption the allocator promises to stop, made in a
//! forked child. glibc (the machine's own C library) stops each attack at
//! every size tier, and the program's heap is untouched by them.

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

/// Makes every attack at every size on `allocator`, which must stop each.
fn stops_every_attack_at_every_size(allocator: &str) {
    for attack in Attack::ALL {
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
    stops_every_attack_at_every_size("glibc");
}

/// mimalloc's secure build (the registry's libmimalloc-sys, `secure`)
/// stops each attack: `cargo test --features mimalloc-secure`.
#[cfg(feature = "mimalloc-secure")]
#[test]
fn secure_mimalloc_stops_every_attack_at_every_size() {
    stops_every_attack_at_every_size("mimalloc-secure");
}

/// Each of the zoo's caches in front of glibc breaks one of glibc's
/// promises, and only that one: its attack is `hardening`, the others
/// are stopped (a foreign free by the cache's own check), and every
/// attack at a size outside its class (300 B, 1,000 B) is glibc's to stop.
#[test]
fn each_zoo_cache_breaks_one_promise_alone() {
    for (bug, size, breaks) in [
        ("cache-misses-double-free", 100, Attack::DoubleFree),
        ("cache-raw-links", 180, Attack::FreedWrite),
    ] {
        for attack in Attack::ALL {
            for at in [size, 300, 1000] {
                let text = format!("target alloc_ops\nalloc size={at} align=8\nattack kind={attack} size={at}\nfree slot=0\n");
                let expected = (attack == breaks && at == size).then_some("hardening");
                assert_eq!(
                    kind(&program(&text), &format!("zoo:{bug}")).as_deref(),
                    expected,
                    "{bug}: {text}"
                );
            }
        }
    }
}
