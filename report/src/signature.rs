//! Crash signatures: which bug a crash log shows, as a key that every crash
//! of that bug shares.
//!
//! A log is the stderr of a libFuzzer run, or of a replay of one input
//! (`binary input`). [`Signature::from_log`] reads its first finding in four
//! named steps: `finding` (what the log reports, and where), `first_stack`
//! (the crash stack after it), `top_frames` (the frames that can be the bug)
//! and a message per class ([`key::key_of`], `sanitizer_message`,
//! `leak_message`, `assertion_message`, `crash_message`).

use std::fmt;

use sha2::{Digest, Sha256};

use crate::frame::Frame;
use crate::key;
use crate::parse::{
    assertion_message, crash_message, finding, first_stack, leak_message, sanitizer_message,
    top_frames, Class,
};
use crate::record::Record;

/// The identity of a crash: two logs with equal signatures show one bug.
///
/// # The dedup rule
///
/// A signature is a kind, the allocator, a normalized message and its
/// frames (one of a stack; a violation's code path), and two crashes are one group when all four are equal
/// (when their [`key`](Signature::key)s are). A group belongs to one
/// allocator: the same symptom in two allocators (one planted bug in two
/// bases, one crate declared under two names) is two groups, each with its
/// own slot and repro command. The allocator is the slot's, or, for a
/// violation the reference side of `diff_mimalloc` raised, the reference's
/// (its bug is one group whichever slot compared against it). What goes
/// into the other parts depends on what the log reports first (the
/// precedence of [`kind`]):
///
/// - **Violation of a call's result, with its path** (a replay's record
///   whose `path` a probe filled: `shadow::coverage`): the kind, the
///   message without the site (`alignment: block N (size N) is not aligned
///   to N`) and, as frames, the allocator's own functions the failing op's
///   calls ran, sorted ([`Signature::path`] is set). Like a stack keys a
///   crash, that path keys the bug: one path reached through `alloc` and
///   `alloc-zeroed`, in every size tier and every target, is one group, and
///   two bugs of one kind in two functions are two. The pipeline also
///   joins a path to a group of the same kind whose path contains it or is
///   contained in it ([`Signature::same_path`]): an entry point that wraps
///   another (`calloc` over `alloc`, `realloc` that allocates), or a
///   first call that also set the allocator up.
/// - **Violation** (`allocsoak violation: <kind>: op #N ...`): the kind and
///   the shadow's key, [`key::key_of`] (`<kind> in <op family>:
///   <message with numbers as N>`); no frames. The line already names the
///   check and the op, and frames would split one bug reached through two
///   targets (`alloc` in `alloc_ops` and `worker-alloc` in `mt_ops` run
///   different harness code). The harness tolerates known bugs by that same
///   key, so a filed group and a tolerated bug are one thing.
/// - **Sanitizer error** (`ERROR: AddressSanitizer: <type>`): the error type
///   (the SUMMARY line's, which is `double-free` where the ERROR line says
///   `attempting double-free`) and the access (`heap-use-after-free READ`),
///   and the top frame of the first stack. Sizes and addresses never count.
/// - **Leak** (`ERROR: LeakSanitizer`): whether the first leak is direct, and
///   the top frame of its allocation stack below `malloc` and friends, the
///   Rust allocation shims and the harness: the allocator's code that got
///   the memory it lost.
/// - **Assertion** (mimalloc's `assertion failed` or C's `Assertion ... failed`):
///   the expression and the asserting function, numbers as N (two different
///   assertions never share a group), and the top frame.
/// - **Crash** (a Rust panic, or another deadly signal): the panic message
///   with numbers as N (`deadly signal` without one), and the top frame.
/// - **Timeout and out-of-memory**: the kind and the slot
///   (`target/allocator`); no frames. A slow or hungry input has no crash
///   site, so each slot has one group per kind.
///
/// The top frame is the first of the stack (as a syzkaller title names one
/// function: its callers in the allocator are the entry points that led
/// there, and would split one bug into a group per entry point), after
/// dropping frames that are never the bug: below the first frame, allocsoak's harness
/// (`shadow` but the zoo, the fuzz targets, a config's glue: which check
/// or op met the bug is the harness's business, and would split one bug
/// into a group per caller; for a leak, from the first frame on); Rust's std, core, alloc and panic machinery
/// (by name or by a file under `library/{std,core,alloc}/src`), libFuzzer
/// and libfuzzer-sys, the sanitizer runtime (by name or by a compiler-rt
/// file), libc's abort, signal and thread-start path, assertion reporters
/// (`__assert_fail`, `_mi_assert_fail`), the shadow's byte-pattern reader
/// (`shadow/src/pattern.rs`: it reads every block, so a fault there says
/// only that a block was broken; the caller says which check found it),
/// inlined closures' bare names (`{closure#3}`), and unsymbolized frames
/// (`(binary+0x...)`). Function names lose Rust's hash suffix and generic
/// arguments (`call<...>` names its caller's closure type) and `<Type>::f`
/// reads `Type::f`; consecutive repeats count once; files, lines and
/// columns never count.
///
/// # What is deterministic
///
/// [`from_log`](Signature::from_log) is a pure function of the log text and
/// the slot, so [`key`](Signature::key) and [`id`](Signature::id) are the
/// same on every machine and in every run. Two logs of one input agree when
/// they name the same things: a violation's signature depends only on the
/// violation line, so it holds across runs, rebuilds and targets. A
/// frame-based one depends on symbolization and inlining: it holds across
/// runs of one build and across rebuilds that keep inlining, and a change of
/// inlining or of closure numbering can split a group. Which finding a log
/// shows first is up to the input and, with threads, up to scheduling.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Signature {
    /// The finding's kind, as [`kind`] returns it.
    pub kind: String,
    /// The allocator the finding belongs to.
    pub allocator: String,
    /// The top frames, normalized function names; empty for violations,
    /// timeouts and out-of-memory.
    pub frames: Vec<String>,
    /// The normalized message: the shadow key for a violation, the slot for
    /// a timeout or out-of-memory.
    pub message: String,
    /// The frames are a violation's code path (the allocator functions the
    /// failing op ran, a sorted set), not a stack.
    pub path: bool,
}

