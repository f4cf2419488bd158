//! `attack`: a heap corruption the allocator promises to stop
//! ([`Allocator::stops`]), made in a forked child so the program's own
//! heap is never touched. The child takes [`WARM`] blocks of the size,
//! makes the attack, and says by its end what the allocator did: a
//! signal, an abort or an error the allocator reported
//! ([`Allocator::take_error`]) stopped it; a return from a double,
//! foreign or interior free did not (`hardening`), nor did handing out
//! the memory a freed block was made to point to (`hardening`, ArcHeap's
//! arbitrary chunk) or, after an overflow, a block over a live one
//! (ArcHeap's overlapping chunks). One attack a program: a fork costs
//! about 9 ms under ASan.

use super::child;
use super::child::ForkEnd;
use super::{Executor, Outcome};
use crate::allocator::{Allocator, Attack};
use crate::violation::{Site, Violation};

/// The largest size attacked: the child takes [`WARM`] blocks of it.
const MAX_SIZE: usize = 1 << 20;
/// Blocks of the size the child takes first: more than a thread cache
/// holds of one size (glibc's tcache holds 7), so the attacked blocks go
/// where the allocator keeps that size, not past a full cache.
const WARM: usize = 16;
/// Bytes of the child's own mapping the foreign free and the freed
/// write point into: memory the allocator never handed out.
const DECOY: usize = 64 << 10;
/// After a freed write, the child allocates this many blocks of the size
/// (at most [`AFTER_WRITE_BYTES`] of them, at least 4) looking for the decoy.
const AFTER_WRITE: usize = 1024;
const AFTER_WRITE_BYTES: usize = 4 << 20;
/// At most this many requests after an overflow, of at most
/// [`SWEEP_BYTES`] in all.
const SWEEP: usize = 256;
const SWEEP_BYTES: usize = 32 << 20;
/// The alignment the child asks for.
const ALIGN: usize = 8;
const WORD: usize = std::mem::size_of::<usize>();

/// How the child ends: it came back from the attack, ...
const RETURNED: i32 = 0;
/// ... it was handed the decoy, ...
const HIJACKED: i32 = 10;
/// ... the allocator reported an error (a stop), ...
const REPORTED: i32 = 11;
/// ... it could not set the attack up (a request refused), ...
const NOT_MADE: i32 = 12;
/// ... or it was handed a block overlapping one it holds.
const OVERLAPPED: i32 = 13;

impl Executor {
    /// Makes `attack` at blocks of `size` in a child, where the allocator
    /// promises to stop it; one a program (it shares `race-fork`'s budget).
    pub(super) fn attack(&mut self, attack: Attack, size: usize) -> Outcome {
        if !self.alloc.stops().contains(&attack)
            || self.forked
            || self.os_refusing()
            || !(2 * WORD..=MAX_SIZE).contains(&size)
            || (attack == Attack::InteriorFree && size <= 2 * WORD)
        {
            return Outcome::Skipped;
        }
        self.forked = true;
        self.guard.set_site(Site::bare("attack"));
        let end = attacked(self.alloc, attack, size);
        super::attack_seen::count(attack, size, end);
        let how = match end {
            ForkEnd::Clean
                if matches!(
                    attack,
                    Attack::DoubleFree | Attack::ForeignFree | Attack::InteriorFree
                ) =>
            {
                "not stopped: the allocator returned from it"
            }
            ForkEnd::Failed {
                code: Some(HIJACKED),
                ..
            } => "the allocator handed out the memory the freed block was made to point to",
            ForkEnd::Failed {
                code: Some(OVERLAPPED),
                ..
            } => "the allocator handed out a block overlapping a live one",
            ForkEnd::Hung => "not stopped: the child had not ended 3 s later",
            // Stopped (a signal, an abort, a reported error), not
            // hijacked, or not made.
            _ => return Outcome::Done,
        };
        self.guard.flag(Violation::Hardening { attack, size, how });
        Outcome::Done
    }
}

