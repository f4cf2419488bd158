//! How long a filing may take, which minimizing and shrinking a history
//! both keep to.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

/// How long a filing may take: minimizing and shrinking stop with what
/// they have once the soak's filing time is over or it was asked to stop.
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
        self.until.is_some_and(|t| Instant::now() >= t)
            || self.stop.is_some_and(|s| s.load(Ordering::Relaxed))
    }
}