impl Signature {
    /// The signature of the first finding in `log`, or `None` when the log
    /// reports nothing ([`kind`] is `None` exactly then). `slot` is
    /// `target/allocator`: its allocator is the signature's (but for a
    /// reference's violation), and the whole slot is the message of a
    /// timeout or out-of-memory.
    pub fn from_log(log: &str, slot: &str) -> Option<Signature> {
        let lines: Vec<&str> = log.lines().collect();
        let (at, class, kind) = finding(&lines)?;
        let after = &lines[at..];
        let allocator = match class {
            Class::Violation => key::reference_of(after[0]),
            _ => None,
        }
        .unwrap_or_else(|| slot_allocator(slot))
        .to_string();
        let (message, frames) = match class {
            Class::Violation => {
                // A line without `: ` after the kind has no key; keep it whole.
                let key =
                    key::key_of(after[0]).unwrap_or_else(|| key::numbers_to_n(after[0].trim()));
                (key, Vec::new())
            }
            Class::Engine => (slot.to_string(), Vec::new()),
            Class::Sanitizer => (sanitizer_message(&kind, after), top_frames(after, false)),
            Class::Leak => (leak_message(after), top_frames(after, true)),
            Class::Assertion => (assertion_message(after), top_frames(after, false)),
            Class::Crash => (crash_message(after), top_frames(after, false)),
        };
        Some(Signature {
            kind,
            allocator,
            frames,
            message,
            path: false,
        })
    }

    /// The signature of a violation the harness recorded: with its code
    /// path when the record has one (kind, allocator, the key without the
    /// site, the path as frames), else its kind, its allocator and its key,
    /// no frames: the same signature [`from_log`](Signature::from_log)
    /// reads from the record's line.
    pub fn from_record(record: &Record) -> Signature {
        let path = !record.path.is_empty() && !record.what.is_empty();
        Signature {
            kind: record.kind.clone(),
            allocator: record.allocator.clone(),
            frames: if path {
                record.path.clone()
            } else {
                Vec::new()
            },
            message: if path {
                record.what.clone()
            } else {
                record.key.clone()
            },
            path,
        }
    }

