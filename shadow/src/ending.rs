//! Where a violation the harness found leaves the program: the one way
//! in for the executor, the differential run and the harness's leak
//! check. A tolerated sanitizer report that came in before it ends the
//! program quietly first ([`sanitizer::check`]): the violation is that
//! report's consequence. Then [`tolerance`] decides. In the child that
//! names a writer ([`crate::writer`]) a violation ends the child, and a
//! sound one ends it only when it steps for that one's value.

use crate::sanitizer;
use crate::tolerance;
use crate::violation::Report;

/// Ends the program at `report` ([`tolerance::raise`]).
pub fn raise(report: Report) -> ! {
    crate::writer::end_in_child();
    sanitizer::check();
    tolerance::raise(report)
}

/// Ends the program at `report` even when tolerated
/// ([`tolerance::raise_always`]).
pub fn raise_always(report: Report) -> ! {
    crate::writer::end_in_child();
    sanitizer::check();
    tolerance::raise_always(report)
}

/// Records `report`, a violation that leaves the heap sound, and returns
/// ([`tolerance::record`]).
pub fn record(report: Report) {
    if crate::writer::in_child() {
        crate::writer::sound_violation_in_child();
        return;
    }
    sanitizer::check();
    tolerance::record(report)
}
