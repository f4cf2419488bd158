//! How an allocator call is made and how a finding leaves the executor:
//! the guarded call (a panic in the allocator is a finding), and the
//! violation's report, fatal or flagged.

use super::{Executor, On};
use crate::allocator::Allocator;
use crate::guard::{self, Panicked};
use crate::tolerance;
use crate::violation::{By, Report, Violation};

impl Executor {
    /// `violation` at the op running now, with the allocator code its
    /// calls ran when it is of a call ([`Violation::is_of_a_call`]).
    pub(super) fn report(&self, violation: Violation) -> Report {
        let path = match violation.is_of_a_call() {
            true => crate::coverage::op_path(violation.path_of()),
            false => Vec::new(),
        };
        self.report_with(violation, path)
    }

    fn report_with(&self, violation: Violation, path: Vec<String>) -> Report {
        let op = self
            .op
            .map_or_else(|| "end of program".to_string(), |op| op.to_string());
        let name = self.alloc.name().to_string();
        Report {
            op_index: self.op_index,
            op,
            site: self.site,
            path,
            violation,
            by: if self.reference {
                By::Reference(name)
            } else {
                By::Allocator(name)
            },
        }
    }

    /// What a call about to be made is if it succeeds, when its request
    /// has to fail (`violation`: an `impossible-success` or
    /// `calloc-overflow` with no block yet) and the checks are on: a
    /// sanitizer report inside the call is that finding
    /// ([`crate::sanitizer::must_fail`]), its path taken then.
    pub(super) fn must_fail(&self, violation: Violation) -> Option<Report> {
        self.checked
            .then(|| self.report_with(violation, Vec::new()))
    }

    /// Ends the program at a violation (quietly when it is tolerated).
    pub(super) fn fail(&self, violation: Violation) -> ! {
        tolerance::raise(self.report(violation));
    }

    /// A violation that leaves the heap sound: returns when it is
    /// tolerated or saved as a finding, and the caller goes on with the
    /// block.
    pub(super) fn flag(&self, violation: Violation) {
        debug_assert!(violation.leaves_heap_sound());
        tolerance::record(self.report(violation));
    }

    pub(super) fn panicked(&self, p: Panicked) -> ! {
        self.fail(Violation::Panic {
            message: p.message,
            location: p.location,
        })
    }

    /// Runs `f`, an allocator call on this thread; a panic in it is a finding.
    pub(super) fn guarded<R>(&self, f: impl FnOnce() -> R) -> R {
        self.calls.set(self.calls.get() + 1);
        self.asked(f)
    }

    /// Runs `f`, a question the harness asks the allocator about itself
    /// (an error it reported, its region, its validator), as
    /// [`Executor::guarded`] but not counted as one of the program's calls.
    pub(super) fn asked<R>(&self, f: impl FnOnce() -> R) -> R {
        crate::coverage::around(|| guard::call(f)).unwrap_or_else(|p| self.panicked(p))
    }

    /// Runs `f`, a query a check makes of what the op's calls returned (a
    /// usable size, a good size), as [`Executor::guarded`]; its code is in
    /// the path only of a violation of its answer.
    pub(super) fn queried<R>(&self, f: impl FnOnce() -> R) -> R {
        self.calls.set(self.calls.get() + 1);
        crate::coverage::around_query(|| guard::call(f)).unwrap_or_else(|p| self.panicked(p))
    }

    /// Makes an allocator call on the chosen thread; pointers travel as
    /// usize. A panic in the call is a finding.
    pub(super) fn call(
        &mut self,
        on: On,
        f: impl FnOnce(&'static dyn Allocator) -> usize + Send + 'static,
    ) -> usize {
        let alloc = self.alloc;
        self.calls.set(self.calls.get() + 1);
        let result = crate::coverage::around(|| match on {
            On::Main => guard::call(|| f(alloc)),
            On::Worker(w) => self.pool().run(w, move || guard::call(|| f(alloc))),
        });
        result.unwrap_or_else(|p| self.panicked(p))
    }
}
