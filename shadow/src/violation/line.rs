//! What broke, as a violation's line says it after its op and
//! [`super::Site`] ([`super::Report`]'s `Display`): each family of
//! violations by its own function (a call's wrong answer, a block's wrong
//! byte, a check's report, memory kept or lost, a forked child's end).

use std::fmt;

use report::key::KEEP;

use super::Violation;
use crate::pattern::Mismatch;

fn mismatch(m: &Mismatch) -> String {
    format!(
        "offset {} expected {:#04x} found {:#04x}",
        m.offset, m.expected, m.found
    )
}

/// What broke, in the words of the violation's family's function.
impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Violation::Null { .. }
            | Violation::ImpossibleSuccess { .. }
            | Violation::CallocOverflow { .. }
            | Violation::Alignment { .. }
            | Violation::Underaligned { .. }
            | Violation::Overlap { .. }
            | Violation::UsableSize { .. }
            | Violation::GoodSize { .. }
            | Violation::Realloc { .. } => answer_line(self, f),
            Violation::Contents { .. }
            | Violation::ReleasedLive { .. }
            | Violation::ReallocPrefix { .. }
            | Violation::Zeroed { .. } => bytes_line(self, f),
            Violation::HeapVisit { .. }
            | Violation::HeapOwned { .. }
            | Violation::AllocatorError { .. }
            | Violation::Validator { .. }
            | Violation::HeapCheck { .. }
            | Violation::Diff { .. }
            | Violation::Panic { .. } => check_line(self, f),
            Violation::CapacityLeak { .. }
            | Violation::KeptBytes { .. }
            | Violation::Held { .. }
            | Violation::KeptBlock { .. }
            | Violation::UnlistedBlock { .. }
            | Violation::PurgeKept { .. }
            | Violation::RemoteFreeLost { .. }
            | Violation::Leak { .. } => kept_line(self, f),
            Violation::Fork { .. } | Violation::Hardening { .. } => child_line(self, f),
        }
    }
}

/// Writes what a call answered wrong (a block, a null, a size); `v` is
/// one of those violations.
fn answer_line(v: &Violation, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match v {
        Violation::Null { size, align } => write!(f, "null for size {size} align {align}"),
        Violation::ImpossibleSuccess { size, align, ptr } => {
            write!(f, "size {size} align {align} must fail, got block {ptr:#x}")
        }
        Violation::CallocOverflow { count, size, ptr } => {
            write!(
                f,
                "count {count} * size {size} overflows, got block {ptr:#x}"
            )
        }
        Violation::Alignment { ptr, size, align } => {
            write!(f, "block {ptr:#x} (size {size}) is not aligned to {align}")
        }
        Violation::Underaligned {
            ptr,
            size,
            align,
            natural,
        } => {
            write!(
                f,
                "block {ptr:#x} (size {size}) is not aligned to {align}, as no plain block is: all{KEEP}{natural}-aligned"
            )
        }
        Violation::Overlap {
            ptr,
            len,
            other,
            other_len,
        } => write!(
            f,
            "block {ptr:#x}+{len} overlaps live block {other:#x}+{other_len}"
        ),
        Violation::UsableSize {
            ptr,
            size,
            usable,
            why,
        } => {
            write!(f, "block {ptr:#x} size {size} usable {usable}: {why}")
        }
        Violation::GoodSize {
            ptr,
            size,
            good,
            usable,
        } => write!(
            f,
            "block {ptr:#x} size {size} usable {usable}, but good size {good}"
        ),
        Violation::Realloc { ptr, new_size, why } => {
            write!(f, "realloc {ptr:#x} to {new_size}: {why}")
        }
        _ => unreachable!("`Violation`'s `fmt` hands answer_line only its family"),
    }
}

