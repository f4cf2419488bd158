//! Typed violations and the one line each one panics with.
//!
//! The line always starts `allocsoak violation: <kind>: op #<index> `<op>``,
//! then the [`Site`] in parentheses (the allocator function the op called
//! and the size and alignment buckets of its block), then the message and
//! who raised it ([`By`]), so every engine records it as a crash. The line
//! is for people: the pipeline gets the typed [`Report::record`] (written
//! to the findings folder, or where `ALLOCSOAK_RECORD` says in a replay),
//! and [`Report::key`] builds the key the soak's tolerance uses from the
//! violation's parts. In a replay, a violation of a call's result also
//! carries its code path ([`Report::path`], [`crate::coverage`]), which
//! triage's signature keys the group on; without one, the key is the
//! group's too.
//!
//! Some violations leave the heap sound ([`Violation::leaves_heap_sound`]):
//! the program records them ([`crate::tolerance::record`]) and goes on, so
//! a bug behind them on the same path is still reached; while fuzzing they
//! are saved as findings ([`crate::findings`]) and never end the process.
//! The others end the program ([`crate::tolerance::raise`]).

pub use report::key::{key_of, kind_of, numbers_to_n};

use crate::pattern::Mismatch;

mod line;
mod reported;
mod site;
pub use reported::{By, Report};
pub use site::{align_bucket, size_bucket, Site};

