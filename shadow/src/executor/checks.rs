//! The checks of what a call handed out or left: a block's usable size
//! and contents, an overlap, and a sanitizer's report met inside the call
//! that made a block.

use super::calls::CallGuard;
use crate::model::Block;
use crate::pattern;
use crate::poison;
use crate::sanitizer;
use crate::tolerance;
use crate::violation::Violation;

/// The plain requests [`CallGuard::misaligned`] probes with, all held at
/// once: sizes malloc serves at its own alignment, across its small
/// classes, none large enough to fail in a small fixed region.
const PLAIN_PROBES: [usize; 6] = [16, 24, 48, 96, 200, 512];

/// The fewest plain blocks (probed or held) that must be seen for a
/// misalignment to read as the allocator's layout.
const PLAIN_SEEN: usize = 3;

/// The checks of what a call handed out or left, each reported through the
/// guard, at the op and call it names.
impl CallGuard {
    /// The violation of block `ptr` (`size` asked for) not aligned to
    /// `align`, with `live` the program's blocks. When it misses even
    /// plain malloc's alignment (16, or the allocator's largest when that
    /// is less), and so does every plain block a probe gets right after
    /// and every one the program holds (at least [`PLAIN_SEEN`] in all),
    /// the misalignment is the allocator's block layout, not the choice of
    /// the call that met it: [`Violation::Underaligned`], one group
    /// whichever entry point met it. A block only some sizes get
    /// misaligned (one size class's bug), or an over-aligned request served
    /// at malloc's alignment, stays an [`Violation::Alignment`] of its
    /// call, keyed by its path. Judged once per program (again while too
    /// few blocks were seen), so a replay makes the same calls as the run
    /// it repeats.
    pub(super) fn misaligned(
        &self,
        ptr: usize,
        size: usize,
        align: usize,
        live: &[Block],
    ) -> Violation {
        let plain = super::plain_align(self.alloc);
        let natural = if ptr.is_multiple_of(plain) {
            None
        } else {
            self.plain_layout(plain, ptr, live)
                .map(|n| n.min(1 << ptr.trailing_zeros()))
        };
        match natural {
            Some(natural) => Violation::Underaligned {
                ptr,
                size,
                align,
                natural,
            },
            None => Violation::Alignment { ptr, size, align },
        }
    }

    /// The lowest alignment among the allocator's plain blocks (of
    /// [`PLAIN_PROBES`]' sizes, and those `live` asked for at `plain`) when
    /// enough were seen and none is aligned to `plain`. When too few were
    /// (a full region: the program's one block took it all, which is where
    /// minimizing such a finding ends), the held blocks and `ptr` judge
    /// alone, and only a misalignment below a word (8), which no size
    /// class's rounding makes, reads as the layout.
    fn plain_layout(&self, plain: usize, ptr: usize, live: &[Block]) -> Option<usize> {
        if let Some(judged) = self.plain_misaligned.get() {
            return judged;
        }
        let held = live.iter().filter(|b| b.align == plain).map(|b| b.ptr);
        let seen: Vec<usize> = self.probe_plain(plain).into_iter().chain(held).collect();
        let lowest = |seen: &[usize]| {
            seen.iter()
                .all(|p| !p.is_multiple_of(plain))
                .then(|| seen.iter().map(|p| 1 << p.trailing_zeros()).min())
                .flatten()
        };
        if seen.len() < PLAIN_SEEN {
            let mut seen = seen;
            seen.push(ptr);
            return lowest(&seen).filter(|&n| n < 8);
        }
        let judged = lowest(&seen);
        self.plain_misaligned.set(Some(judged));
        judged
    }

    /// The addresses of the blocks [`PLAIN_PROBES`] were served at
    /// `plain` alignment, each freed once all are made (probed: not the
    /// program's calls, nor on its path).
    fn probe_plain(&self, plain: usize) -> Vec<usize> {
        let mut blocks = Vec::with_capacity(PLAIN_PROBES.len());
        for n in PLAIN_PROBES {
            // SAFETY: no block is passed; `plain` is a power of two no larger than
            // `max_align()`.
            let p = self.probed(|| unsafe { self.alloc.alloc(n, plain, false) });
            if !p.is_null() {
                blocks.push((p, n));
            }
        }
        for &(p, n) in &blocks {
            // SAFETY: `p` was just returned, non-null, for `n` bytes and `plain`; freed once.
            self.probed(|| unsafe { self.alloc.free(p, n, plain) });
        }
        blocks.into_iter().map(|(p, _)| p as usize).collect()
    }

