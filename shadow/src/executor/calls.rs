//! How an allocator call is made and how a finding leaves the executor:
//! the guarded call (a panic in the allocator is a finding), and the
//! violation line, fatal or flagged.

use super::{Executor, On};
use crate::allocator::Allocator;
use crate::guard::{self, Panicked};
use crate::violation::{self, Report, Violation};

impl Executor {
    pub(super) fn line(&self, violation: Violation) -> String {
        let op = self
            .op
            .map_or_else(|| "end of program".to_string(), |op| op.to_string());
        let report = Report {
            op_index: self.op_index,
            op,
            site: self.site,
            violation,
        };
        use report::key::{REFERENCE, UNDER_TEST};
        let by = if self.reference {
            REFERENCE
        } else {
            UNDER_TEST
        };
        format!("{report}{by}{}]", self.alloc.name())
    }

    /// Ends the program at a violation (quietly when it is tolerated).
    pub(super) fn fail(&self, violation: Violation) -> ! {
        violation::raise(self.line(violation));
    }

    /// A violation that leaves the heap sound: returns when it is
    /// tolerated, and the caller goes on with the block.
    pub(super) fn flag(&self, violation: Violation) {
        debug_assert!(violation.leaves_heap_sound());
        violation::record(self.line(violation));
    }

    pub(super) fn panicked(&self, p: Panicked) -> ! {
        self.fail(Violation::Panic {
            message: p.message,
            location: p.location,
        })
    }

    /// Runs `f`, an allocator call on this thread; a panic in it is a finding.
    pub(super) fn guarded<R>(&self, f: impl FnOnce() -> R) -> R {
        guard::call(f).unwrap_or_else(|p| self.panicked(p))
    }

    /// Makes an allocator call on the chosen thread; pointers travel as
    /// usize. A panic in the call is a finding.
    pub(super) fn call(
        &mut self,
        on: On,
        f: impl FnOnce(&'static dyn Allocator) -> usize + Send + 'static,
    ) -> usize {
        let alloc = self.alloc;
        let result = match on {
            On::Main => guard::call(|| f(alloc)),
            On::Worker(w) => self.pool().run(w, move || guard::call(|| f(alloc))),
        };
        result.unwrap_or_else(|p| self.panicked(p))
    }
}
