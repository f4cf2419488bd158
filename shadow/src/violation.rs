//! Typed violations and the one line each one panics with.
//!
//! The line always starts `allocsoak violation: <kind>: op #<index> `<op>`:`
//! so every engine records it as a crash and triage can key on `<kind>`.

use std::fmt;

use crate::pattern::Mismatch;

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
    Contents {
        ptr: usize,
        size: usize,
        mismatch: Mismatch,
        when: &'static str,
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
    /// The allocator under test and the reference disagree.
    Diff { detail: String },
}

impl Violation {
    /// The stable kind name triage keys on.
    pub fn kind(&self) -> &'static str {
        match self {
            Violation::Null { .. } => "null",
            Violation::ImpossibleSuccess { .. } => "impossible-success",
            Violation::CallocOverflow { .. } => "calloc-overflow",
            Violation::Alignment { .. } => "alignment",
            Violation::Overlap { .. } => "overlap",
            Violation::UsableSize { .. } => "usable-size",
            Violation::Contents { .. } => "contents",
            Violation::ReallocPrefix { .. } => "realloc-prefix",
            Violation::Zeroed { .. } => "zeroed",
            Violation::Realloc { .. } => "realloc",
            Violation::HeapVisit { .. } => "heap-visit",
            Violation::HeapOwned { .. } => "heap-owned",
            Violation::AllocatorError { .. } => "allocator-error",
            Violation::Validator { .. } => "validator",
            Violation::Diff { .. } => "diff",
        }
    }
}

fn mismatch(m: &Mismatch) -> String {
    format!(
        "offset {} expected {:#04x} found {:#04x}",
        m.offset, m.expected, m.found
    )
}

impl fmt::Display for Violation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
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
            Violation::Contents {
                ptr,
                size,
                mismatch: m,
                when,
            } => {
                write!(
                    f,
                    "block {ptr:#x} size {size} changed {when}: {}",
                    mismatch(m)
                )
            }
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
            Violation::Realloc { ptr, new_size, why } => {
                write!(f, "realloc {ptr:#x} to {new_size}: {why}")
            }
            Violation::HeapVisit { heap, detail } => write!(f, "heap {heap}: {detail}"),
            Violation::HeapOwned { heap, ptr } => {
                write!(f, "heap {heap} disowns live block {ptr:#x}")
            }
            Violation::AllocatorError { detail }
            | Violation::Validator { detail }
            | Violation::Diff { detail } => f.write_str(detail),
        }
    }
}

/// A violation with the op that exposed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Report {
    pub op_index: usize,
    pub op: String,
    pub violation: Violation,
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "allocsoak violation: {}: op #{} `{}`: {}",
            self.violation.kind(),
            self.op_index,
            self.op,
            self.violation
        )
    }
}

/// Pulls the kind out of a violation line (from a panic message or a log).
pub fn kind_of(line: &str) -> Option<&str> {
    let rest = &line[line.find("allocsoak violation: ")? + "allocsoak violation: ".len()..];
    rest.split(':').next()
}
