//! How an allocator call is made and how a finding leaves the executor:
//! the guarded call (a panic in the allocator is a finding), the thread it
//! runs on, and the violation's report, fatal or flagged.

use std::cell::Cell;
use std::sync::MutexGuard;

use crate::allocator::Allocator;
use crate::ending;
use crate::guard::{self, Panicked};
use crate::op::Op;
use crate::violation::{By, Report, Site, Violation};
use crate::workers::WorkerPool;
use crate::writer;

/// Which thread makes the allocator call.
#[derive(Clone, Copy)]
pub(super) enum On {
    Main,
    Worker(usize),
    /// The worker's thread as it ends, after the allocator's own
    /// thread-exit handlers ([`WorkerPool::run_at_exit`]).
    Exiting(usize),
}

/// The call guard and its attribution: every allocator call the program
/// makes runs through it (a panic in the call is a finding, and the call
/// is counted), and it knows what a violation is of: the allocator (under
/// test, or the reference of a differential run), the op running and the
/// allocator call that op is making.
pub(super) struct CallGuard {
    pub(super) alloc: &'static dyn Allocator,
    /// The reference side of a differential run: its violations name the
    /// reference allocator, not the allocator under test.
    reference: bool,
    op_index: usize,
    /// The op running; `None` at the end of the program.
    op: Option<Op>,
    /// The allocator call the op is making, for violation keys.
    site: Site,
    /// Allocator calls made outside race sections so far.
    calls: Cell<usize>,
    /// What a probe of plain blocks found, once per program
    /// ([`CallGuard::misaligned`]): the lowest alignment among them when
    /// every one missed malloc's.
    pub(super) plain_misaligned: Cell<Option<Option<usize>>>,
}

impl CallGuard {
    pub(super) fn new(alloc: &'static dyn Allocator) -> CallGuard {
        CallGuard {
            alloc,
            reference: false,
            op_index: 0,
            op: None,
            site: Site::bare("none"),
            calls: Cell::new(0),
            plain_misaligned: Cell::new(None),
        }
    }

    /// Names the reference allocator in every violation from now on.
    pub(super) fn as_reference(&mut self) {
        self.reference = true;
    }

    /// Op `index` (`None`: the end of the program) is running now.
    pub(super) fn begin(&mut self, index: usize, op: Option<Op>) {
        self.op_index = index;
        self.op = op;
    }

    /// The allocator call the op makes next, which its violations name.
    pub(super) fn set_site(&mut self, site: Site) {
        self.site = site;
    }

    /// The allocator call the last op made.
    pub(super) fn site(&self) -> Site {
        self.site
    }

    /// Allocator calls made outside race sections so far, counted again
    /// from zero.
    pub(super) fn take_calls(&mut self) -> usize {
        self.calls.take()
    }

    /// Counts `n` allocator calls made inside one the guard ran (a probe's).
    pub(super) fn count(&self, n: usize) {
        self.calls.set(self.calls.get() + n);
    }

    /// `violation` at the op running now, with the allocator code its
    /// calls ran when it is of a call ([`Violation::is_of_a_call`]).
    /// A byte its calls broke is keyed by the allocator function whose
    /// store broke it, a wrong value they answered by the one that
    /// computed it, a wrong block or null a C allocator's call returned by
    /// the path within the function that chose it, when the replay's
    /// child saw one in allocator code ([`crate::writer`]).
    pub(super) fn report(&self, violation: Violation) -> Report {
        if writer::in_child() {
            // The locating child keys nothing: a violation only ends it
            // (`ending`), and it may be stepping.
            return self.report_with(violation, Vec::new());
        }
        let (op, reference) = (self.op_index, self.reference);
        let culprit = if let Some(wrong) = violation.wrong_byte() {
            writer::writer_of(op, reference, wrong)
                .and_then(|stack| crate::coverage::writer(&stack))
                .map(|f| vec![f])
        } else if let Some(value) = violation.wrong_value() {
            writer::producer_of(op, reference, value)
                .and_then(|s| computed_by(&s))
                .map(|f| vec![f])
        } else if let Some(answer) = violation.wrong_answer() {
            writer::returner_of(op, reference, answer)
                .map(crate::coverage::returner_path)
                .filter(|path| !path.is_empty())
        } else {
            None
        };
        let path = match (violation.is_of_a_call(), culprit) {
            (true, Some(culprit)) => culprit,
            (true, None) => crate::coverage::op_path(violation.path_of()),
            (false, _) => Vec::new(),
        };
        self.report_with(violation, path)
    }

    /// Whether this is the reference side of a differential run.
    pub(super) fn is_reference(&self) -> bool {
        self.reference
    }

    /// `violation` at the op running now, with `path` as its code path.
    pub(super) fn report_with(&self, violation: Violation, path: Vec<String>) -> Report {
        let op = self
            .op
            .map_or_else(|| "end of program".to_string(), |op| op.to_string());
        let name = self.alloc.name().to_string();
        Report {
            op_index: self.op_index,
            op,
            site: if violation.is_of_every_call() {
                Site::any_call()
            } else {
                self.site
            },
            path,
            violation,
            by: if self.reference {
                By::Reference(name)
            } else {
                By::Allocator(name)
            },
        }
    }

