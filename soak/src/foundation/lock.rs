//! The soak's one rule for a lock a panicked thread held (a poisoned
//! `Mutex`): take what it guards as it is and go on. A long-running soak
//! never dies because one of its workers did; every value behind these
//! locks (sets of busy slots, queues, counters, the store's connection)
//! stays sound across a panic between two of its statements, since each
//! is one call on a std collection or on SQLite, which rolls back what a
//! panic left unfinished.

use std::sync::{Mutex, MutexGuard, PoisonError};

/// Locks `mutex`, taking its value as it is if a thread panicked while
/// it held the lock.
pub fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
}