/// Writes which byte of a block read wrong, and when; `v` is one of those
/// violations.
fn bytes_line(v: &Violation, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match v {
        Violation::Contents {
            ptr,
            size,
            mismatch: m,
            when,
            ..
        } => {
            write!(
                f,
                "block {ptr:#x} size {size} changed {when}: {}",
                mismatch(m)
            )
        }
        Violation::ReleasedLive {
            ptr,
            size,
            mismatch: m,
            when,
            ..
        } => write!(
            f,
            "block {ptr:#x} size {size} read wrong once the kernel reclaimed the pages under live blocks {when} (a page released lazily): {}",
            mismatch(m)
        ),
        Violation::ReallocPrefix {
            old,
            new,
            old_size,
            new_size,
            mismatch: m,
        } => write!(
            f,
            "realloc {old:#x}+{old_size} -> {new:#x}+{new_size} lost the prefix: {}",
            mismatch(m)
        ),
        Violation::Zeroed {
            ptr,
            size,
            mismatch: m,
        } => {
            write!(
                f,
                "zeroed block {ptr:#x} size {size} is dirty: {}",
                mismatch(m)
            )
        }
        _ => unreachable!("`Violation`'s `fmt` hands bytes_line only its family"),
    }
}

/// Writes what a heap walk, the allocator's own report or check, the
/// reference or a panic said; `v` is one of those violations.
fn check_line(v: &Violation, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match v {
        Violation::HeapVisit { heap, detail } => write!(f, "heap {heap}: {detail}"),
        Violation::HeapOwned { heap, ptr } => {
            write!(f, "heap {heap} disowns live block {ptr:#x}")
        }
        Violation::AllocatorError { detail }
        | Violation::Validator { detail }
        | Violation::HeapCheck { detail }
        | Violation::Diff { detail } => f.write_str(detail),
        Violation::Panic { message, location } => {
            write!(f, "allocator panicked: {message}{KEEP}{location}")
        }
        _ => unreachable!("`Violation`'s `fmt` hands check_line only its family"),
    }
}

/// Writes the memory the allocator kept or lost; `v` is one of those
/// violations.
fn kept_line(v: &Violation, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match v {
        Violation::CapacityLeak {
            figure,
            before,
            after,
        } => write!(
            f,
            "{figure} {after} after everything was freed, {before} when the program started"
        ),
        Violation::KeptBytes { before, after } => write!(
            f,
            "the allocator counts {after} bytes in use after everything was freed, {before} when the program started"
        ),
        Violation::Held { held, limit } => write!(
            f,
            "between programs, after giving back what it holds free, the reference holds {held} bytes resident of what it mapped, past a quarter of the process's RSS limit of {limit} bytes"
        ),
        Violation::KeptBlock { ptr, size, blocks } => write!(
            f,
            "the allocator's walk lists {blocks} block(s) in use after everything was freed that it did not when the program started, the first at {ptr:#x} ({size} bytes)"
        ),
        Violation::UnlistedBlock { ptr, size, listed } => write!(
            f,
            "live block {ptr:#x} ({size} bytes) is in none of the {listed} block(s) the allocator's walk lists in use"
        ),
        Violation::PurgeKept { bytes } => write!(
            f,
            "the allocator counts {bytes} bytes of free pages still resident after a forced purge with no delay"
        ),
        Violation::RemoteFreeLost {
            ptr,
            size,
            freed,
            lost,
            how,
        } => write!(
            f,
            "{lost} of {freed} blocks of size {size} freed on another thread than their owner's (first {ptr:#x}) {how}"
        ),
        Violation::Leak { ptr, size, call } => write!(
            f,
            "block {ptr:#x} (size {size}) given back to {call} was never freed, and nothing points to it"
        ),
        _ => unreachable!("`Violation`'s `fmt` hands kept_line only its family"),
    }
}

/// Writes what a forked child met; `v` is one of those violations.
fn child_line(v: &Violation, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    match v {
        Violation::Fork { size, how } => write!(
            f,
            "a child forked while other threads were in the allocator {how}, at its own blocks of size {size}"
        ),
        Violation::Hardening { attack, size, how } => {
            write!(f, "{attack} at blocks of size {size}: {how}")
        }
        _ => unreachable!("`Violation`'s `fmt` hands child_line only its family"),
    }
}