    /// Ends the program at a violation (quietly when it is tolerated, or
    /// when a tolerated sanitizer report came in first: the violation is
    /// its consequence).
    pub(super) fn fail(&self, violation: Violation) -> ! {
        let report = self.report(violation);
        ending::raise(report);
    }

    /// A violation that leaves the heap sound: returns when it is
    /// tolerated or saved as a finding, and the caller goes on with the
    /// block (ends the program quietly when a tolerated sanitizer report
    /// came in first).
    pub(super) fn flag(&self, violation: Violation) {
        debug_assert!(violation.leaves_heap_sound());
        let report = self.report(violation);
        ending::record(report);
    }

    pub(super) fn panicked(&self, p: Panicked) -> ! {
        self.fail(Violation::Panic {
            message: p.message,
            location: p.location,
        })
    }

    /// Runs `f`, an allocator call on this thread; a panic in it is a finding.
    pub(super) fn guarded<R>(&self, f: impl FnOnce() -> R) -> R {
        self.counted(|| guard::call(f))
    }

    /// Runs `f`, a question the harness asks the allocator about itself
    /// (an error it reported, its region, its validator), as
    /// [`CallGuard::guarded`] but not counted as one of the program's calls.
    pub(super) fn asked<R>(&self, f: impl FnOnce() -> R) -> R {
        crate::coverage::around(|| writer::stepped_aside(|| guard::call(f)))
            .unwrap_or_else(|p| self.panicked(p))
    }

    /// Runs `f`, calls the harness makes of its own accord (the layout
    /// probe, the allocator's heap check), as [`CallGuard::asked`] but off
    /// the op's path: they are no part of how the op met its bug, and a
    /// bug they ran into (a small size's) would join its group to the
    /// op's.
    pub(super) fn probed<R>(&self, f: impl FnOnce() -> R) -> R {
        writer::stepped_aside(|| guard::call(f)).unwrap_or_else(|p| self.panicked(p))
    }

    /// Runs the allocator's own heap check
    /// ([`crate::allocator::Allocator::heap_check`]), off the op's path: a
    /// heap broken now was broken by the calls since the op began, so the
    /// finding is keyed by their path, not by the check's own code.
    pub(super) fn heap_check(&self) {
        if !self.alloc.has_heap_check() {
            return;
        }
        if let Err(detail) = self.probed(|| self.alloc.heap_check()) {
            self.fail(Violation::HeapCheck { detail });
        }
    }

    /// Runs `f`, a query a check makes of what the op's calls returned (a
    /// usable size, a good size), as [`CallGuard::guarded`]; its code is in
    /// the path only of a violation of its answer.
    pub(super) fn queried<R>(&self, f: impl FnOnce() -> R) -> R {
        self.count(1);
        crate::coverage::around_query(|| writer::stepped(|| guard::call(f)))
            .unwrap_or_else(|p| self.panicked(p))
    }

    /// Runs `f`, which makes one allocator call under [`guard::call`] on
    /// whichever thread: counted, on the op's path, a panic a finding.
    fn counted<R>(&self, f: impl FnOnce() -> Result<R, Panicked>) -> R {
        self.count(1);
        crate::coverage::around(|| writer::stepped(f)).unwrap_or_else(|p| self.panicked(p))
    }
}

/// The allocator function that computed a value, from the stacks of the
/// instructions after which it appeared in a register
/// ([`writer::producer_of`]): when one instruction of the
/// allocator's made it appear, that one's. More than one is a coincidence
/// somewhere (a bit mask or a count equal to it), which keys nothing: the
/// call's path does.
fn computed_by(stacks: &[Vec<usize>]) -> Option<String> {
    let mut made = stacks
        .iter()
        .filter_map(|s| Some((*s.first()?, crate::coverage::producer(s)?)));
    let (pc, function) = made.next()?;
    made.all(|(other, _)| other == pc).then_some(function)
}

/// The worker threads the program's calls and race sections run on: the
/// pool, locked when a worker is first needed and held for the rest of
/// the program.
#[derive(Default)]
pub(super) struct Workers {
    pool: Option<MutexGuard<'static, WorkerPool>>,
}

impl Workers {
    pub(super) fn pool(&mut self) -> &mut WorkerPool {
        self.pool.get_or_insert_with(WorkerPool::lock)
    }

    /// Makes an allocator call on the chosen thread, through `guard`;
    /// pointers travel as usize. A panic in the call is a finding.
    pub(super) fn call(
        &mut self,
        guard: &CallGuard,
        alloc: &'static dyn Allocator,
        on: On,
        f: impl FnOnce(&'static dyn Allocator) -> usize + Send + 'static,
    ) -> usize {
        guard.counted(|| match on {
            On::Main => crate::guard::call(|| f(alloc)),
            On::Worker(w) => self.pool().run(w, move || crate::guard::call(|| f(alloc))),
            On::Exiting(w) => self
                .pool()
                .run_at_exit(w, move || crate::guard::call(|| f(alloc))),
        })
    }

    /// Runs `f`, an allocator call, on `worker`, through `guard` (counted,
    /// on the op's path, a panic a finding).
    pub(super) fn call_on<R: Send + 'static>(
        &mut self,
        guard: &CallGuard,
        worker: usize,
        f: impl FnOnce() -> R + Send + 'static,
    ) -> R {
        guard.counted(|| self.pool().run(worker, move || crate::guard::call(f)))
    }
}
