//! `attack`: a heap corruption the allocator promises to stop
//! ([`Allocator::stops`]), made in a forked child so the program's own
//! heap is never touched. The child takes [`WARM`] blocks of the size,
//! makes the attack, and says by its end what the allocator did: a
//! signal, an abort or an error the allocator reported
//! ([`Allocator::take_error`]) stopped it; a return from a double or
//! foreign free did not (`hardening`), nor did handing out the memory a
//! freed block was made to point to (`hardening`, ArcHeap's arbitrary
//! chunk). One attack a program: a fork costs about 9 ms under ASan.

use super::child;
use super::race::ForkEnd;
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

/// How the child ends: it came back from the attack, ...
const RETURNED: i32 = 0;
/// ... it was handed the decoy, ...
const HIJACKED: i32 = 10;
/// ... the allocator reported an error (a stop), ...
const REPORTED: i32 = 11;
/// ... or it could not set the attack up (a request refused).
const NOT_MADE: i32 = 12;

impl Executor {
    /// Makes `attack` at blocks of `size` in a child, where the allocator
    /// promises to stop it; one a program (it shares `race-fork`'s budget).
    pub(super) fn attack(&mut self, attack: Attack, size: usize) -> Outcome {
        let word = std::mem::size_of::<usize>();
        if !self.alloc.stops().contains(&attack)
            || self.forked
            || self.os_refusing()
            || !(2 * word..=MAX_SIZE).contains(&size)
        {
            return Outcome::Skipped;
        }
        self.forked = true;
        self.guard.set_site(Site::bare("attack"));
        let how = match attacked(self.alloc, attack, size) {
            ForkEnd::Clean if attack != Attack::FreedWrite => {
                "not stopped: the allocator returned from it"
            }
            ForkEnd::Failed {
                code: Some(HIJACKED),
                ..
            } => "the allocator handed out the memory the freed block was made to point to",
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
    const ALIGN: usize = 8;
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
    let alloc_one = || {
        // SAFETY: alignment 8 is a power of two every allocator serves.
        unsafe { alloc.alloc(size, ALIGN, false) }
    };
    if (0..WARM).any(|_| alloc_one().is_null()) {
        return NOT_MADE;
    }
    // SAFETY: the program's heap is the parent's, untouched: this is a
    // forked child's copy, which the frees and the write below break on
    // purpose (the attack), and which ends right after (this fn's
    // contract). Each block is one `alloc_one` gave, `size` bytes (at
    // least two words), so the write stays in it.
    unsafe {
        match attack {
            Attack::DoubleFree => {
                let p = alloc_one();
                if p.is_null() {
                    return NOT_MADE;
                }
                alloc.free(p, size, ALIGN);
                alloc.free(p, size, ALIGN);
            }
            Attack::ForeignFree => alloc.free(inside as *mut u8, size, ALIGN),
            Attack::FreedWrite => {
                let (a, b) = (alloc_one(), alloc_one());
                if a.is_null() || b.is_null() {
                    return NOT_MADE;
                }
                alloc.free(a, size, ALIGN);
                alloc.free(b, size, ALIGN);
                // The free-list link and the word beside it (glibc's
                // tcache key, a canary) point into the decoy.
                let words = b.cast::<usize>();
                words.write_unaligned(inside);
                words.add(1).write_unaligned(inside);
                let tries = (AFTER_WRITE_BYTES / size).clamp(4, AFTER_WRITE);
                for _ in 0..tries {
                    let q = alloc_one() as usize;
                    if (decoy..decoy + DECOY).contains(&q) {
                        return HIJACKED;
                    }
                    if q == 0 {
                        break;
                    }
                }
            }
        }
    }
    RETURNED
}