/// An invariant the allocator under test broke.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Violation {
    /// A request that must succeed returned null.
    Null { size: usize, align: usize },
    /// A request no machine can serve succeeded.
    ImpossibleSuccess {
        size: usize,
        align: usize,
        ptr: usize,
    },
    /// `calloc(count, size)` succeeded although `count * size` overflows.
    CallocOverflow {
        count: usize,
        size: usize,
        ptr: usize,
    },
    Alignment {
        ptr: usize,
        size: usize,
        align: usize,
    },
    /// A block that misses even plain malloc's alignment, as does every
    /// plain block the allocator gives beside it
    /// ([`crate::executor`]'s `misaligned`): the allocator's block layout
    /// (a 4-byte header that puts every block 4 off), not one call's
    /// choice. Its key names the blocks' alignment alone, `natural` (the
    /// lowest of theirs): no path, no tiers, so every entry point that
    /// hands out a block (malloc, calloc, a realloc that moved it) files
    /// it once.
    Underaligned {
        ptr: usize,
        size: usize,
        align: usize,
        natural: usize,
    },
    /// A new block overlaps a live one.
    Overlap {
        ptr: usize,
        len: usize,
        other: usize,
        other_len: usize,
    },
    UsableSize {
        ptr: usize,
        size: usize,
        usable: usize,
        why: &'static str,
    },
    /// A live block's pattern changed while the allocator held it.
    /// `by_call`: found right after the op's own calls changed it (a
    /// purge, a failed realloc, or any call in a replay, which checks
    /// every live block after each op), so those calls are where the bug
    /// is; else found later, when the block was next used.
    Contents {
        ptr: usize,
        size: usize,
        mismatch: Mismatch,
        when: &'static str,
        by_call: bool,
    },
    /// A live block read wrong once the kernel reclaimed every page under
    /// the live blocks (`MADV_PAGEOUT`) `when` (after
    /// a purge, or at the end of a program that purged): the allocator had
    /// given a page under it back lazily (`MADV_FREE`), which keeps its
    /// bytes until memory runs short and then reads zero. `by_call`: right
    /// after the purge's own calls, so they released it.
    ReleasedLive {
        ptr: usize,
        size: usize,
        mismatch: Mismatch,
        when: &'static str,
        by_call: bool,
    },
    /// Realloc did not keep the common prefix.
    ReallocPrefix {
        old: usize,
        new: usize,
        old_size: usize,
        new_size: usize,
        mismatch: Mismatch,
    },
    /// A zeroed allocation did not read zero.
    Zeroed {
        ptr: usize,
        size: usize,
        mismatch: Mismatch,
    },
    /// A fresh block's usable size is not what the allocator's good-size
    /// call (`mi_good_size`, `nallocx`) promised for the request.
    GoodSize {
        ptr: usize,
        size: usize,
        good: usize,
        usable: usize,
    },
    /// Realloc broke its contract in another way (wrong result kind).
    Realloc {
        ptr: usize,
        new_size: usize,
        why: &'static str,
    },
    /// A heap walk disagrees with the live blocks of that heap.
    HeapVisit { heap: usize, detail: String },
    /// The allocator says a live block of a heap is not in it.
    HeapOwned { heap: usize, ptr: usize },
    /// The allocator's own error callback fired.
    AllocatorError { detail: String },
    /// The allocator's consistency check failed.
    Validator { detail: String },
    /// The allocator's own heap check, run right after the op's calls,
    /// found the heap broken ([`crate::allocator::Allocator::heap_check`]).
    HeapCheck { detail: String },
    /// The allocator under test and the reference disagree.
    Diff { detail: String },
    /// The allocator panicked inside a call; `location` is the panicking
    /// frame (`file:line`), kept whole in the key.
    Panic { message: String, location: String },
    /// An allocator over a fixed region serves less once a program has
    /// freed everything than when it started: `figure` (its count of free
    /// bytes, or the largest block it serves) fell from `before` to `after`.
    CapacityLeak {
        figure: &'static str,
        before: usize,
        after: usize,
    },
    /// The allocator's own count of bytes in use
    /// ([`crate::allocator::Allocator::bytes_in_use`]) is higher once a
    /// program has freed everything than when it started: a free it lost.
    KeptBytes { before: usize, after: usize },
    /// Between programs of a fuzzing `diff_mimalloc` process, after both
    /// sides gave back what they hold free, the reference holds `held`
    /// bytes resident of what it mapped, a quarter or more of the
    /// process's RSS limit (`limit`): memory it keeps, which would end
    /// the process as an `oom` of the allocator under test
    /// (`diff/held.rs`).
    Held { held: u64, limit: u64 },
    /// The allocator's own walk of its blocks in use
    /// ([`crate::allocator::Allocator::blocks_in_use`]) lists `blocks` it
    /// did not when the program started, once the program has freed
    /// everything, the first at `ptr`, `size` bytes: frees it kept.
    KeptBlock {
        ptr: usize,
        size: usize,
        blocks: usize,
    },
    /// A live block, at `ptr` of `size` bytes, that no block of the
    /// allocator's own walk of its blocks in use holds, after an op: it
    /// counts free, or has lost, a block it handed out (the walk listed
    /// `listed` blocks).
    UnlistedBlock {
        ptr: usize,
        size: usize,
        listed: usize,
    },
    /// A forced purge with no delay left `bytes` of whole free pages
    /// resident, by the allocator's own count
    /// ([`crate::allocator::Extras::free_pages_kept`]): memory it was
    /// asked to give back and kept.
    PurgeKept { bytes: usize },
    /// A block the harness gave back to the allocator (`call`: a free, a
    /// realloc that moved it) was never freed, and nothing points to it:
    /// LeakSanitizer's leak, keyed by the call that lost it.
    Leak {
        ptr: usize,
        size: usize,
        call: &'static str,
    },
    /// Of `freed` blocks of `size` freed on another thread than their
    /// owner's, `lost` (the first at `ptr`) did not come back (`how`: what
    /// showed it): dropped remote frees. Asked of the allocator's own heap
    /// ([`crate::allocator::Allocator::in_use_after_collect`]) or, where it
    /// promises reuse ([`crate::allocator::Allocator::remote_reuse`]), by
    /// allocating.
    RemoteFreeLost {
        ptr: usize,
        size: usize,
        freed: usize,
        lost: usize,
        how: String,
    },
    /// A child forked while other threads were inside the allocator
    /// failed at its own calls for blocks of `size` (`how`: it hung on a
    /// lock a thread it does not have held at the fork, a block of its
    /// broke, the allocator panicked, a signal ended it). The parent's
    /// heap is as it was.
    Fork { size: usize, how: String },
    /// A heap corruption the allocator promises to stop
    /// ([`crate::allocator::Allocator::stops`]), made on blocks of `size`
    /// in a forked child, was not (`how`: the allocator returned from it,
    /// or handed out the memory a freed block was made to point to). The
    /// parent's heap is as it was.
    Hardening {
        attack: crate::allocator::Attack,
        size: usize,
        how: &'static str,
    },
}