    /// The call that returned block `p` (`size` asked for) read or wrote
    /// past it before returning it (ASan's `report`, held by
    /// [`sanitizer::making`]). When the block is cut short (`usable`),
    /// that is its `usable-size` violation met inside the call (the
    /// allocator copied or zeroed the size asked for into it), one bug
    /// with the short block met on return; memory is in doubt after it,
    /// so it ends the program unless its own key is listed. Else the
    /// report is handled as any other.
    pub(super) fn made_short(&self, p: usize, size: usize, usable: usize, report: &str) {
        if usable >= size {
            return sanitizer::on_report(report);
        }
        let short = self.report(Violation::UsableSize {
            ptr: p,
            size,
            usable,
            why: "less than requested",
        });
        tolerance::raise_in_report(short, true);
        tolerance::end_quietly();
    }

    /// How much of the block at `p` (`size` asked for) the program may
    /// use: the usable size the allocator `claimed`, but no more than ASan
    /// lets it touch (in an ASan build; a block an allocator cut short, or
    /// whose size it overstates, is poisoned past its end). A usable size
    /// below the request, or past the block's end, is a violation that
    /// leaves the heap sound: flagged here, before anything touches the
    /// missing bytes, so it is filed as what it is and not as the
    /// sanitizer's report of the harness's access.
    ///
    /// A huge block is asked about only where the harness touches it:
    /// its first and last `window` bytes.
    pub(super) fn checked_usable(
        &self,
        p: usize,
        size: usize,
        claimed: usize,
        window: Option<usize>,
    ) -> usize {
        if size == 0 {
            // C leaves any access to it undefined, and ASan poisons it
            // whatever the usable size: nothing is touched.
            return claimed;
        }
        let end = claimed.max(size);
        let ranges = match window {
            Some(w) if 2 * w < end => [(0, w), (end - w, end)],
            _ => [(0, end), (end, end)],
        };
        let reach = ranges
            .iter()
            .find_map(|&(from, to)| poison::poisoned_from(p as *const u8, from, to))
            .unwrap_or(end);
        let usable = claimed.min(reach);
        if usable < size {
            self.flag(Violation::UsableSize {
                ptr: p,
                size,
                usable,
                why: "less than requested",
            });
        } else if usable < claimed {
            self.flag(Violation::UsableSize {
                ptr: p,
                size,
                usable: claimed,
                why: crate::violation::PAST_THE_END,
            });
        }
        usable
    }

    /// Checks live block `b` before the op uses it: a change is from an
    /// earlier op.
    pub(super) fn verify(&self, b: &Block, when: &'static str) {
        self.verify_as(b, when, false);
    }

    /// Checks live block `b` after the op's own calls: a change is theirs
    /// (path-keyed, [`Violation::is_of_a_call`]).
    pub(super) fn verify_after_call(&self, b: &Block, when: &'static str) {
        self.verify_as(b, when, true);
    }

    fn verify_as(&self, b: &Block, when: &'static str, by_call: bool) {
        // SAFETY: `b` is a live block of the shadow.
        if let Some(mismatch) = unsafe { contents(b) } {
            self.fail(Violation::Contents {
                ptr: b.ptr,
                size: b.size,
                mismatch,
                when,
                by_call,
            });
        }
    }

    /// In a replay, keeps block `b`, just given back to the allocator by
    /// `call`, with the leak it is should LeakSanitizer find it lost at
    /// the program's end ([`sanitizer::given_back`]).
    pub(super) fn given_back(&self, b: &Block, call: &'static str) {
        sanitizer::given_back(b.ptr, || {
            self.report(Violation::Leak {
                ptr: b.ptr,
                size: b.size,
                call,
            })
        });
    }

    /// Ends the program: block `b` overlaps the live block `other`.
    pub(super) fn overlap(&self, b: Block, other: Block) -> ! {
        self.fail(Violation::Overlap {
            ptr: b.ptr,
            len: b.size.max(b.usable),
            other: other.ptr,
            other_len: other.size.max(other.usable),
        })
    }
}

/// Where a live block's pattern is broken, if it is: every check of a
/// block's contents reads it here, on whichever thread, so a sanitizer's
/// report of a read of a block the allocator took back names this one
/// function (one group), not the check or thread that met it.
///
/// # Safety
/// `b` is a live block of the shadow: its `extent` bytes are readable,
/// unless the allocator broke that (which is what ASan then reports).
#[inline(never)]
pub(super) unsafe fn contents(b: &Block) -> Option<pattern::Mismatch> {
    // SAFETY: `b` is live, its `extent` bytes readable (this fn's contract).
    let found = unsafe { pattern::check(b.ptr as *const u8, b.extent, b.extent, b.seed) };
    // Used after the call, so it is not a tail call: this frame stays on
    // the stack a report shows.
    std::hint::black_box(found)
}