    /// Whether two code-path signatures show one bug: one kind, one
    /// allocator, and one path containing the other (an entry point that
    /// wraps another, a call that also set the allocator up, runs every
    /// function of the plain one and more). The message does not count: a
    /// usable size below the request and one past the block's end, from
    /// the same code, are one wrong answer.
    pub fn same_path(&self, other: &Signature) -> bool {
        let contains = |a: &[String], b: &[String]| b.iter().all(|f| a.binary_search(f).is_ok());
        self.path
            && other.path
            && self.kind == other.kind
            && self.allocator == other.allocator
            && (contains(&self.frames, &other.frames) || contains(&other.frames, &self.frames))
    }

    /// The full identity: the kind, the allocator, the message and each
    /// frame, one per line, in that order. Equal keys are one group.
    pub fn key(&self) -> String {
        let mut key = format!("{}\n{}\n{}", self.kind, self.allocator, self.message);
        for frame in &self.frames {
            key.push('\n');
            key.push_str(frame);
        }
        key
    }

    /// The signature [`key`](Signature::key) was made of (`path` says
    /// whether its frames are a code path); `None` for a text with fewer
    /// than three lines. The store keeps a group's key; this reads it back.
    pub fn from_key(key: &str, path: bool) -> Option<Signature> {
        let mut lines = key.split('\n');
        Some(Signature {
            kind: lines.next()?.to_string(),
            allocator: lines.next()?.to_string(),
            message: lines.next()?.to_string(),
            frames: lines.map(str::to_string).collect(),
            path,
        })
    }

    /// Whether `other` shows the bug this signature does: one key, or one
    /// code path containing the other ([`same_path`](Signature::same_path)).
    pub fn same_bug(&self, other: &Signature) -> bool {
        self.key() == other.key() || self.same_path(other)
    }

    /// The group's id: the first 16 hex digits of the SHA-256 of
    /// [`key`](Signature::key); its folder is `crashes/<id>/`.
    pub fn id(&self) -> String {
        let digest = Sha256::digest(self.key().as_bytes());
        digest[..8].iter().map(|b| format!("{b:02x}")).collect()
    }

    /// One line for people: `heap-use-after-free READ in verify <
    /// shadow::executor::Executor::free_block < ...`, a violation's key, or
    /// `timeout in alloc_ops/system`.
    pub fn title(&self) -> String {
        if self.path {
            // The functions' own names, sorted (REPORT.md lists them whole).
            const SHOWN: usize = 6;
            let mut names: Vec<&str> = self.frames.iter().map(|f| own_name(f)).collect();
            names.sort_unstable();
            names.dedup();
            let mut title = format!(
                "{} in {}",
                self.message,
                names[..names.len().min(SHOWN)].join(", ")
            );
            if names.len() > SHOWN {
                title.push_str(&format!(" and {} more", names.len() - SHOWN));
            }
            return title;
        }
        if self.is_engine() {
            format!("{} in {}", self.kind, self.message)
        } else if self.frames.is_empty() {
            self.message.clone()
        } else {
            format!("{} in {}", self.message, self.frames.join(" < "))
        }
    }

    /// For a violation, the shadow's key: what `ALLOCSOAK_TOLERATE` lists
    /// to let the harness run past this bug. `None` for any other finding.
    ///
    /// A violation is told by its parts: no frames, and a message that is a
    /// shadow key, `<kind> in ...` (`panic: ...` for a panic inside the
    /// allocator); no other finding's message starts so.
    pub fn violation_key(&self) -> Option<&str> {
        let key = self.message.as_str();
        let is_key = key.strip_prefix(self.kind.as_str()).is_some_and(|rest| {
            rest.starts_with(" in ") || (self.kind == "panic" && rest.starts_with(": "))
        });
        (self.frames.is_empty() && is_key && !self.is_engine()).then_some(key)
    }

    /// What `ALLOCSOAK_TOLERATE` lists to get past this finding: the
    /// violation key for a violation, `asan: <title>` for a sanitizer
    /// report (the harness signs each report it sees the same way); `None`
    /// for a leak, an assertion, a crash, a timeout or out-of-memory, which
    /// no harness gets past, and for a deadly signal ([`DEADLY`]): ASan
    /// ends the process after one, tolerated or not.
    pub fn tolerance_key(&self) -> Option<String> {
        if self.path {
            // Its variants' keys, which the record has and the pipeline
            // keeps with the group.
            return None;
        }
        if let Some(key) = self.violation_key() {
            return Some(key.to_string());
        }
        let sanitizer = !matches!(
            self.kind.as_str(),
            "leak" | "assertion" | "crash" | "timeout" | "oom"
        ) && !DEADLY.contains(&self.kind.as_str())
            && self.message.starts_with(self.kind.as_str());
        sanitizer.then(|| format!("asan: {}", self.title()))
    }

