//! Typed violations and the one line each one panics with.
//!
//! The line always starts `allocsoak violation: <kind>: op #<index> `<op>`:`
//! so every engine records it as a crash and triage can key on `<kind>`.
//! [`key_of`] turns the line into the key both the soak's tolerance and
//! triage's signatures use, so the two always agree on what one bug is.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::{Mutex, OnceLock};

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

const MARK: &str = "allocsoak violation: ";

/// Pulls the kind out of a violation line (from a panic message or a log).
pub fn kind_of(line: &str) -> Option<&str> {
    let rest = &line[line.find(MARK)? + MARK.len()..];
    rest.split(':').next()
}

/// The key of a violation line: `<kind> in <op family>: <message>`, with
/// every number in the message replaced by `N` and the allocator suffix
/// dropped. The op family is the op's name with its `worker-`/`heap-`
/// variant folded in (`heap-alloc` and `worker-alloc` are `alloc`), so one
/// bug reached through two targets has one key, while two bugs of one kind
/// that break different ops or say different things have two.
pub fn key_of(line: &str) -> Option<String> {
    let rest = &line[line.find(MARK)? + MARK.len()..];
    let (kind, rest) = rest.split_once(": ")?;
    let (family, message) = match rest.strip_prefix("op #") {
        Some(r) => {
            let (_, r) = r.split_once(" `")?;
            let (op, message) = r.split_once("`: ")?;
            let name = op.split_whitespace().next().unwrap_or("");
            let name = name.strip_prefix("worker-").unwrap_or(name);
            let name = if name == "heap-alloc" { "alloc" } else { name };
            // `end of program` has no op.
            (if op == "end of program" { "end" } else { name }, message)
        }
        None => ("?", rest),
    };
    let message = match message.rfind(" [allocator ") {
        Some(i) => &message[..i],
        None => message,
    };
    Some(format!(
        "{kind} in {family}: {}",
        numbers_to_n(message.trim())
    ))
}

/// Replaces each run of digits (and a `0x` hex literal) with `N`.
pub fn numbers_to_n(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars().peekable();
    while let Some(c) = chars.next() {
        if c.is_ascii_digit() {
            if c == '0' && chars.peek() == Some(&'x') {
                chars.next();
                while chars.next_if(|c| c.is_ascii_hexdigit()).is_some() {}
            } else {
                while chars.next_if(|c| c.is_ascii_digit()).is_some() {}
            }
            out.push('N');
        } else {
            out.push(c);
        }
    }
    out
}

/// The violation keys this process tolerates: read once from the file
/// `ALLOCSOAK_TOLERATE` names (one key per line), empty when unset. The
/// soak writes it with the keys of the groups it has filed, so a known bug
/// no longer ends the run and the fuzzer gets past it.
fn tolerated() -> &'static HashSet<String> {
    static KEYS: OnceLock<HashSet<String>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let Some(path) = std::env::var_os("ALLOCSOAK_TOLERATE") else {
            return HashSet::new();
        };
        match std::fs::read_to_string(&path) {
            Ok(text) => text
                .lines()
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect(),
            Err(e) => {
                eprintln!(
                    "allocsoak: ALLOCSOAK_TOLERATE={}: {e}",
                    path.to_string_lossy()
                );
                std::process::exit(2)
            }
        }
    })
}

/// The payload a tolerated violation unwinds with; [`crate::harness`]
/// catches it and the program ends there.
pub struct Tolerated;

thread_local! {
    static TOLERATING: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is unwinding from a tolerated violation (executors
/// then release their blocks as they drop).
pub fn tolerating() -> bool {
    TOLERATING.with(Cell::get)
}

/// Ends the program at a violation: panics with its line, or, when the
/// line's key is tolerated, counts it (printed at each power of two as
/// `allocsoak tolerated: <count> × <key>`) and unwinds quietly with
/// [`Tolerated`], which skips the panic hook an engine aborts in.
pub fn raise(line: String) -> ! {
    if !tolerated().is_empty() {
        if let Some(key) = key_of(&line).filter(|k| tolerated().contains(k)) {
            static COUNTS: Mutex<Option<HashMap<String, u64>>> = Mutex::new(None);
            let mut counts = COUNTS.lock().unwrap_or_else(|e| e.into_inner());
            let n = counts
                .get_or_insert_with(HashMap::new)
                .entry(key)
                .or_insert(0);
            *n += 1;
            if n.is_power_of_two() {
                eprintln!("allocsoak tolerated: {n} × {}", key_of(&line).unwrap());
            }
            drop(counts);
            TOLERATING.with(|t| t.set(true));
            std::panic::resume_unwind(Box::new(Tolerated));
        }
    }
    panic!("{line}")
}

/// Catches a tolerated violation's unwind out of `f`; any other panic goes on.
pub fn tolerate(f: impl FnOnce()) {
    if tolerated().is_empty() {
        return f();
    }
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    TOLERATING.with(|t| t.set(false));
    if let Err(payload) = result {
        if !payload.is::<Tolerated>() {
            std::panic::resume_unwind(payload);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_drop_numbers_and_the_allocator_and_fold_op_variants() {
        let a = "allocsoak violation: alignment: op #3 `alloc size=41 align=64`: block 0x7f10 (size 41) is not aligned to 64 [allocator zoo:small-underalign]";
        let b = "thread 'x' panicked: allocsoak violation: alignment: op #9 `heap-alloc heap=1 size=7 align=32`: block 0x2a0 (size 7) is not aligned to 32 [allocator zoo:small-underalign]";
        let c = "allocsoak violation: alignment: op #9 `worker-alloc worker=1 size=7 align=32`: block 0x2a0 (size 7) is not aligned to 32";
        let want = "alignment in alloc: block N (size N) is not aligned to N";
        assert_eq!(key_of(a).as_deref(), Some(want));
        assert_eq!(key_of(b).as_deref(), Some(want));
        assert_eq!(key_of(c).as_deref(), Some(want));
        let realloc = "allocsoak violation: alignment: op #1 `realloc slot=0 to=double`: block 0x10 (size 8) is not aligned to 16";
        assert_ne!(key_of(realloc).as_deref(), Some(want));
        let end = "allocsoak violation: validator: op #12 `end of program`: heap corrupt at 0x10";
        assert_eq!(
            key_of(end).as_deref(),
            Some("validator in end: heap corrupt at N")
        );
        assert_eq!(key_of("no violation here"), None);
    }

    #[test]
    fn different_messages_of_one_kind_keep_different_keys() {
        let a = "allocsoak violation: allocator-error: op #1 `free slot=0`: mimalloc: error: double free detected of block 0x10";
        let b = "allocsoak violation: allocator-error: op #1 `free slot=0`: mimalloc: error: pointer not in heap 0x10";
        assert_ne!(key_of(a), key_of(b));
    }
}