/// The `why` of a usable size larger than the block.
pub const PAST_THE_END: &str = "past the end of the block";

/// A byte an op's calls left wrong ([`Violation::wrong_byte`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct WrongByte {
    pub addr: usize,
    /// What it should hold.
    pub expected: u8,
    /// Whether it held it before the op's calls (a live block's byte), or
    /// only once they put it there (a realloc's copy into its new block).
    pub held_before: bool,
}

impl Violation {
    /// The stable kind name triage keys on.
    pub fn kind(&self) -> &'static str {
        match self {
            Violation::Null { .. } => "null",
            Violation::ImpossibleSuccess { .. } => "impossible-success",
            Violation::CallocOverflow { .. } => "calloc-overflow",
            Violation::Alignment { .. } | Violation::Underaligned { .. } => "alignment",
            Violation::Overlap { .. } => "overlap",
            Violation::UsableSize { .. } => "usable-size",
            Violation::Contents { .. } => "contents",
            Violation::ReleasedLive { .. } => "released-live",
            Violation::ReallocPrefix { .. } => "realloc-prefix",
            Violation::Zeroed { .. } => "zeroed",
            Violation::GoodSize { .. } => "good-size",
            Violation::Realloc { .. } => "realloc",
            Violation::HeapVisit { .. } => "heap-visit",
            Violation::HeapOwned { .. } => "heap-owned",
            Violation::AllocatorError { .. } => "allocator-error",
            Violation::Validator { .. } => "validator",
            Violation::HeapCheck { .. } => "heap-check",
            Violation::Diff { .. } => "diff",
            Violation::Panic { .. } => "panic",
            Violation::CapacityLeak { .. } => "capacity-leak",
            Violation::KeptBytes { .. } => "kept-bytes",
            Violation::Held { .. } => "held",
            Violation::KeptBlock { .. } => "kept-block",
            Violation::UnlistedBlock { .. } => "unlisted-block",
            Violation::PurgeKept { .. } => "purge-kept",
            Violation::RemoteFreeLost { .. } => "remote-free-lost",
            Violation::Fork { .. } => "fork",
            Violation::Hardening { .. } => "hardening",
            Violation::Leak { .. } => "leak",
        }
    }

    /// Whether the heap is still sound after this violation, so a program
    /// that tolerates it can go on with the block: a misaligned block, a
    /// wrong usable size, a dirty zeroed block and a failed request break a
    /// promise but leave every block where it was, as does capacity lost
    /// at a program's end. The rest leave memory in
    /// doubt (two owners of one block, overwritten contents, an allocator
    /// that stopped mid-call) and end the program.
    pub fn leaves_heap_sound(&self) -> bool {
        report::key::SOUND_KINDS.contains(&self.kind())
    }

    /// Whether this violation is of every block the allocator hands out,
    /// not of the call that met it ([`Violation::Underaligned`]): it is
    /// reported at [`Site::any_call`], so its key names no call and no
    /// tier.
    pub fn is_of_every_call(&self) -> bool {
        matches!(self, Violation::Underaligned { .. })
    }

    /// Whether this violation is of what the op's own allocator calls
    /// returned or did (a block, a size, an error callback), so the code
    /// those calls ran is where the bug is: its key is that path
    /// ([`Report::path`]), as are contents the op's calls broke, a heap
    /// the allocator's own check finds broken right after them and a live
    /// block its walk misses then.
    /// Contents broken since an earlier op, a heap walk, a validator, a
    /// comparison with the reference, a panic (its frame names it) and
    /// capacity lost over a whole program are not.
    pub fn is_of_a_call(&self) -> bool {
        matches!(
            self,
            Violation::Null { .. }
                | Violation::ImpossibleSuccess { .. }
                | Violation::CallocOverflow { .. }
                | Violation::Alignment { .. }
                | Violation::Overlap { .. }
                | Violation::UsableSize { .. }
                | Violation::ReallocPrefix { .. }
                | Violation::Zeroed { .. }
                | Violation::GoodSize { .. }
                | Violation::Realloc { .. }
                | Violation::AllocatorError { .. }
                | Violation::Leak { .. }
                | Violation::RemoteFreeLost { .. }
                | Violation::Fork { .. }
                | Violation::HeapCheck { .. }
                | Violation::UnlistedBlock { .. }
                | Violation::Contents { by_call: true, .. }
                | Violation::ReleasedLive { by_call: true, .. }
                | Violation::PurgeKept { .. }
        )
    }

    /// The byte an op's calls left wrong in a block they had handed out,
    /// for a violation that found one: a live block's contents changed by
    /// the calls, or the prefix a realloc's new block lost. The store that
    /// broke it keys it ([`crate::writer`]).
    pub fn wrong_byte(&self) -> Option<WrongByte> {
        match self {
            Violation::Contents {
                ptr,
                mismatch,
                by_call: true,
                ..
            } => Some(WrongByte {
                addr: ptr + mismatch.offset,
                expected: mismatch.expected,
                held_before: true,
            }),
            Violation::ReallocPrefix { new, mismatch, .. } => Some(WrongByte {
                addr: new + mismatch.offset,
                expected: mismatch.expected,
                held_before: false,
            }),
            _ => None,
        }
    }

    /// A value the op's calls answered wrong, which no store put in a
    /// block: a usable size past the block's end (one short of the
    /// request may be where the sanitizer's poison starts, not a value
    /// the allocator gave). The code that computed it keys it
    /// ([`crate::writer::producer_of`]).
    pub fn wrong_value(&self) -> Option<usize> {
        match self {
            Violation::UsableSize { usable, why, .. } if *why == PAST_THE_END => Some(*usable),
            _ => None,
        }
    }

    /// What a call returned that it must not have: a misaligned block, a
    /// block for a request that has to fail, a null for one that has to
    /// succeed. In a C allocator the function that chose it keys it
    /// ([`crate::writer::returner_of`]). A calloc's block for an
    /// overflowing product is not one: the core that chose it served the
    /// size it was given, and the path names the code that multiplied.
    pub fn wrong_answer(&self) -> Option<usize> {
        match self {
            Violation::Alignment { ptr, .. } | Violation::ImpossibleSuccess { ptr, .. } => {
                Some(*ptr)
            }
            Violation::Null { .. } => Some(0),
            _ => None,
        }
    }

    /// Which of the op's allocator code its path is
    /// ([`crate::coverage::op_path`]): for a wrong answer the checks asked
    /// for (a usable size, a good size), the code of those queries alone,
    /// whichever call made the block; for an allocator's error callback,
    /// which a call or a query may have raised, both; else the calls'.
    pub fn path_of(&self) -> crate::coverage::PathOf {
        use crate::coverage::PathOf;
        match self {
            Violation::UsableSize { .. } | Violation::GoodSize { .. } => PathOf::Queries,
            Violation::AllocatorError { .. } => PathOf::Both,
            _ => PathOf::Calls,
        }
    }
}

#[cfg(test)]
mod tests;