    /// A timeout, out-of-memory or RSS drift: its message is the slot.
    fn is_engine(&self) -> bool {
        self.frames.is_empty() && matches!(self.kind.as_str(), "timeout" | "oom" | "rss-drift")
    }

    /// The signature of retained memory that grows with ops in the drift
    /// series `series` (`target/allocator`): one group per series, whatever
    /// the programs that drive it.
    pub fn rss_drift(series: &str) -> Signature {
        Signature {
            kind: "rss-drift".into(),
            allocator: slot_allocator(series).to_string(),
            frames: Vec::new(),
            message: series.to_string(),
            path: false,
        }
    }
}

/// A function's own name: the last segment of its path outside any
/// generic arguments (`<port::Heap as core::alloc::GlobalAlloc>::alloc`
/// is `alloc`), with the one before it for a closure or shim
/// (`alloc::{closure#0}`).
fn own_name(function: &str) -> &str {
    let mut depth = 0i32;
    let mut cuts = Vec::new();
    let bytes = function.as_bytes();
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'<' => depth += 1,
            b'>' => depth -= 1,
            b':' if depth == 0 && bytes.get(i + 1) == Some(&b':') => cuts.push(i + 2),
            _ => {}
        }
    }
    let mut start = cuts.last().copied().unwrap_or(0);
    if function[start..].starts_with('{') && cuts.len() >= 2 {
        start = cuts[cuts.len() - 2];
    }
    &function[start..]
}

/// The allocator of a slot, `target/allocator` (the whole text without a
/// `/`); the allocator's name may hold `/` itself (`dylib:/abs/lib.so:p_`).
fn slot_allocator(slot: &str) -> &str {
    slot.split_once('/')
        .map_or(slot, |(_, allocator)| allocator)
}

/// The sanitizer error types of a deadly signal (`ERROR: AddressSanitizer:
/// SEGV on unknown address`): ASan reports it from its signal handler and
/// then ends the process whatever the report callback does, so such a
/// report is never tolerated; its group's later crashes are repeats.
pub const DEADLY: [&str; 6] = ["SEGV", "BUS", "FPE", "ILL", "ABRT", "stack-overflow"];

impl fmt::Display for Signature {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.title())
    }
}

/// The kind of the first finding in an engine log: the violation kind
/// (`allocsoak violation: <kind>:`), else the sanitizer's error type
/// (`heap-use-after-free`, `double-free`, `SEGV`; `leak` for
/// LeakSanitizer), else `assertion` when the allocator's
/// own assert fired (mimalloc's or C's), else the engine's (`timeout`,
/// `oom`, `crash`). `None` when the log reports nothing.
///
/// A violation outranks the sanitizer and engine lines it causes (a
/// violation panics, and libFuzzer then reports a deadly signal).
pub fn kind(log: &str) -> Option<String> {
    let lines: Vec<&str> = log.lines().collect();
    finding(&lines).map(|(_, _, kind)| kind)
}

