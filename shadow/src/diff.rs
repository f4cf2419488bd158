//! `diff_mimalloc`: one program in lockstep on the allocator under test and
//! on C mimalloc, comparing what must agree.

use crate::allocator::{malloc_serves, Allocator};
use crate::executor::{Executor, Mode, Outcome};
use crate::op::{Op, Program};
use crate::pattern;
use crate::violation::{Report, Violation};

/// Largest size whose usable size is a pure function of the request in
/// mimalloc (its small and medium bins).
const BINNED_MAX: usize = 512 << 10;

/// Runs `program` on `under_test` and `reference` side by side. Each side
/// runs the full shadow model; on top, both must agree on success or
/// failure of every request, on contents, and on usable sizes when the
/// allocator under test declares mimalloc's size classes.
pub fn run(
    program: &Program,
    under_test: &'static dyn Allocator,
    reference: &'static dyn Allocator,
    mode: Mode,
) {
    // One seed base: both sides fill a block with the same pattern.
    let seed_base = crate::executor::next_seed_base();
    let mut a = Executor::with_seed_base(under_test, mode, seed_base);
    let mut b = Executor::with_seed_base(reference, mode, seed_base);
    let same_classes = under_test.size_classes() == Some("mimalloc");
    let zero_differs = under_test.realloc_to_zero() != reference.realloc_to_zero();
    for (i, op) in program.ops.iter().enumerate() {
        // realloc to 0 is API-defined (C frees, mimalloc returns a block):
        // where the two APIs differ, neither side runs it.
        if zero_differs && reallocs_to_zero(&a, op) {
            continue;
        }
        let (oa, ob) = (a.step(i, op), b.step(i, op));
        // Whether a huge request is served depends on each allocator's
        // mapping and the machine's overcommit, not on a limit both share.
        if mode == Mode::Bare || requests_huge(op) {
            continue;
        }
        let fail = |detail: String| -> ! {
            let report = Report {
                op_index: i,
                op: op.to_string(),
                site: a.site(),
                violation: Violation::Diff { detail },
            };
            crate::violation::raise(format!(
                "{report} [allocator {} vs {}]",
                under_test.name(),
                reference.name()
            ));
        };
        match (oa, ob) {
            (Outcome::Live(x), Outcome::Live(y)) => {
                let (ba, bb) = (a.shadow().blocks()[x], b.shadow().blocks()[y]);
                if ba.size != bb.size {
                    fail(format!("block sizes differ: {} vs {}", ba.size, bb.size));
                }
                // Only a fresh, binned block with natural alignment has a
                // usable size that follows from the request alone: a realloc
                // may stay in place, an aligned block may start anywhere in
                // its slot, a huge one is rounded to the OS mapping.
                let fresh = matches!(
                    op,
                    Op::Alloc { .. }
                        | Op::Calloc { .. }
                        | Op::HeapAlloc { .. }
                        | Op::WorkerAlloc { .. }
                );
                let binned = ba.size <= BINNED_MAX && malloc_serves(ba.size, ba.align);
                if same_classes && fresh && binned && ba.usable != bb.usable {
                    fail(format!(
                        "usable size {} but mimalloc's class for size {} is {}",
                        ba.usable, ba.size, bb.usable
                    ));
                }
                // Both sides filled the layout of the requested size (equal, checked above).
                if let Some(m) = unsafe {
                    pattern::compare(bb.ptr as *const u8, ba.ptr as *const u8, ba.size, ba.seed)
                } {
                    fail(format!(
                        "contents differ at offset {}: mimalloc {:#04x}, under test {:#04x}",
                        m.offset, m.expected, m.found
                    ));
                }
            }
            (x, y) if std::mem::discriminant(&x) != std::mem::discriminant(&y) => {
                fail(format!("under test {x:?}, mimalloc {y:?}"))
            }
            _ => {}
        }
    }
    a.finish(program.ops.len());
    b.finish(program.ops.len());
}

fn requests_huge(op: &Op) -> bool {
    let size = match *op {
        Op::Alloc { size, .. } | Op::BulkAlloc { size, .. } => size,
        _ => return false,
    };
    size > crate::model::MAX_BLOCK && size < crate::edges::IMPOSSIBLE_FROM
}

fn reallocs_to_zero(ex: &Executor, op: &Op) -> bool {
    match *op {
        Op::Realloc { slot, to } => ex
            .shadow()
            .slot(slot)
            .is_some_and(|i| to.resolve(ex.shadow().blocks()[i].size) == 0),
        _ => false,
    }
}
