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
    assertion_message, crash_message, finding, first_stack, freed_behind_harness, leak_message,
    sanitizer_alt_titles, sanitizer_message, top_frames, Class,
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
/// violation or a sanitizer report the reference side of `diff_mimalloc`
/// raised, the reference's (its bug is one group whichever slot compared
/// against it; a report says so in the harness's line after it,
/// [`crate::ON_REFERENCE`]). A timeout or a leak cannot tell the sides
/// apart and stays the slot's. What goes
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
///   the shadow's family key, [`key::family_of`] (`<kind> in <call>:
///   <message with numbers as N>`: the key without the size and alignment
///   tiers, which say where the harness's sizes fell, not which code ran);
///   no frames. The line already names the check and the call, and frames
///   would split one bug reached through two targets (`alloc` in
///   `alloc_ops` and `worker-alloc` in `mt_ops` run different harness
///   code). The harness tolerates known bugs by their full keys, the
///   group's variants, as for a path.
/// - **Sanitizer error** (`ERROR: AddressSanitizer: <type>`): the error type
///   (the SUMMARY line's, which is `double-free` where the ERROR line says
///   `attempting double-free`) and the access (`heap-use-after-free READ`),
///   and the top frame of the first stack. Sizes and addresses never count.
///   A use-after-free the harness met reading a block it holds, and a
///   double free or usable-size query of a block the harness holds and
///   gave the call (its report says so), are keyed by where the allocator
///   first freed that block (`heap-use-after-free READ of a block freed in
///   g`): the harness reads, frees and asks about only blocks it holds, so
///   its access says nothing of the bug. A sanitizer error also has
///   alternative titles ([`alt`](Signature::alt)).
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
    /// Alternative titles (syzkaller's `AltTitles`): a crash of the same
    /// allocator that shares one shows the same bug, though its key
    /// differs (`bad-access in f`, `bad-free in f`:
    /// the rules are on the parser's `sanitizer_alt_titles`). Not part of
    /// the key; a group keeps the alternative titles of every crash filed
    /// into it.
    pub alt: Vec<String>,
}

impl Signature {
    /// The signature of the first finding in `log`, or `None` when the log
    /// reports nothing ([`kind`] is `None` exactly then). `slot` is
    /// `target/allocator`: its allocator is the signature's (but for a
    /// finding on the reference side of `diff_mimalloc`, which is the
    /// reference's), and the whole slot is the message of a timeout or
    /// out-of-memory (its target alone for the reference's).
    pub fn from_log(log: &str, slot: &str) -> Option<Signature> {
        let lines: Vec<&str> = log.lines().collect();
        let (at, class, kind) = finding(&lines)?;
        let after = &lines[at..];
        let reference = match class {
            Class::Violation => key::reference_of(after[0]),
            Class::Sanitizer | Class::Assertion | Class::Crash => {
                crate::parse::reference_side(after)
            }
            Class::Engine | Class::Leak => crate::parse::reference_in_stack(&lines, at),
        };
        let allocator = reference
            .unwrap_or_else(|| slot_allocator(slot))
            .to_string();
        let mut alt = Vec::new();
        let (message, frames) = match class {
            Class::Violation => {
                // A line without `: ` after the kind has no key; keep it whole.
                let key =
                    key::family_of(after[0]).unwrap_or_else(|| key::numbers_to_n(after[0].trim()));
                (key, Vec::new())
            }
            // A reference's timeout is the reference's whichever slot met it.
            Class::Engine if reference.is_some() => (slot_target(slot).to_string(), Vec::new()),
            Class::Engine => (slot.to_string(), Vec::new()),
            Class::Sanitizer => {
                let mut message = sanitizer_message(&kind, after);
                let freed = freed_behind_harness(&kind, after);
                let frames = match &freed {
                    Some(f) => {
                        message.push_str(" of a block freed");
                        vec![f.clone()]
                    }
                    None => top_frames(after, false),
                };
                alt = sanitizer_alt_titles(&kind, &frames, freed.is_some(), after);
                (message, frames)
            }
            Class::Leak => (leak_message(after), top_frames(after, true)),
            Class::Assertion => (assertion_message(after), top_frames(after, false)),
            Class::Crash => (crash_message(after), top_frames(after, false)),
        };
        // A report the reference raised says so in its message, as a
        // violation's key does: the store tolerates it in every slot.
        let message = match (class, reference) {
            (Class::Violation, _) | (_, None) => message,
            (_, Some(r)) => format!("{message}{}{r}]", key::REFERENCE),
        };
        Some(Signature {
            kind,
            allocator,
            frames,
            message,
            path: false,
            alt,
        })
    }

