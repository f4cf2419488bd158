//! A family of [`Bug::expected_kinds`]'s table, kept apart for its
//! length: the finding kinds of the bugs another thread brings out.

use super::Bug;

impl Bug {
    /// [`Bug::expected_kinds`] of the bugs another thread brings out (a
    /// race, a thread's exit, a fork while one holds a lock): the ones
    /// `expected_kinds` hands here, and only those.
    pub(super) fn threaded_kinds(self) -> &'static [&'static str] {
        match self {
            // The block freed in the lost one's place is the harness's
            // still: whichever op touches it first reports it (a usable
            // size asked of it, its free).
            Bug::XthreadWrongFree => &[
                "heap-use-after-free",
                "bad-malloc_usable_size",
                "double-free",
            ],
            // The child hangs on the lock, and is killed.
            Bug::ForkHeldLock => &["fork"],
            // Handed out again while live: the second request's overlap.
            Bug::ExitStaleCache => &["overlap"],
            // A block on the list twice is handed out to two owners; which
            // check sees it first depends on what they do with it.
            Bug::RacyFreeList => &["overlap", "contents", "realloc-prefix"],
            // The lost block never comes back: the executor's reuse probe
            // after a remote-free race misses it.
            Bug::LostRemoteFree => &["remote-free-lost"],
            // ASan sees the harness write the block the base freed; without
            // it, the base hands the block out again (two owners), or its
            // metadata lands in the block; the drain or the reclaimer's
            // owner frees it a second time. The base asked the usable size
            // of a block it freed answers less than the request (ASan's: 0).
            Bug::ExitReclaimRace => &[
                "heap-use-after-free",
                "overlap",
                "contents",
                "double-free",
                "realloc-prefix",
                "usable-size",
            ],
            other => unreachable!("{other:?} is not a threaded bug"),
        }
    }
}