/// Forks a child that makes `attack`, and waits for it.
fn attacked(alloc: &'static dyn Allocator, attack: Attack, size: usize) -> ForkEnd {
    // SAFETY: `fork` takes no pointer; the child runs only what the next
    // block says.
    match unsafe { libc::fork() } {
        -1 => ForkEnd::Refused,
        // SAFETY: this is the child, on the thread that forked (no other
        // thread is in it, and none was in the allocator: the program's
        // ops run on this one, and its workers wait between sections); it
        // leaves by `_exit` or a signal.
        0 => unsafe { in_child(alloc, attack, size) },
        pid => child::wait_for(pid),
    }
}

/// The attack's child: makes it and exits with what the allocator did.
///
/// # Safety
/// Only in a forked child, on the thread that forked, with no other
/// thread in the allocator at the fork.
unsafe fn in_child(alloc: &'static dyn Allocator, attack: Attack, size: usize) -> ! {
    // SAFETY: a forked child (this fn's contract), which leaves by `_exit`
    // or a signal.
    unsafe {
        child::quiet();
        child::die_plainly();
    }
    // SAFETY: the child's own calls into the allocator; the attack's
    // misuse of it is what this child is for.
    let body = || match unsafe { make(alloc, attack, size) } {
        RETURNED if alloc.take_error().is_some() => REPORTED,
        code => code,
    };
    // A panic in the allocator (`child::PANICKED`) stopped the attack.
    // SAFETY: a forked child (this fn's contract).
    unsafe { child::finish(body) }
}

/// Makes `attack` on blocks of `size` (at least two words), and says how
/// the child ends if the allocator lets it go on.
///
/// # Safety
/// Only in the attack's child: it breaks the allocator's contract on
/// purpose, and the child ends right after.
unsafe fn make(alloc: &dyn Allocator, attack: Attack, size: usize) -> i32 {
    // SAFETY: a fresh private mapping of the child's own, which no
    // allocator handed out.
    let decoy = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            DECOY,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
            0,
        )
    };
    if decoy == libc::MAP_FAILED {
        return NOT_MADE;
    }
    let decoy = decoy as usize;
    let inside = decoy + DECOY / 2;
    let mut live = Live::default();
    for _ in 0..WARM {
        // SAFETY: the child's own request.
        let p = unsafe { alloc_one(alloc, size) };
        if p.is_null() {
            return NOT_MADE;
        }
        live.add(p, size);
    }
    // SAFETY: the program's heap is the parent's, untouched: this is a
    // forked child's copy, which the frees and the writes below break on
    // purpose (the attack), and which ends right after (this fn's
    // contract). Each block is one `alloc_one` gave, `size` bytes (at
    // least two words), so every write but the overflow's stays in it.
    unsafe {
        let (a, b) = (alloc_one(alloc, size), alloc_one(alloc, size));
        if a.is_null() || b.is_null() {
            return NOT_MADE;
        }
        match attack {
            Attack::DoubleFree => {
                alloc.free(a, size, ALIGN);
                alloc.free(a, size, ALIGN);
            }
            Attack::ForeignFree => alloc.free(inside as *mut u8, size, ALIGN),
            Attack::FreedWrite => {
                alloc.free(a, size, ALIGN);
                alloc.free(b, size, ALIGN);
                // The free-list link and the word beside it (glibc's
                // tcache key, a canary) point into the decoy.
                let words = b.cast::<usize>();
                words.write_unaligned(inside);
                words.add(1).write_unaligned(inside);
                let tries = (AFTER_WRITE_BYTES / size).clamp(4, AFTER_WRITE);
                for _ in 0..tries {
                    let q = alloc_one(alloc, size) as usize;
                    if (decoy..decoy + DECOY).contains(&q) {
                        return HIJACKED;
                    }
                    if q == 0 {
                        break;
                    }
                }
            }
            Attack::InteriorFree => {
                // `size` is more than two words (`attack` skips less).
                std::ptr::write_bytes(a, 0, size);
                alloc.free(a.add(2 * WORD), size, ALIGN);
            }
            Attack::Overflow | Attack::HeaderWrite => {
                // The block after `b`, held: a grown `b` reaches over it.
                live.add(alloc_one(alloc, size), size);
                return overflow(alloc, attack, size, a, b, &mut live);
            }
        }
    }
    RETURNED
}