    /// The signature of a violation the harness recorded: with its code
    /// path when the record has one (kind, allocator, the key without the
    /// site, the path as frames), else its kind, its allocator and its
    /// family key (the key without the size tiers, [`key::family`]), no
    /// frames: the same signature [`from_log`](Signature::from_log) reads
    /// from the record's line.
    pub fn from_record(record: &Record) -> Signature {
        let path = !record.path.is_empty() && !record.what.is_empty();
        let family = match record.family.is_empty() {
            true => &record.key,
            false => &record.family,
        };
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
                family.clone()
            },
            path,
            alt: Vec::new(),
        }
    }

    /// Whether two code-path signatures show one bug: one kind, one
    /// allocator, and one path containing the other (an entry point that
    /// wraps another, a call that also set the allocator up, runs every
    /// function of the plain one and more). The message does not count: a
    /// usable size below the request and one past the block's end, from
    /// the same code, are one wrong answer.
    pub fn same_path(&self, other: &Signature) -> bool {
        self.contains_path(other) || other.contains_path(self)
    }

    /// Whether this code-path signature runs every function `other` runs,
    /// of one kind (or kind family, [`crate::key::path_family`]) and one
    /// allocator: `other` is the path this one wraps.
    pub fn contains_path(&self, other: &Signature) -> bool {
        self.is_path_kin(other) && other.frames.iter().all(|f| self.runs(f))
    }

    /// Whether both are code paths of one kind (or kind family) and one
    /// allocator.
    fn is_path_kin(&self, other: &Signature) -> bool {
        use crate::key::path_family;
        self.path
            && other.path
            && path_family(&self.kind) == path_family(&other.kind)
            && self.allocator == other.allocator
    }

    /// Whether this code path runs function `f`.
    fn runs(&self, f: &String) -> bool {
        self.frames.binary_search(f).is_ok()
    }

    /// Which of `groups` (code-path signatures, one per filed group) this
    /// path shows by their own functions: among the groups of its kind
    /// (family) and allocator, the one whose own functions (those no other
    /// of them runs) this path runs every one of, when no other group's
    /// are all in it; `None` when none or several are. A path neither
    /// inside nor around a group's ([`same_path`](Signature::same_path))
    /// still ran that group's bug when it ran the group's own code beside
    /// code the group's first path did not (a realloc of a block that a
    /// tolerated bug misaligned frees it by another branch). That other
    /// code may hold a second bug: the risk containment takes too.
    pub fn own_functions_of(&self, groups: &[Signature]) -> Option<usize> {
        let kin: Vec<&Signature> = groups.iter().filter(|g| g.is_path_kin(self)).collect();
        let shows = |g: &Signature| {
            let mut own = g
                .frames
                .iter()
                .filter(|f| kin.iter().all(|h| std::ptr::eq(*h, g) || !h.runs(f)))
                .peekable();
            own.peek().is_some() && own.all(|f| self.runs(f))
        };
        match kin.iter().filter(|g| shows(g)).collect::<Vec<_>>()[..] {
            [g] => groups.iter().position(|h| std::ptr::eq(h, *g)),
            _ => None,
        }
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
            alt: Vec::new(),
        })
    }

    /// Whether `other` shows the bug this signature does: one key, one
    /// code path containing the other ([`same_path`](Signature::same_path)),
    /// or an alternative title in common ([`shares_alt`](Signature::shares_alt)).
    pub fn same_bug(&self, other: &Signature) -> bool {
        self.key() == other.key()
            || self.same_path(other)
            || (self.allocator == other.allocator && self.shares_alt(&other.alt))
    }

    /// Whether this signature, of its allocator, has one of `titles` among
    /// its alternative titles (syzkaller's rule: crashes whose titles
    /// meet are one bug).
    pub fn shares_alt(&self, titles: &[String]) -> bool {
        self.alt.iter().any(|t| titles.contains(t))
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
        sanitizer.then(|| format!("{}{}", crate::key::SANITIZER, self.title()))
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
            alt: Vec::new(),
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
fn slot_target(slot: &str) -> &str {
    slot.split_once('/').map_or(slot, |(target, _)| target)
}

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
mod tests;
