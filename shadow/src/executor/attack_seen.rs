//! What the fuzzer learns of an `attack`: its child's coverage is lost
//! with it, so the parent counts the attack itself, one counter for each
//! kind, size class and way the child ended, in libFuzzer's extra
//! counters (the `__libfuzzer_extra_counters` section, which it reads as
//! coverage beside the allocator's). An input that makes an attack at a
//! size or with an end not seen before is kept, and mutating it reaches
//! the neighbouring kinds and classes. `zoo:cache-guards-header` (one
//! kind in one class let by): not found in 300 s without them, nor with
//! them alone; with them and the decoder's attack sizes kept in range,
//! in 88 and 110 s (docs/benchmarks/2026-12-07-stop-86.md). Other engines
//! and builds leave the section unread.

use std::sync::atomic::{AtomicU8, Ordering};

use super::child::ForkEnd;
use crate::allocator::attack_sizes::{class_of, CLASSES};
use crate::allocator::Attack;

/// Ways the child ended ([`end`]): clean, refused, hung, a signal, and
/// its exit code (mod 8: the attack's own codes are 10 to 13).
const ENDS: usize = 4 + 8;
const COUNTERS: usize = Attack::ALL.len() * CLASSES * ENDS;

/// libFuzzer reads this section's bytes as counters after each input and
/// clears them before the next (its `__start_`/`__stop_` symbols bound
/// it); atomics, so no `static mut` is needed to count.
#[used]
#[cfg_attr(not(miri), link_section = "__libfuzzer_extra_counters")]
static SEEN: [AtomicU8; COUNTERS] = [const { AtomicU8::new(0) }; COUNTERS];

/// Counts an attack of `attack` at `size` that ended as `end` (the
/// child's own exit `code`s are [`super::attack`]'s).
pub(super) fn count(attack: Attack, size: usize, end: ForkEnd) {
    SEEN[index(attack, size, end)].fetch_add(1, Ordering::Relaxed);
}

fn index(attack: Attack, size: usize, end: ForkEnd) -> usize {
    let kind = Attack::ALL.iter().position(|&a| a == attack).unwrap_or(0);
    (kind * CLASSES + class_of(size)) * ENDS + self::end(end)
}

fn end(end: ForkEnd) -> usize {
    match end {
        ForkEnd::Clean => 0,
        ForkEnd::Refused => 1,
        ForkEnd::Hung => 2,
        ForkEnd::Failed {
            code: Some(code), ..
        } => 4 + code.unsigned_abs() as usize % 8,
        // A signal.
        ForkEnd::Failed { .. } => 3,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::allocator::attack_sizes as sizes;

    #[test]
    fn each_kind_class_and_end_has_a_counter_of_its_own() {
        let ends = [
            ForkEnd::Clean,
            ForkEnd::Refused,
            ForkEnd::Hung,
            ForkEnd::Failed {
                code: None,
                signal: Some(6),
            },
        ];
        let mut seen = std::collections::HashSet::new();
        for attack in Attack::ALL {
            for size in [16, 20, 24, 28, 32, 2000, 2048, 1 << 20] {
                for end in ends {
                    assert!(
                        seen.insert(index(attack, size, end)),
                        "{attack} {size} {end:?}"
                    );
                }
            }
        }
        assert!(seen.iter().all(|&i| i < COUNTERS));
        assert_eq!(class_of(16), 0);
        assert_eq!(class_of(1 << 20), CLASSES - 1);
        assert_eq!(class_of(usize::MAX), CLASSES - 1);
        // The sizes the decoder picks are each in the class it picked,
        // and within what an attack is made at.
        for c in 0..CLASSES {
            assert_eq!(class_of(sizes::first_of(c)), c, "class {c}");
            assert!(sizes::first_of(c) <= 1 << 20, "class {c}");
        }
    }
}