/// The overflow and the header write: the two words past `a`'s usable
/// size (`Overflow`) or before `b` (`HeaderWrite`: its own header, where
/// the allocator keeps one) grown as a chunk size is (doubled, the low
/// four bits kept); then `b`, the block after `a`, freed, then requests
/// from three times `size` down to `size`, so one of them is the grown
/// chunk's class where the allocator keeps exact classes. `OVERLAPPED`
/// when one of the blocks it hands out overlaps a live one.
///
/// # Safety
/// Only in the attack's child (as `make`); `a`, `b` and the blocks in
/// `live` are blocks of `size` the child took, `b` right after `a`.
unsafe fn overflow(
    alloc: &dyn Allocator,
    attack: Attack,
    size: usize,
    a: *mut u8,
    b: *mut u8,
    live: &mut Live,
) -> i32 {
    // SAFETY: the corruption itself, the attack (this fn's contract): it
    // writes where the allocator keeps what follows `a` or precedes `b`.
    // A read there that faults (a guard page) ends the child by a
    // signal: stopped.
    unsafe {
        let end = a as usize + alloc.usable_size(a, size, ALIGN);
        let grown = match attack {
            Attack::HeaderWrite => [b as usize - 2 * WORD, b as usize - WORD],
            _ => [end, end + WORD],
        };
        for at in grown {
            let word = at as *mut usize;
            let was = word.read_unaligned();
            word.write_unaligned(was.wrapping_add(was & !0xf));
        }
        alloc.free(b, size, ALIGN);
    }
    live.add(a, size);
    let span = 2 * size;
    let tries = (SWEEP_BYTES / span).clamp(4, SWEEP);
    let step = (span / tries).next_multiple_of(16).max(16);
    for k in (0..=span / step).rev() {
        let request = size + k * step;
        // SAFETY: the child's own request.
        let q = unsafe { alloc_one(alloc, request) };
        if q.is_null() {
            continue;
        }
        if live.overlaps(q as usize, request) {
            return OVERLAPPED;
        }
        live.add(q, request);
    }
    RETURNED
}

/// A block of `size` for the child.
///
/// # Safety
/// Only in the attack's child.
unsafe fn alloc_one(alloc: &dyn Allocator, size: usize) -> *mut u8 {
    // SAFETY: alignment 8 is a power of two every allocator serves.
    unsafe { alloc.alloc(size, ALIGN, false) }
}

/// The blocks the child holds, as (start, length): in a fixed table, so
/// the child asks nothing of any allocator to keep it.
struct Live {
    blocks: [(usize, usize); WARM + SWEEP + 3],
    len: usize,
}

impl Default for Live {
    fn default() -> Live {
        Live {
            blocks: [(0, 0); WARM + SWEEP + 3],
            len: 0,
        }
    }
}

impl Live {
    /// Holds `p` (a null is no block).
    fn add(&mut self, p: *mut u8, len: usize) {
        if p.is_null() {
            return;
        }
        if let Some(slot) = self.blocks.get_mut(self.len) {
            *slot = (p as usize, len);
            self.len += 1;
        }
    }

    /// Whether `[at, at + len)` overlaps a block held.
    fn overlaps(&self, at: usize, len: usize) -> bool {
        self.blocks[..self.len]
            .iter()
            .any(|&(p, n)| at < p + n && p < at + len)
    }
}
