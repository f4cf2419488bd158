//! How long a filing may take. Minimizing and shrinking a history stop
//! with what they have once it is over, and a replay or merge still
//! running a few seconds later is killed ([`crate::replay::output_within`]).

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// When a filing's work must end: the soak's filing time is over, or it
/// was asked to stop. The default never ends.
#[derive(Clone, Copy, Default)]
pub struct Budget<'a> {
    /// When filing closes; `None`: no end.
    pub until: Option<Instant>,
    /// Set when the soak is asked to stop.
    pub stop: Option<&'a AtomicBool>,
}

impl Budget<'_> {
    /// Whether the time is over.
    pub fn over(&self) -> bool {
        self.until.is_some_and(|t| Instant::now() >= t) || self.stopped()
    }

    /// Whether the soak was asked to stop.
    pub fn stopped(&self) -> bool {
        self.stop.is_some_and(|s| s.load(Ordering::Relaxed))
    }
}
