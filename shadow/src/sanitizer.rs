//! Sanitizer reports as keyed, tolerable findings.
//!
//! Fuzz builds are instrumented in ASan's recover mode
//! (`-Zsanitizer-recover=address`, `-fsanitize-recover=address`) and run
//! with `halt_on_error=0`, so ASan returns after a report instead of
//! exiting, and hands the report's text to the callback the fuzz target
//! registers, which calls [`on_report`]. The report is signed as triage
//! signs a log ([`report::Signature`]); when its tolerance key
//! (`asan: <title>`) is listed in `ALLOCSOAK_TOLERATE` it is counted and
//! the program ends quietly at the executor's next check ([`check`]: after
//! each op, and before any violation, which would be its consequence).
//! Any other report aborts the process right there, as ASan would have,
//! so the engine records the input.

use std::sync::atomic::{AtomicBool, Ordering};

use crate::violation;

/// A tolerated report came in since the last [`check`] (on any thread).
static PENDING: AtomicBool = AtomicBool::new(false);

/// Printed after each tolerated report, so triage skips the report when
/// it reads a log for the finding that ended the run.
use report::TOLERATED_REPORT;

/// Handles one sanitizer report (its full text). Returns only when the
/// report is tolerated.
pub fn on_report(text: &str) {
    let key = report::Signature::from_log(text, "").and_then(|s| s.tolerance_key());
    match key {
        Some(key) if violation::count_tolerated(&key) => {
            eprintln!("{TOLERATED_REPORT}{key}");
            PENDING.store(true, Ordering::Release);
        }
        _ => std::process::abort(),
    }
}

/// Ends the program quietly when a tolerated report came in since the
/// last check.
pub fn check() {
    if PENDING.swap(false, Ordering::AcqRel) {
        violation::end_quietly();
    }
}

/// Forgets a tolerated report not yet checked.
pub fn clear() {
    PENDING.store(false, Ordering::Release);
}
