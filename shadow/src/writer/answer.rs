//! Which function chose what a call answered, from the returns the
//! locating child saw stepping it ([`super::returner_of`]).

use super::stepper::Return;

/// Of `returns` (oldest first), the innermost function's `ret` in the
/// chain that handed `value` out: from the last return out of the
/// allocator's code with that value, back to the last of the returning
/// function's own callees (the returns inside its call, at the level of
/// the last of them) that returned the same value, and so on inward. A
/// callee outside the allocator's code that returned it (`memset`,
/// `memcpy`, which return what they were given) is passed over; one
/// called after the value was chosen (a free of the old block) is no
/// reason to stop. The function with no such callee chose the value.
pub(super) fn answered_by(returns: &[Return], value: usize) -> Option<usize> {
    let mut at = returns.iter().rposition(|r| r.out && r.value == value)?;
    loop {
        let caller = returns[at].depth;
        // Its own call: the returns just before its own, deeper than it.
        let start = returns[..at]
            .iter()
            .rposition(|r| r.depth >= caller)
            .map_or(0, |i| i + 1);
        if start == at {
            break;
        }
        let level = returns[at - 1].depth;
        let chosen = (start..at).rev().find(|&i| {
            returns[i].depth == level && returns[i].value == value && returns[i].at != 0
        });
        match chosen {
            Some(i) => at = i,
            None => break,
        }
    }
    Some(returns[at].at).filter(|&pc| pc != 0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ret(at: usize, value: usize, depth: usize, out: bool) -> Return {
        Return {
            at,
            value,
            depth,
            out,
        }
    }

    #[test]
    fn the_answer_is_keyed_where_it_was_chosen() {
        const NULL: usize = 0;
        let p = 0x7f00_1234;
        // calloc: a size helper (returns 8), the core's null, calloc's
        // own return out: the core chose it.
        let calloc = [
            ret(0x10, 8, 100, false),
            ret(0x20, NULL, 100, false),
            ret(0x30, NULL, 200, true),
        ];
        assert_eq!(answered_by(&calloc, NULL), Some(0x20));
        // malloc over a wrapper: wrapper and core pass the core's on; a
        // helper the core called first answered something else.
        let malloc = [
            ret(0x18, 3, 80, false),
            ret(0x20, p, 90, false),
            ret(0x40, p, 100, false),
            ret(0x50, p, 200, true),
        ];
        assert_eq!(answered_by(&malloc, p), Some(0x20));
        // calloc's memset (other code) returns the block it was given,
        // realloc frees the old block after taking a new one: the core's.
        let zeroed = [
            ret(0x20, p, 100, false),
            ret(0, p, 100, false),
            ret(0x60, 1, 100, false),
            ret(0x30, p, 200, true),
        ];
        assert_eq!(answered_by(&zeroed, p), Some(0x20));
        // The same value deep inside a later callee is no callee's answer.
        let deep = [
            ret(0x20, p, 100, false),
            ret(0x80, p, 50, false),
            ret(0x90, 7, 100, false),
            ret(0x30, p, 200, true),
        ];
        assert_eq!(answered_by(&deep, p), Some(0x20));
        // A block the caller made itself, or took from other code
        // (mmap), with no callee of its own answering it: the caller's.
        let own = [ret(0x20, 5, 100, false), ret(0x30, p, 200, true)];
        assert_eq!(answered_by(&own, p), Some(0x30));
        let mapped = [ret(0, p, 100, false), ret(0x30, p, 200, true)];
        assert_eq!(answered_by(&mapped, p), Some(0x30));
        // The latest call out with the value counts (a query came after);
        // a return before the call began (as shallow as its own) is no
        // callee's.
        let queried = [
            ret(0x20, p, 100, false),
            ret(0x30, p, 200, true),
            ret(0x70, 64, 200, true),
        ];
        assert_eq!(answered_by(&queried, p), Some(0x20));
        let before = [
            ret(0x20, p, 100, false),
            ret(0x21, 9, 200, true),
            ret(0x30, p, 200, true),
        ];
        assert_eq!(answered_by(&before, p), Some(0x30));
        assert_eq!(answered_by(&queried, 5), None);
        assert_eq!(answered_by(&[], p), None);
    }
}
