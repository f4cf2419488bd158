//! The budget of huge requests (between [`crate::model::MAX_BLOCK`] and
//! the impossible sizes, [`super::Executor::huge`]): a count per program
//! and, under ASan, a time budget per process.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use crate::poison;

/// Most huge requests (over [`crate::model::MAX_BLOCK`]) one program
/// makes; each is freed as soon as it is checked.
const MAX_HUGE: usize = 2;
/// The head, the tail and one window of a huge block are touched: one
/// page each.
pub(super) const PAGE: usize = 4096;
/// Largest zeroed huge request: an allocator that zeroes by hand (Rust's
/// default `alloc_zeroed` does) writes this much at most, a few dozen
/// milliseconds, and maps no more than a program's own blocks may.
const ZEROED_HUGE_MAX: usize = 256 << 20;
/// Largest huge request under ASan: just past 2^32, where 32-bit
/// truncations show. An allocator built with ASan poisons a block's
/// shadow, an eighth of its size, so a 64 GiB block costs 8 GiB of
/// writes; the builds without ASan (the tests, honggfuzz) go up to 2^62.
const HUGE_UNDER_ASAN: usize = (1 << 32) + (1 << 16);

/// The time huge requests may take under ASan, where a served 4 GiB block
/// costs an instrumented allocator about a second of shadow writes: a
/// second, plus this share of the process's run time. A request that
/// would go over is skipped. Fresh processes (a replay) always have the
/// second; without ASan huge requests cost microseconds and always run.
const HUGE_SHARE: f64 = 0.02;

/// Whether a huge request may run now, under ASan's time budget.
fn huge_budget_left() -> bool {
    let (start, spent) = huge_clock();
    let spent = Duration::from_nanos(spent.load(Ordering::Relaxed));
    spent < Duration::from_secs(1) + start.elapsed().mul_f64(HUGE_SHARE)
}

/// Counts the time since `clock` against the budget.
pub(super) fn spend(clock: Instant) {
    let took = clock.elapsed().as_nanos() as u64;
    huge_clock().1.fetch_add(took, Ordering::Relaxed);
}

fn huge_clock() -> &'static (Instant, AtomicU64) {
    static CLOCK: OnceLock<(Instant, AtomicU64)> = OnceLock::new();
    CLOCK.get_or_init(|| (Instant::now(), AtomicU64::new(0)))
}

/// The huge requests a program has made, held to [`MAX_HUGE`] and to the
/// process's time budget under ASan.
#[derive(Default)]
pub(super) struct HugeBudget {
    /// Huge requests made so far (each is freed at once).
    requests: usize,
}

impl HugeBudget {
    /// Whether a huge request of `size` bytes (`zeroed`) may run now;
    /// counts it when it may.
    pub(super) fn admit(&mut self, size: usize, zeroed: bool) -> bool {
        let asan = poison::active();
        let unaffordable = asan && (size > HUGE_UNDER_ASAN || !huge_budget_left());
        if (zeroed && size > ZEROED_HUGE_MAX) || unaffordable || self.requests >= MAX_HUGE {
            return false;
        }
        self.requests += 1;
        true
    }
}