/// The crash stack of a log, every frame of it, for a report: the first
/// sanitizer-format stack after the first finding (the stack of the first
/// leak, of the access, or of the deadly signal a panic causes), or the
/// first in the log when it reports nothing. Empty when there is none; Rust's
/// own `stack backtrace:` is not read.
pub fn stack(log: &str) -> Vec<Frame> {
    let lines: Vec<&str> = log.lines().collect();
    let at = finding(&lines).map_or(0, |(at, _, _)| at);
    first_stack(&lines[at..])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_rss_drift_is_one_group_per_series_and_never_tolerated() {
        let a = Signature::rss_drift("alloc_ops/system");
        assert_eq!(a.title(), "rss-drift in alloc_ops/system");
        assert_eq!(a.tolerance_key(), None);
        assert_eq!(a.id(), Signature::rss_drift("alloc_ops/system").id());
        assert_ne!(a.id(), Signature::rss_drift("heap_api/system").id());
    }

    #[test]
    fn a_group_belongs_to_one_allocator_but_a_reference_bug_to_the_reference() {
        let line = |by: &str| {
            format!("allocsoak violation: alignment: op #0 `alloc size=1 align=16` (alloc size 0..64 align ..16): block 0x18 (size 1) is not aligned to 16 [{by}]\n")
        };
        let system = Signature::from_log(&line("allocator zoo:x"), "alloc_ops/zoo:x").unwrap();
        let jemalloc = Signature::from_log(
            &line("allocator zoo:x@jemalloc"),
            "alloc_ops/zoo:x@jemalloc",
        )
        .unwrap();
        assert_eq!(system.message, jemalloc.message, "one symptom");
        assert_eq!(system.allocator, "zoo:x");
        assert_ne!(system.id(), jemalloc.id(), "two allocators, two groups");
        let reference = line("reference allocator mimalloc");
        let a = Signature::from_log(&reference, "diff_mimalloc/system").unwrap();
        let b = Signature::from_log(&reference, "diff_mimalloc/zoo:x").unwrap();
        assert_eq!(a.allocator, "mimalloc");
        assert_eq!(a.id(), b.id(), "the reference's bug, whoever compared");
        let dylib = Signature::from_log(&line("allocator x"), "alloc_ops/dylib:/a/lib.so:p_");
        assert_eq!(dylib.unwrap().allocator, "dylib:/a/lib.so:p_");
    }

    #[test]
    fn a_record_signs_as_its_line_does() {
        let line = "allocsoak violation: alignment: op #0 `alloc size=1 align=16` (alloc size 0..64 align ..16): block 0x18 (size 1) is not aligned to 16 [allocator zoo:x]";
        let record = Record {
            kind: "alignment".into(),
            key: key::key_of(line).unwrap(),
            allocator: "zoo:x".into(),
            reference: false,
            op_index: 0,
            op: "alloc size=1 align=16".into(),
            site: "alloc size 0..64 align ..16".into(),
            sound: true,
            line: line.into(),
            path: Vec::new(),
            what: String::new(),
        };
        let from_log = Signature::from_log(line, "alloc_ops/zoo:x").unwrap();
        assert_eq!(Signature::from_record(&record), from_log);
        let back = Record::from_json(&record.to_json()).unwrap();
        assert_eq!(back, record);
    }

    #[test]
    fn a_path_keys_the_group_whichever_site_reached_it() {
        let record = |site: &str, path: &[&str]| Record {
            kind: "alignment".into(),
            key: format!("alignment in {site}: block N (size N) is not aligned to N"),
            allocator: "port".into(),
            reference: false,
            op_index: 0,
            op: "alloc size=1 align=64".into(),
            site: site.into(),
            sound: true,
            line: String::new(),
            path: path.iter().map(|f| f.to_string()).collect(),
            what: "alignment: block N (size N) is not aligned to N".into(),
        };
        let alloc = Signature::from_record(&record(
            "alloc size 0..64 align 32..",
            &["port::aligned", "port::alloc"],
        ));
        let zeroed = Signature::from_record(&record(
            "alloc-zeroed size 4K..256K align 32..",
            &["port::aligned", "port::alloc"],
        ));
        assert_eq!(alloc.id(), zeroed.id(), "one path, one group");
        assert_eq!(alloc.tolerance_key(), None, "its variants' keys are");
        assert_eq!(
            alloc.title(),
            "alignment: block N (size N) is not aligned to N in aligned, alloc"
        );
        for (function, own) in [
            ("<port::Heap as core::alloc::GlobalAlloc>::alloc", "alloc"),
            (
                "<shadow::allocator::zoo::Zoo>::align_ignored",
                "align_ignored",
            ),
            ("rlsf::tlsf::Tlsf<u32, u32, 24, 8>::allocate", "allocate"),
            (
                "mi_heap_malloc_zero_aligned_at",
                "mi_heap_malloc_zero_aligned_at",
            ),
            ("<port::Heap>::alloc::{closure#0}", "alloc::{closure#0}"),
        ] {
            assert_eq!(own_name(function), own);
        }
        let wrapped = Signature::from_record(&record(
            "calloc size 0..64 align 32..",
            &["port::aligned", "port::alloc", "port::calloc"],
        ));
        assert_ne!(alloc.id(), wrapped.id());
        assert!(alloc.same_path(&wrapped) && wrapped.same_path(&alloc));
        let other = Signature::from_record(&record(
            "alloc size 0..64 align 32..",
            &["port::alloc", "port::small"],
        ));
        assert!(!alloc.same_path(&other), "two functions, two bugs");
        let mut elsewhere = wrapped.clone();
        elsewhere.allocator = "other".into();
        assert!(!alloc.same_path(&elsewhere), "two allocators, two groups");
        assert!(alloc.same_bug(&wrapped) && alloc.same_bug(&alloc));
        assert_eq!(Signature::from_key(&wrapped.key(), true), Some(wrapped));
        let no_path = Signature::from_record(&record("alloc size 0..64 align 32..", &[]));
        assert!(!no_path.path && no_path.violation_key().is_some());
        assert!(!no_path.same_path(&no_path));
    }

    #[test]
    fn a_deadly_signal_is_never_tolerated() {
        let log = "AddressSanitizer:DEADLYSIGNAL\n\
                   ==1==ERROR: AddressSanitizer: SEGV on unknown address 0x0001f0 (pc 0x55 bp 0x7f sp 0x7f T0)\n\
                   ==1==The signal is caused by a WRITE memory access.\n\
                   \x20   #0 0x55 in shadow::allocator::zoo::Zoo::class_of /w/shadow/src/allocator/zoo/mod.rs:180:9\n\
                   SUMMARY: AddressSanitizer: SEGV /w/shadow/src/allocator/zoo/mod.rs:180:9 in class_of\n";
        let sig = Signature::from_log(log, "").unwrap();
        assert_eq!(sig.kind, "SEGV");
        assert_eq!(sig.tolerance_key(), None, "{}", sig.title());
        let uaf = "==9==ERROR: AddressSanitizer: heap-use-after-free on address 0x7b at pc 0x55\n\
                   \x20   #0 0x55 in f /w/a.c:1:1\n";
        assert!(Signature::from_log(uaf, "")
            .unwrap()
            .tolerance_key()
            .is_some());
    }

    #[test]
    fn violation_outranks_the_signal_it_causes() {
        let log = "thread '<unnamed>' panicked at shadow/src/executor.rs:1:1:\n\
                   allocsoak violation: overlap: op #3 `alloc size=41 align=4`: block 0x10+41 overlaps live block 0x10+41\n\
                   ==1== ERROR: libFuzzer: deadly signal\n";
        assert_eq!(kind(log).as_deref(), Some("overlap"));
    }

    #[test]
    fn sanitizer_and_engine_errors_have_kinds() {
        let uaf = "==9==ERROR: AddressSanitizer: heap-use-after-free on address 0x7b at pc 0x55\n";
        assert_eq!(kind(uaf).as_deref(), Some("heap-use-after-free"));
        assert_eq!(
            kind("==9==ERROR: LeakSanitizer: detected memory leaks\n").as_deref(),
            Some("leak")
        );
        assert_eq!(
            kind("==9== ERROR: libFuzzer: timeout after 25 seconds\n").as_deref(),
            Some("timeout")
        );
        assert_eq!(
            kind("==9== ERROR: libFuzzer: out-of-memory (used: 2100Mb)\n").as_deref(),
            Some("oom")
        );
        assert_eq!(
            kind("#1000 DONE cov: 10 ft: 20\nDone 1000 runs in 1 second(s)\n"),
            None
        );
    }

    #[test]
    fn an_allocator_assert_outranks_the_abort_it_causes() {
        let mimalloc = "mimalloc: assertion failed: at \"internal.h\":698, mi_page_set_in_full\n\
                        ==7== ERROR: libFuzzer: deadly signal\n";
        assert_eq!(kind(mimalloc).as_deref(), Some("assertion"));
        let c = "alloc_ops: arena.c:12: arena_free: Assertion `p != NULL' failed.\n";
        assert_eq!(kind(c).as_deref(), Some("assertion"));
    }

    #[test]
    fn the_summary_names_the_sanitizer_error_when_the_first_line_does_not() {
        let log = "==1==ERROR: AddressSanitizer: attempting double-free on 0x6020 in thread T0:\n\
                   \x20   #0 0x55 in free /rustc/llvm/src/llvm-project/compiler-rt/lib/asan/asan_malloc_linux.cpp:51:3\n\
                   \x20   #1 0x55 in arena_free /src/arena.c:40:5\n\
                   SUMMARY: AddressSanitizer: double-free /src/arena.c:40:5 in arena_free\n";
        assert_eq!(kind(log).as_deref(), Some("double-free"));
        let sig = Signature::from_log(log, "alloc_ops/arena").unwrap();
        assert_eq!(sig.title(), "double-free in arena_free");
    }

    // C's assert format, written here by hand: no bundled allocator uses
    // `assert.h` (the golden logs hold mimalloc's real one).
    #[test]
    fn a_c_assertion_keys_on_its_expression_and_function() {
        let log = "alloc_ops: arena.c:12: arena_free: Assertion `p->size == 16' failed.\n\
                   ==7== ERROR: libFuzzer: deadly signal\n\
                   \x20   #0 0x7f in abort stdlib/./stdlib/abort.c:79:7\n\
                   \x20   #1 0x7f in __assert_fail assert/assert.c:101:3\n\
                   \x20   #2 0x55 in arena_free /src/arena.c:12:5\n";
        let sig = Signature::from_log(log, "alloc_ops/arena").unwrap();
        assert_eq!(sig.message, "assertion `p->size == N` (arena_free)");
        assert_eq!(sig.frames, ["arena_free"]);
        let other = log.replace("p->size == 16", "p->next != NULL");
        assert_ne!(
            Signature::from_log(&other, "alloc_ops/arena").unwrap().id(),
            sig.id()
        );
    }

    // A Rust panic that is not a violation, written here by hand from the
    // lines a real one prints (no zoo bug panics outside the shadow's checks).
    #[test]
    fn a_panic_keys_on_its_message_and_the_frames_below_the_panic_machinery() {
        let log = "thread '<unnamed>' (3029) panicked at /work/main/shadow/src/model.rs:88:14:\n\
                   index out of bounds: the len is 3 but the index is 7\n\
                   ==3029== ERROR: libFuzzer: deadly signal\n\
                   \x20   #0 0x55 in __sanitizer_print_stack_trace /rustc/llvm/src/llvm-project/compiler-rt/lib/asan/asan_stack.cpp:87:3\n\
                   \x20   #1 0x55 in fuzzer::PrintStackTrace() /x/libfuzzer-sys-0.4.13/libfuzzer/FuzzerUtil.cpp:210:38\n\
                   \x20   #2 0x7f  (/lib/x86_64-linux-gnu/libc.so.6+0x3c04f) (BuildId: 93ac)\n\
                   \x20   #3 0x7f in abort stdlib/./stdlib/abort.c:79:7\n\
                   \x20   #4 0x55 in core::panicking::panic_bounds_check /rustc/e50a/library/core/src/panicking.rs:280:5\n\
                   \x20   #5 0x55 in <shadow::model::ShadowHeap>::remove::h0123456789abcdef /work/main/shadow/src/model.rs:88:14\n\
                   \x20   #6 0x55 in {closure#0} /work/main/shadow/src/executor.rs:380:23\n\
                   \x20   #7 0x55 in free_block /work/main/shadow/src/executor.rs:379:22\n\
                   \x20   #8 0x55 in free_block /work/main/shadow/src/executor.rs:379:22\n\
                   \x20   #9 0x55 in <shadow::executor::Executor>::step /work/main/shadow/src/executor.rs:152:28\n";
        let sig = Signature::from_log(log, "alloc_ops/system").unwrap();
        assert_eq!(sig.kind, "crash");
        assert_eq!(
            sig.message,
            "panic: index out of bounds: the len is N but the index is N"
        );
        // The harness's own callers below the first frame are noise.
        assert_eq!(sig.frames, ["shadow::model::ShadowHeap::remove"]);
        assert_eq!(sig.violation_key(), None);
        assert_eq!(stack(log).len(), 10);
    }

    #[test]
    fn a_panic_inside_the_allocator_is_a_tolerable_violation() {
        let log = "thread '<unnamed>' panicked at shadow/src/executor.rs:140:9:\n\
                   allocsoak violation: panic: op #1 `alloc size=2500 align=8` (alloc size 65..4K align ..16): allocator panicked: index out of bounds: the len is 40 but the index is 43 @ shadow/src/allocator/zoo.rs:322 [allocator zoo:panic-class]\n\
                   ==1== ERROR: libFuzzer: deadly signal\n";
        let sig = Signature::from_log(log, "alloc_ops/zoo:panic-class").unwrap();
        assert_eq!(sig.kind, "panic");
        assert_eq!(
            sig.violation_key(),
            Some("panic: allocator panicked: index out of bounds: the len is N but the index is N @ shadow/src/allocator/zoo.rs:322")
        );
    }

    const UAF: &str = "==9==ERROR: AddressSanitizer: heap-use-after-free on address 0x7b at pc 0x55\n\
                       READ of size 8 at 0x7b thread T0\n\
                       \x20   #0 0x55 in mi_free /src/mimalloc/free.c:40:5\n\
                       \x20   #1 0x55 in <shadow::executor::Executor>::free_block /work/shadow/src/executor.rs:373:18\n\
                       SUMMARY: AddressSanitizer: heap-use-after-free /src/mimalloc/free.c:40:5 in mi_free\n";

    /// One bug the harness's checks meet through two callers, and one leak
    /// the allocator made through two harness calls: one signature each.
    #[test]
    fn the_harness_below_the_first_frame_never_splits_a_group() {
        let uaf = |caller: &str| {
            format!(
                "==9==ERROR: AddressSanitizer: heap-use-after-free on address 0x7b at pc 0x55
                 READ of size 8 at 0x7b thread T0
                 \x20   #0 0x55 in verify /work/shadow/src/executor/blocks.rs:209:13
                 \x20   #1 0x55 in {caller} /work/shadow/src/executor/race.rs:90:5
                 \x20   #2 0x55 in shadow::executor::Executor::finish /work/shadow/src/executor/mod.rs:349:9
"
            )
        };
        let (a, b) = (
            Signature::from_log(
                &uaf("shadow::executor::Executor::free_block"),
                "mt_ops/zoo:x",
            )
            .unwrap(),
            Signature::from_log(&uaf("remote_free_race"), "mt_ops/zoo:x").unwrap(),
        );
        assert_eq!(
            (a.key(), a.frames.clone()),
            (b.key(), vec!["verify".to_string()])
        );
        let leak = |entry: &str| {
            format!(
                "==9==ERROR: LeakSanitizer: detected memory leaks
Direct leak of 8 byte(s) in 1 object(s) allocated from:
                 \x20   #0 0x55 in malloc asan_malloc_linux.cpp:1:1
                 \x20   #1 0x55 in <shadow::allocator::system::System as shadow::allocator::Allocator>::alloc /work/shadow/src/allocator/system.rs:53:9
                 \x20   #2 0x55 in {entry} /work/shadow/src/allocator/system.rs:60:9
                 \x20   #3 0x55 in alloc_inner /work/shadow/src/allocator/zoo/mod.rs:450:9
                 \x20   #4 0x55 in call /work/shadow/src/guard.rs:81:5
"
            )
        };
        let (a, b) = (
            Signature::from_log(&leak("aligned"), "alloc_ops/zoo:x").unwrap(),
            Signature::from_log(&leak("plain"), "alloc_ops/zoo:x").unwrap(),
        );
        assert_eq!(
            (a.key(), a.frames.clone()),
            (b.key(), vec!["alloc_inner".to_string()])
        );
    }

    #[test]
    fn a_sanitizer_report_is_tolerated_by_its_title_and_nothing_else_is_but_violations() {
        let sig = Signature::from_log(UAF, "alloc_ops/mimalloc").unwrap();
        assert_eq!(
            sig.tolerance_key().as_deref(),
            Some("asan: heap-use-after-free READ in mi_free")
        );
        let leak = "==9==ERROR: LeakSanitizer: detected memory leaks\nDirect leak of 8 byte(s)\n    #0 0x55 in malloc x.c:1:1\n    #1 0x55 in f y.rs:1:1\n";
        assert_eq!(
            Signature::from_log(leak, "s").unwrap().tolerance_key(),
            None
        );
        let timeout = "==9== ERROR: libFuzzer: timeout after 25 seconds\n";
        assert_eq!(
            Signature::from_log(timeout, "s").unwrap().tolerance_key(),
            None
        );
    }
}
