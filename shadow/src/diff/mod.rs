//! `diff_mimalloc`: one program in lockstep on the allocator under test and
//! on a reference allocator ([`crate::harness::reference`], C mimalloc by
//! default), comparing what only a comparison can show.
//!
//! Each side runs the full shadow model, so each already holds its own
//! blocks to every promise: contents, zeroing, alignment, no overlap,
//! success for every request that can be served (`null` otherwise) and
//! failure for every one that cannot. Both sides write the same patterns,
//! so comparing their contents or their zeroed bytes adds nothing, and a
//! request one side fails and the other serves is already the failing
//! side's `null` (size 0 aside, where both are legal, and a full fixed
//! region's refusal, which its side judges: the comparison then ends as
//! after a tolerated `null`). What differs with
//! no side at fault alone is a usable size: an allocator under test that
//! declares the reference's size classes (a mimalloc port,
//! [`Allocator::size_classes`]) must give a fresh binned block the
//! reference's usable size.
//!
//! The sides stay in lockstep, so the same op acts on the same block on
//! both: an op that one side's API cannot run (an alignment past its
//! `max_align`, a realloc to 0 whose meaning differs) runs on neither; a
//! size-0 block one side returns where the other returns null (both legal)
//! is freed again at once; and a request one side fails after a tolerated
//! `null` ends the comparison for the rest of the program, each side going
//! on alone with its own checks.
//!
//! A violation either side's executor raises names that side: the
//! reference's end `[reference allocator <name>]`. A disagreement is the
//! allocator under test's: `[allocator <name>, reference <name>]`.
//!
//! A reference that holds a quarter of a fuzzing process's RSS limit is
//! reported as the reference's and then left out (`held.rs`).

mod held;

use crate::allocator::{malloc_serves, Allocator};
use crate::executor::{Executor, Mode, Outcome, Stats};
use crate::op::{Op, Program, NEWEST};
use crate::sanitizer::on_reference_side;
use crate::violation::{By, Report, Violation};

/// Largest size whose usable size is a pure function of the request in
/// mimalloc (its small and medium bins).
const BINNED_MAX: usize = 512 << 10;

/// Runs `program` on `under_test` and `reference` side by side (see the
/// module doc). Its stats are the allocator under test's, an op neither
/// side ran counted as skipped.
pub fn run(
    program: &Program,
    under_test: &'static dyn Allocator,
    reference: &'static dyn Allocator,
    mode: Mode,
) -> Stats {
    // One seed base: both sides fill a block with the same pattern.
    let seed_base = crate::executor::seed_base_for(program);
    if held::retired() {
        return Executor::with_seed_base(under_test, mode, seed_base).run(program);
    }
    let mut a = Executor::with_seed_base(under_test, mode, seed_base);
    let mut b = Executor::with_seed_base(reference, mode, seed_base).as_reference();
    let same_classes = under_test.size_classes().is_some()
        && under_test.size_classes() == reference.size_classes();
    let mut sides = Sides {
        a: &mut a,
        b: &mut b,
        under_test,
        reference,
        compare_usable: mode == Mode::Checked && same_classes,
    };
    let mut stats = Stats::default();
    let mut in_step = true;
    for (i, op) in program.ops.iter().enumerate() {
        stats.ops += 1;
        if in_step && !runs_on_both(sides.a, op, under_test, reference) {
            stats.skipped += 1;
            continue;
        }
        let oa = sides.a.step(i, op);
        let ob = on_reference_side(reference.name(), || sides.b.step(i, op));
        match oa {
            Outcome::Skipped => stats.skipped += 1,
            Outcome::Failed => stats.failed += 1,
            _ => {}
        }
        // Whether a huge request is served (or, under ASan, run at all)
        // depends on each allocator's mapping, the machine's overcommit and
        // the time left, not on a limit both share; either way its block is
        // gone at once, so the sides stay in step.
        if !in_step || requests_huge(op) {
            continue;
        }
        in_step = sides.compare(i, op, oa, ob);
    }
    a.finish(program.ops.len());
    on_reference_side(reference.name(), || b.finish(program.ops.len()));
    held::after_program(reference);
    stats
}

/// The two sides of a differential run: the executor of the allocator
/// under test (`a`) and the reference's (`b`).
struct Sides<'e> {
    a: &'e mut Executor,
    b: &'e mut Executor,
    under_test: &'static dyn Allocator,
    reference: &'static dyn Allocator,
    /// Whether a fresh binned block's usable sizes must agree: in a
    /// checked run, of allocators that declare the same size classes.
    compare_usable: bool,
}

