//! The memory `diff_mimalloc`'s reference got from the OS: each range its
//! `mmap` and `sbrk` calls made as it loaded and while its side ran
//! ([`reference_side`]), less what `munmap`, a later mapping over it or a
//! shrinking break took back. [`reference_resident`] counts the pages of those ranges that are
//! resident now (`mincore(2)`), which is what the reference holds of the
//! process's resident size, whatever the other side does.
//!
//! The ranges live in a fixed table (the wrappers run inside an
//! allocator's calls, where allocating could re-enter it): past
//! [`RANGES`] ranges, the newest are not kept and the count is short,
//! never long.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, MutexGuard};

/// Ranges kept at most: mimalloc maps an arena (1 GiB) at a time,
/// jemalloc a chunk of MiBs.
const RANGES: usize = 1024;

/// Set while the reference's side of a differential run runs.
static REFERENCE_SIDE: AtomicBool = AtomicBool::new(false);
/// Set once a range was kept: before that, an unmapping has nothing to take.
static KEPT_ANY: AtomicBool = AtomicBool::new(false);

/// The reference's ranges, `[start, end)`, in no order; `len` in use.
struct Table {
    ranges: [(usize, usize); RANGES],
    len: usize,
}

static TABLE: Mutex<Table> = Mutex::new(Table {
    ranges: [(0, 0); RANGES],
    len: 0,
});

fn table() -> MutexGuard<'static, Table> {
    TABLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// Marks the calls from now on as the reference's (`true`) or not.
pub fn reference_side(on: bool) {
    REFERENCE_SIDE.store(on, Ordering::Relaxed);
}

/// `[start, start + len)` was just mapped (or the break grew over it):
/// whatever range was there before is gone, and the new one is the
/// reference's while its side runs.
pub(super) fn mapped(start: usize, len: usize) {
    let reference = REFERENCE_SIDE.load(Ordering::Relaxed);
    if !reference && !KEPT_ANY.load(Ordering::Relaxed) {
        return;
    }
    let mut table = table();
    table.take(start, start.saturating_add(len));
    if reference && table.len < RANGES {
        let at = table.len;
        table.ranges[at] = (start, start.saturating_add(len));
        table.len += 1;
        KEPT_ANY.store(true, Ordering::Relaxed);
    }
}

/// `[start, start + len)` was unmapped (or the break shrank over it).
pub(super) fn unmapped(start: usize, len: usize) {
    if KEPT_ANY.load(Ordering::Relaxed) {
        table().take(start, start.saturating_add(len));
    }
}

impl Table {
    /// Takes `[start, end)` out of every range (a range across it splits
    /// in two, the second kept when there is room).
    fn take(&mut self, start: usize, end: usize) {
        let mut i = 0;
        while i < self.len {
            let (s, e) = self.ranges[i];
            if e <= start || s >= end {
                i += 1;
                continue;
            }
            let (head, tail) = ((s, start), (end, e));
            match (s < start, e > end) {
                (true, true) => {
                    self.ranges[i] = head;
                    if self.len < RANGES {
                        self.ranges[self.len] = tail;
                        self.len += 1;
                    }
                }
                (true, false) => self.ranges[i] = head,
                (false, true) => self.ranges[i] = tail,
                (false, false) => {
                    self.len -= 1;
                    self.ranges[i] = self.ranges[self.len];
                    continue;
                }
            }
            i += 1;
        }
    }
}

/// Bytes of the reference's ranges resident now.
pub fn reference_resident() -> u64 {
    let ranges: Vec<(usize, usize)> = {
        let table = table();
        table.ranges[..table.len].to_vec()
    };
    // A mapping starts on a page, a break may not: `resident_in` widens
    // each range to whole pages.
    ranges
        .into_iter()
        .map(|(start, end)| crate::resident::resident_in(start, end))
        .sum()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with(ranges: &[(usize, usize)]) -> Table {
        let mut table = Table {
            ranges: [(0, 0); RANGES],
            len: ranges.len(),
        };
        table.ranges[..ranges.len()].copy_from_slice(ranges);
        table
    }

    fn sorted(table: &Table) -> Vec<(usize, usize)> {
        let mut ranges = table.ranges[..table.len].to_vec();
        ranges.sort();
        ranges
    }

    #[test]
    fn taking_a_range_trims_splits_and_drops_what_it_covers() {
        let mut table = with(&[(0, 100), (200, 300), (400, 500)]);
        table.take(50, 250);
        assert_eq!(sorted(&table), [(0, 50), (250, 300), (400, 500)]);
        table.take(420, 440);
        assert_eq!(
            sorted(&table),
            [(0, 50), (250, 300), (400, 420), (440, 500)]
        );
        table.take(0, 1000);
        assert_eq!(sorted(&table), []);
    }

    /// A mapping made on the reference's side counts the pages touched in
    /// it until it is unmapped; one made outside never counts.
    #[test]
    fn the_references_mappings_count_their_resident_pages() {
        let (len, touched) = (8 << 20, 3 << 20);
        let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let map = || {
            // SAFETY: a fresh anonymous mapping of `len` bytes.
            let p =
                unsafe { super::super::__wrap_mmap(std::ptr::null_mut(), len, rw, anon, -1, 0) };
            assert_ne!(p, libc::MAP_FAILED);
            // SAFETY: the first `touched` bytes of the mapping just made.
            unsafe { std::ptr::write_bytes(p as *mut u8, 1, touched) };
            p
        };
        let before = reference_resident();
        let outside = map();
        assert_eq!(reference_resident(), before);
        reference_side(true);
        let inside = map();
        reference_side(false);
        assert_eq!(reference_resident() - before, touched as u64);
        for p in [inside, outside] {
            // SAFETY: a mapping of `len` bytes made above.
            assert_eq!(unsafe { super::super::__wrap_munmap(p, len) }, 0);
        }
        assert_eq!(reference_resident(), before);
    }
}
