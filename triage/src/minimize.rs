//! Minimizing a failing program as a program, as syzkaller does: drop
//! ops, then simplify the ops left one field at a time
//! ([`shadow::Op::simpler`]), keeping each change that still fails the
//! same way.

use shadow::Program;

use crate::ddmin::ddmin;

/// Rounds of dropping and simplifying; a round that changes nothing ends
/// the search sooner.
const ROUNDS: usize = 4;

/// What minimizing did.
pub struct Minimized {
    /// The smallest program found that still fails.
    pub program: Program,
    /// How many candidate programs `fails` was asked about.
    pub tests: usize,
}

/// A program no larger than `program` that still `fails` (as `program`
/// does): the ops after `failing_op` (the op its violation names, when
/// known) go, then rounds of ddmin over the ops and of simplifying each op
/// to the first simpler form that still fails. A `fails` that has run out
/// of time answers false, which ends the search with what it has.
pub fn minimize(
    program: &Program,
    failing_op: Option<usize>,
    mut fails: impl FnMut(&Program) -> bool,
) -> Minimized {
    let mut tests = 0;
    let mut fails = |p: &Program| {
        tests += 1;
        fails(p)
    };
    let mut best = program.clone();
    if let Some(i) = failing_op.filter(|&i| i + 1 < best.ops.len()) {
        let cut = Program {
            target: best.target,
            ops: best.ops[..=i].to_vec(),
        };
        if fails(&cut) {
            best = cut;
        }
    }
    for _ in 0..ROUNDS {
        let before = best.clone();
        best.ops = ddmin(&best.ops, |ops| {
            fails(&Program {
                target: best.target,
                ops: ops.to_vec(),
            })
        });
        for i in 0..best.ops.len() {
            // The first simpler form that fails, again from there.
            while let Some(op) = best.ops[i].simpler().into_iter().find(|op| {
                let mut candidate = best.clone();
                candidate.ops[i] = *op;
                fails(&candidate)
            }) {
                best.ops[i] = op;
            }
        }
        if best == before {
            break;
        }
    }
    Minimized {
        program: best,
        tests,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn program(text: &str) -> Program {
        format!("target alloc_ops\n{text}").parse().unwrap()
    }

    /// Fails while an alloc of at least 1000 bytes is followed by a realloc
    /// of the newest block: the minimum is those two ops, at the class edge
    /// 1024 and alignment 1.
    #[test]
    fn drops_ops_and_shrinks_sizes_to_the_edge() {
        let start = program(
            "alloc size=24 align=8\nalloc size=5000 align=64 zeroed\nfree slot=0\n\
             usable-size slot=newest\nrealloc slot=newest to=double\nalloc size=7 align=1\n",
        );
        let fails = |p: &Program| {
            let big = p
                .ops
                .iter()
                .position(|op| matches!(op, shadow::Op::Alloc { size, .. } if *size >= 1000));
            big.is_some_and(|b| {
                p.ops[b + 1..]
                    .iter()
                    .any(|op| matches!(op, shadow::Op::Realloc { slot, .. } if *slot == shadow::op::NEWEST))
            })
        };
        let m = minimize(&start, Some(4), fails);
        assert_eq!(
            m.program.to_string(),
            "target alloc_ops\nalloc size=1024 align=1\nrealloc slot=newest to=double\n"
        );
        assert!(m.tests < 100, "{} tests", m.tests);
    }

    /// A program that only fails whole stays whole.
    #[test]
    fn a_program_that_needs_every_op_is_kept() {
        let start = program("alloc size=1 align=1\nfree slot=newest\n");
        let m = minimize(&start, None, |p| *p == start);
        assert!(m.program == start);
    }
}