impl Sides<'_> {
    /// Compares what op `i` did on each side (`oa`, `ob`), and frees again
    /// a size-0 block one side returned where the other returned null.
    /// Returns whether the sides still hold the same blocks.
    fn compare(&mut self, i: usize, op: &Op, oa: Outcome, ob: Outcome) -> bool {
        match (oa, ob) {
            (Outcome::Live(x), Outcome::Live(y)) => self.check_usable(i, op, x, y),
            // A size-0 block on one side, null on the other: both legal.
            (Outcome::Live(x), Outcome::Failed | Outcome::Done)
                if self.a.shadow().blocks()[x].size == 0 =>
            {
                self.a.step(i, &Op::Free { slot: NEWEST });
            }
            (Outcome::Failed | Outcome::Done, Outcome::Live(y))
                if self.b.shadow().blocks()[y].size == 0 =>
            {
                on_reference_side(self.reference.name(), || {
                    self.b.step(i, &Op::Free { slot: NEWEST })
                });
            }
            (x, y) if std::mem::discriminant(&x) == std::mem::discriminant(&y) => {}
            // One side failed a request it had to serve, and its `null`
            // was tolerated: the two no longer hold the same blocks.
            _ => return false,
        }
        true
    }

    /// Raises a disagreement when op `i` made a fresh binned block on
    /// both sides (block `x` of the allocator under test, `y` of the
    /// reference) whose usable sizes differ, where they must agree.
    fn check_usable(&self, i: usize, op: &Op, x: usize, y: usize) {
        let (ba, bb) = (self.a.shadow().blocks()[x], self.b.shadow().blocks()[y]);
        let binned = ba.size <= BINNED_MAX && malloc_serves(ba.size, ba.align);
        if self.compare_usable && fresh(op) && binned && ba.usable != bb.usable {
            let detail = format!(
                "usable size {} but {}'s class for size {} is {}",
                ba.usable,
                self.reference.name(),
                ba.size,
                bb.usable
            );
            let report = Report {
                op_index: i,
                op: op.to_string(),
                site: self.a.site(),
                path: Vec::new(),
                violation: Violation::Diff { detail },
                by: By::Versus {
                    allocator: self.under_test.name().to_string(),
                    reference: self.reference.name().to_string(),
                },
            };
            crate::ending::raise(report);
        }
    }
}

/// Whether `op` asks for a huge block (past [`crate::edges::MAX_BLOCK`],
/// short of the impossible sizes), which the executor frees at once.
fn requests_huge(op: &Op) -> bool {
    let size = match *op {
        Op::Alloc { size, .. }
        | Op::BulkAlloc { size, .. }
        | Op::HeapAlloc { size, .. }
        | Op::WorkerAlloc { size, .. } => size,
        _ => return false,
    };
    size > crate::edges::MAX_BLOCK && size < crate::edges::IMPOSSIBLE_FROM
}

/// Whether `op` makes a fresh block: only a fresh, binned block with
/// natural alignment has a usable size that follows from the request alone
/// (a realloc may stay in place, an aligned block may start anywhere in its
/// slot, a huge one is rounded to the OS mapping).
fn fresh(op: &Op) -> bool {
    matches!(
        op,
        Op::Alloc { .. } | Op::Calloc { .. } | Op::HeapAlloc { .. } | Op::WorkerAlloc { .. }
    )
}

/// Whether both sides' APIs can run `op`: an alignment both support, and
/// no realloc to 0 where the two APIs give it different meanings (C frees,
/// mimalloc returns a block).
fn runs_on_both(ex: &Executor, op: &Op, a: &dyn Allocator, b: &dyn Allocator) -> bool {
    let align = match *op {
        Op::Alloc { align, .. }
        | Op::HeapAlloc { align, .. }
        | Op::WorkerAlloc { align, .. }
        | Op::ExitAlloc { align, .. }
        | Op::RaceAlloc { align, .. }
        | Op::RaceRemoteFree { align, .. }
        | Op::RaceExit { align, .. }
        | Op::RaceChurn { align, .. }
        | Op::RaceFork { align, .. } => align,
        _ => 1,
    };
    if align > a.max_align().min(b.max_align()) {
        return false;
    }
    if op.uses_other_threads() && (a.single_threaded() || b.single_threaded()) {
        return false;
    }
    // A process has one hook and one OS layer per allocator, and the
    // reference may be the same library as the allocator under test; an
    // attack is made in a child, on the allocator under test alone.
    if matches!(
        op,
        Op::HookFree { .. } | Op::OsFail { .. } | Op::Attack { .. }
    ) {
        return false;
    }
    let reallocs_to_zero = match *op {
        Op::Realloc { slot, to } => ex
            .shadow()
            .slot(slot)
            .is_some_and(|i| to.resolve(ex.shadow().blocks()[i].size) == 0),
        _ => false,
    };
    !(reallocs_to_zero && a.realloc_to_zero() != b.realloc_to_zero())
}
