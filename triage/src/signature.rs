//! Crash signatures: which bug a crash log shows, as a key that every crash
//! of that bug shares.
//!
//! A log is the stderr of a libFuzzer run, or of a replay of one input
//! (`binary input`). [`Signature::from_log`] reads its first finding in four
//! named steps: `finding` (what the log reports, and where), `first_stack`
//! (the crash stack after it), `top_frames` (the frames that can be the bug)
//! and a message per class ([`violation::key_of`], `sanitizer_message`,
//! `leak_message`, `assertion_message`, `crash_message`).

use std::fmt;

use sha2::{Digest, Sha256};
use shadow::violation;

/// How many frames of the crash stack take part in a signature.
const FRAMES: usize = 3;

/// The identity of a crash: two logs with equal signatures show one bug.
///
/// # The dedup rule
///
/// A signature is a kind, a normalized message and at most three frames,
/// and two crashes are one group when all three are equal (when their
/// [`key`](Signature::key)s are). What goes into each part depends on what
/// the log reports first (the precedence of [`kind`]):
///
/// - **Violation** (`allocsoak violation: <kind>: op #N ...`): the kind and
///   the shadow's key, [`shadow::violation::key_of`] (`<kind> in <op family>:
///   <message with numbers as N>`); no frames. The line already names the
///   check and the op, and frames would split one bug reached through two
///   targets (`alloc` in `alloc_ops` and `worker-alloc` in `mt_ops` run
///   different harness code). The harness tolerates known bugs by that same
///   key, so a filed group and a tolerated bug are one thing.
/// - **Sanitizer error** (`ERROR: AddressSanitizer: <type>`): the error type
///   (the SUMMARY line's, which is `double-free` where the ERROR line says
///   `attempting double-free`) and the access (`heap-use-after-free READ`),
///   and the top frames of the first stack. Sizes and addresses never count.
/// - **Leak** (`ERROR: LeakSanitizer`): whether the first leak is direct, and
///   the top frames of its allocation stack below `malloc` and friends and
///   the Rust allocation shims.
/// - **Assertion** (mimalloc's `assertion failed` or C's `Assertion ... failed`):
///   the expression and the asserting function, numbers as N (two different
///   assertions never share a group), and the top frames.
/// - **Crash** (a Rust panic, or another deadly signal): the panic message
///   with numbers as N (`deadly signal` without one), and the top frames.
/// - **Timeout and out-of-memory**: the kind and the slot
///   (`target/allocator`); no frames. A slow or hungry input has no crash
///   site, so each slot has one group per kind.
///
/// The top frames are the first three of the stack, after dropping frames
/// that are never the bug: Rust's std, core, alloc and panic machinery
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
    /// The top frames, normalized function names; empty for violations,
    /// timeouts and out-of-memory.
    pub frames: Vec<String>,
    /// The normalized message: the shadow key for a violation, the slot for
    /// a timeout or out-of-memory.
    pub message: String,
}

/// What a log reports first; decides which parts make a signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Class {
    Violation,
    Sanitizer,
    Leak,
    Assertion,
    Crash,
    /// libFuzzer's timeout or out-of-memory.
    Engine,
}

impl Signature {
    /// The signature of the first finding in `log`, or `None` when the log
    /// reports nothing ([`kind`] is `None` exactly then). `slot` is
    /// `target/allocator`; it is part of the signature only for timeouts and
    /// out-of-memory.
    pub fn from_log(log: &str, slot: &str) -> Option<Signature> {
        let lines: Vec<&str> = log.lines().collect();
        let (at, class, kind) = finding(&lines)?;
        let after = &lines[at..];
        let (message, frames) = match class {
            Class::Violation => {
                // A line without `: ` after the kind has no key; keep it whole.
                let key = violation::key_of(after[0])
                    .unwrap_or_else(|| violation::numbers_to_n(after[0].trim()));
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
            frames,
            message,
        })
    }

    /// The full identity: the kind, the message and each frame, one per
    /// line, in that order. Equal keys are one group.
    pub fn key(&self) -> String {
        let mut key = format!("{}\n{}", self.kind, self.message);
        for frame in &self.frames {
            key.push('\n');
            key.push_str(frame);
        }
        key
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

    /// A timeout or out-of-memory: its message is the slot.
    fn is_engine(&self) -> bool {
        self.frames.is_empty() && matches!(self.kind.as_str(), "timeout" | "oom")
    }
}

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

/// One frame of a sanitizer-format stack (`#N 0x... in function file:line:col`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The function, normalized as in a [`Signature`]; empty when the
    /// frame is unsymbolized.
    pub function: String,
    /// The source file; for an unsymbolized frame the module and offset
    /// (`/lib/x86_64-linux-gnu/libc.so.6+0x3c04f`); empty when unknown.
    pub file: String,
    /// The line in `file`, when the symbolizer knew it.
    pub line: Option<u32>,
}

impl fmt::Display for Frame {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let function = if self.function.is_empty() {
            "??"
        } else {
            &self.function
        };
        match self.line {
            Some(line) => write!(f, "{function} {}:{line}", self.file),
            None if self.file.is_empty() => f.write_str(function),
            None => write!(f, "{function} {}", self.file),
        }
    }
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

/// Step 1: the first finding: the line it starts on, its class and kind.
/// A violation anywhere outranks everything else; otherwise the first line
/// that reports something wins.
fn finding(lines: &[&str]) -> Option<(usize, Class, String)> {
    let violation = lines
        .iter()
        .enumerate()
        .find_map(|(i, line)| Some((i, violation::kind_of(line)?)));
    if let Some((i, kind)) = violation {
        return Some((i, Class::Violation, kind.to_string()));
    }
    lines.iter().enumerate().find_map(|(i, line)| {
        let (class, kind) = classify(line, &lines[i + 1..])?;
        Some((i, class, kind))
    })
}

/// What one line reports, if anything; `rest` is the log after it.
fn classify(line: &str, rest: &[&str]) -> Option<(Class, String)> {
    if let Some(report) = line.split("ERROR: AddressSanitizer: ").nth(1) {
        return Some((Class::Sanitizer, sanitizer_type(report, rest)?));
    }
    if line.contains("ERROR: LeakSanitizer: detected memory leaks") {
        return Some((Class::Leak, "leak".into()));
    }
    if line.contains(": assertion failed")
        || (line.contains("Assertion `") && line.contains("' failed"))
    {
        return Some((Class::Assertion, "assertion".into()));
    }
    if line.contains("ERROR: libFuzzer: timeout") {
        return Some((Class::Engine, "timeout".into()));
    }
    if line.contains("ERROR: libFuzzer: out-of-memory") {
        return Some((Class::Engine, "oom".into()));
    }
    if line.contains("ERROR: libFuzzer: deadly signal") || line.contains("panicked at") {
        return Some((Class::Crash, "crash".into()));
    }
    None
}

/// The sanitizer's error type. The first word of the ERROR line is the type
/// for most reports (`heap-use-after-free on address ...`), but not for all
/// (`attempting double-free on ...`), so the SUMMARY line's first word,
/// which always is the type, wins when the report has one.
fn sanitizer_type(report: &str, rest: &[&str]) -> Option<String> {
    let summary = rest
        .iter()
        .take_while(|l| !l.contains("ERROR: "))
        .find_map(|l| l.split("SUMMARY: AddressSanitizer: ").nth(1))
        .and_then(|s| s.split_whitespace().next())
        // `SUMMARY: AddressSanitizer: 64 byte(s) leaked in 1 allocation(s).`
        .filter(|t| !t.starts_with(|c: char| c.is_ascii_digit()));
    summary
        .or_else(|| report.split_whitespace().next())
        .map(str::to_string)
}

/// A sanitizer error's message: the type and the access (`READ`/`WRITE`),
/// from `READ of size 8 ...` or `The signal is caused by a WRITE memory access.`
fn sanitizer_message(kind: &str, after: &[&str]) -> String {
    let access = after
        .iter()
        .take_while(|l| parse_frame(l).is_none())
        .find_map(|l| {
            let l = l.trim_start();
            ["READ", "WRITE"].into_iter().find(|a| {
                l.starts_with(&format!("{a} of size"))
                    || l.contains(&format!("by a {a} memory access"))
            })
        });
    match access {
        Some(access) => format!("{kind} {access}"),
        None => kind.to_string(),
    }
}

/// A leak's message: whether the first leak is direct or indirect.
fn leak_message(after: &[&str]) -> String {
    let first = after.iter().find_map(|l| {
        if l.contains("Direct leak of") {
            Some("direct leak")
        } else if l.contains("Indirect leak of") {
            Some("indirect leak")
        } else {
            None
        }
    });
    first.unwrap_or("leak").to_string()
}

/// An assertion's message, numbers as N: ``assertion `<expression>`
/// (<function>)``. Reads mimalloc's two lines (`mimalloc: assertion failed: at
/// "file":698, func` then `  assertion: "expr"`) and C's one
/// (``prog: file.c:12: func: Assertion `expr' failed.``).
fn assertion_message(after: &[&str]) -> String {
    let line = after[0];
    let (expr, func) = if let Some(i) = line.find("Assertion `") {
        let expr = &line[i + "Assertion `".len()..];
        let expr = expr.rsplit_once("' failed").map_or(expr, |(e, _)| e);
        let head = line[..i].trim_end().trim_end_matches(':');
        let func = head.rsplit_once(": ").map_or(head, |(_, f)| f);
        (expr, func)
    } else {
        let func = line.rsplit_once(", ").map_or("", |(_, f)| f);
        let expr = after
            .get(1)
            .and_then(|l| l.trim().strip_prefix("assertion:"))
            .map_or("", |e| e.trim().trim_matches('"'));
        (expr, func)
    };
    violation::numbers_to_n(&format!("assertion `{}` ({})", expr.trim(), func.trim()))
}

/// A crash's message: `panic: <message>` with numbers as N for a Rust panic
/// (the message is the line after `panicked at <file>:<line>:<col>:`), else
/// `deadly signal`.
fn crash_message(after: &[&str]) -> String {
    let Some(at) = after[0].split("panicked at ").nth(1) else {
        return "deadly signal".into();
    };
    // Before Rust 1.73 the message was on the line: `panicked at 'msg', file`.
    let message = match at.strip_prefix('\'') {
        Some(m) => m.rsplit_once("', ").map_or(m, |(m, _)| m),
        None => after.get(1).copied().unwrap_or(""),
    };
    format!("panic: {}", violation::numbers_to_n(message.trim()))
}

/// Step 2: the first sanitizer-format stack in `lines`: the run of frame
/// lines from the first `#0` to the first line that is not a frame.
fn first_stack(lines: &[&str]) -> Vec<Frame> {
    let mut frames = Vec::new();
    for line in lines {
        match parse_frame(line) {
            Some((0, _)) if !frames.is_empty() => break,
            Some((0, frame)) => frames.push(frame),
            Some((_, frame)) if !frames.is_empty() => frames.push(frame),
            None if !frames.is_empty() => break,
            _ => {}
        }
    }
    frames
}

/// Step 3: the frames that name the bug: the first [`FRAMES`] of the first
/// stack that are not noise, consecutive repeats counted once. For a leak
/// the allocation entry points (`malloc`, `calloc`, ...) are noise too.
fn top_frames(after: &[&str], leak: bool) -> Vec<String> {
    let mut top: Vec<String> = Vec::new();
    for frame in first_stack(after) {
        if top.len() == FRAMES {
            break;
        }
        if is_noise(&frame) || (leak && ALLOC_ENTRIES.contains(&frame.function.as_str())) {
            continue;
        }
        if top.last() != Some(&frame.function) {
            top.push(frame.function);
        }
    }
    top
}

/// Function-name prefixes of frames that are never the bug: Rust's std and
/// panic machinery, libFuzzer, the sanitizer runtime, libc's abort and
/// thread-start path, assertion reporters. Matched after a leading `<`, so
/// `<alloc::boxed::Box<..> as ..>::call` is std too.
const NOISE_PREFIXES: &[&str] = &[
    "std::",
    "core::",
    "alloc::",
    "__rust",
    "rust_panic",
    "rust_begin_unwind",
    "fuzzer::",
    "LLVMFuzzerTestOneInput",
    "libfuzzer_sys::",
    "rust_fuzzer_test_input",
    "__sanitizer",
    "__asan",
    "__lsan",
    "__interceptor_",
    "___interceptor_",
    "__libc_",
    "__GI_",
    "pthread_kill",
    "__pthread_kill",
    "__assert_fail",
    "_mi_assert_fail",
    // The shadow's byte-pattern reader: see `is_noise`.
    "shadow::pattern::",
];

/// Whole function names of libc frames that are never the bug.
const NOISE_NAMES: &[&str] = &[
    "abort",
    "raise",
    "_start",
    "start_thread",
    "clone",
    "clone3",
];

/// The allocation entry points a leak's allocation stack starts with.
const ALLOC_ENTRIES: &[&str] = &[
    "malloc",
    "calloc",
    "realloc",
    "reallocarray",
    "aligned_alloc",
    "posix_memalign",
    "memalign",
    "valloc",
    "pvalloc",
];

impl Frame {
    /// Whether the frame is runtime machinery (std, panic, libFuzzer, the
    /// sanitizer, libc) that can never be the bug: what a report leaves out.
    pub fn is_noise(&self) -> bool {
        is_noise(self)
    }
}

/// Whether a frame can never be the bug (see [`Signature`]).
fn is_noise(frame: &Frame) -> bool {
    let name = frame.function.trim_start_matches('<');
    let file = frame.file.as_str();
    let file_name = file.rsplit('/').next().unwrap_or(file);
    name.is_empty()
        // An inlined closure's bare name (`{closure#3}`) says nothing alone,
        // and its number changes when a closure is added above it.
        || name.starts_with('{')
        // Unsymbolized: only a module and an offset.
        || (frame.line.is_none() && file.contains("+0x"))
        || NOISE_PREFIXES.iter().any(|p| name.starts_with(p))
        || NOISE_NAMES.contains(&name)
        // Inlined std frames carry short names (`copy_nonoverlapping`).
        || ["/library/std/src/", "/library/core/src/", "/library/alloc/src/"]
            .iter()
            .any(|d| file.contains(d))
        // The sanitizer runtime (`free` in asan_malloc_linux.cpp).
        || file.contains("/compiler-rt/")
        || file.contains("sanitizer_common")
        || ["asan_", "lsan_", "ubsan_", "sanitizer_"]
            .iter()
            .any(|p| file_name.starts_with(p))
        // libFuzzer and libfuzzer-sys' glue (its `main`, its closures).
        || file.contains("/libfuzzer-sys-")
        || file.contains("/libfuzzer/")
        // Every check reads and writes blocks through shadow/src/pattern.rs,
        // so a fault there says only that a block was broken; the caller
        // (`verify` in `free_block`, in `heap_delete`) says which check
        // found it, and two bugs found by two checks must not merge.
        || file.ends_with("shadow/src/pattern.rs")
}

/// One frame line, with its index: `#N 0xPC in function file:line:col`,
/// `#N 0xPC in function (module+0xoff)`, or `#N 0xPC  (module+0xoff)`.
fn parse_frame(line: &str) -> Option<(usize, Frame)> {
    let rest = line.trim_start().strip_prefix('#')?;
    let (index, rest) = rest.split_once(' ')?;
    let index: usize = index.parse().ok()?;
    let rest = rest.trim_start().strip_prefix("0x")?;
    let rest = rest.split_once(' ').map_or("", |(_, r)| r).trim();
    let rest = rest.split(" (BuildId: ").next().unwrap_or(rest);
    let (function, location) = match rest.strip_prefix("in ") {
        Some(r) => match r.rsplit_once(' ') {
            Some((f, loc)) if is_location(loc) => (f, loc),
            _ => (r, ""),
        },
        None => ("", rest),
    };
    let (file, line) = split_location(location);
    let frame = Frame {
        function: normalize_function(function),
        file: file.to_string(),
        line,
    };
    Some((index, frame))
}

/// Whether the last word of a frame is its location, not part of the name:
/// a path, a module and offset, or a `file.ext` / codegen unit.
fn is_location(word: &str) -> bool {
    (word.starts_with('(') && word.ends_with(')'))
        || word.contains('/')
        || (word.contains('.') && !word.contains("::") && !word.contains(['<', '>']))
}

/// `file:line:col`, `file:line`, `file` or `(module+0xoff)` as file and line.
fn split_location(location: &str) -> (&str, Option<u32>) {
    if let Some(module) = location.strip_prefix('(').and_then(|l| l.strip_suffix(')')) {
        return (module, None);
    }
    let mut file = location;
    let mut numbers = Vec::new();
    while let Some((head, tail)) = file.rsplit_once(':') {
        match tail.parse::<u32>() {
            Ok(n) if numbers.len() < 2 => {
                numbers.push(n);
                file = head;
            }
            _ => break,
        }
    }
    // The line is the first number after the file (`file:line:col`).
    (file, numbers.last().copied())
}

/// A symbolized function name as a signature uses it: no Rust hash suffix
/// (`::h0123456789abcdef`), no module suffix (`(/lib/x.so+0x10)`), no
/// trailing generic arguments, and `<Type>::f` as `Type::f`.
fn normalize_function(name: &str) -> String {
    let mut name = name.trim();
    if let Some(i) = name.find(" (/") {
        name = &name[..i];
    }
    if let Some((head, hash)) = name.rsplit_once("::h") {
        if hash.len() == 16 && hash.bytes().all(|b| b.is_ascii_hexdigit()) {
            name = head;
        }
    }
    // Generic arguments name the caller's types (`call<..::{closure_env#0}>`)
    // and change with unrelated edits.
    while name.ends_with('>') {
        match matching_open(name) {
            Some(i) if i > 0 => name = name[..i].trim_end_matches("::"),
            _ => break,
        }
    }
    // `<shadow::executor::Executor>::fail` is an inherent method of a type.
    if let Some(inner) = name.strip_prefix('<') {
        if let Some(close) = matching_close(inner) {
            let (ty, rest) = (&inner[..close], &inner[close + 1..]);
            if !ty.contains(" as ") && rest.starts_with("::") {
                return format!("{ty}{rest}");
            }
        }
    }
    name.to_string()
}

/// The index of the `<` matching the `>` that ends `name` (a `->` inside is
/// an arrow, not a bracket).
fn matching_open(name: &str) -> Option<usize> {
    let bytes = name.as_bytes();
    let mut depth = 0usize;
    for i in (0..bytes.len()).rev() {
        match bytes[i] {
            b'>' if i > 0 && bytes[i - 1] == b'-' => {}
            b'>' => depth += 1,
            b'<' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

/// The index of the `>` closing a `<` just before `text`.
fn matching_close(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let mut depth = 1usize;
    for (i, &b) in bytes.iter().enumerate() {
        match b {
            b'>' if i > 0 && bytes[i - 1] == b'-' => {}
            b'<' => depth += 1,
            b'>' => {
                depth -= 1;
                if depth == 0 {
                    return Some(i);
                }
            }
            _ => {}
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(
            sig.frames,
            [
                "shadow::model::ShadowHeap::remove",
                "free_block",
                "shadow::executor::Executor::step"
            ]
        );
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

    #[test]
    fn frames_parse_with_and_without_symbols() {
        let (i, f) = parse_frame("    #17 0x5653f579bad9 in <shadow::executor::Executor>::fail /work/main/shadow/src/executor.rs:119:9").unwrap();
        assert_eq!(i, 17);
        assert_eq!(f.function, "shadow::executor::Executor::fail");
        assert_eq!(
            (f.file.as_str(), f.line),
            ("/work/main/shadow/src/executor.rs", Some(119))
        );
        let (_, f) = parse_frame(
            "    #4 0x7f4c1517a04f  (/lib/x86_64-linux-gnu/libc.so.6+0x3c04f) (BuildId: 93ac61ec)",
        )
        .unwrap();
        assert_eq!(
            (f.function.as_str(), f.file.as_str()),
            ("", "/lib/x86_64-linux-gnu/libc.so.6+0x3c04f")
        );
        assert!(is_noise(&f));
        let (_, f) = parse_frame("    #1 0x55 in fuzzer::Fuzzer::ExecuteCallback(unsigned char const*, unsigned long) /x/FuzzerLoop.cpp:619:15").unwrap();
        assert_eq!(
            f.function,
            "fuzzer::Fuzzer::ExecuteCallback(unsigned char const*, unsigned long)"
        );
        let (_, f) =
            parse_frame("    #28 0x56 in __rust_try libfuzzer_sys.30dc70d2723b9ab6-cgu.0").unwrap();
        assert_eq!((f.function.as_str(), f.line), ("__rust_try", None));
        assert_eq!(parse_frame("#544\tINITED cov: 687 ft: 6088"), None);
    }

    #[test]
    fn names_lose_hashes_and_generic_arguments() {
        assert_eq!(
            normalize_function("shadow::x::y::h0123456789abcdef"),
            "shadow::x::y"
        );
        assert_eq!(
            normalize_function("copy_nonoverlapping<u8>"),
            "copy_nonoverlapping"
        );
        assert_eq!(
            normalize_function("call<shadow::executor::{impl#0}::alloc_block::{closure_env#0}>"),
            "call"
        );
        assert_eq!(
            normalize_function("std::sys::backtrace::__rust_end_short_backtrace::<std::panicking::panic_handler::{closure#0}, !>"),
            "std::sys::backtrace::__rust_end_short_backtrace"
        );
        assert_eq!(normalize_function("map<fn(usize) -> u8>"), "map");
        assert_eq!(
            normalize_function(
                "<shadow::allocator::zoo::Zoo as shadow::allocator::Allocator>::free"
            ),
            "<shadow::allocator::zoo::Zoo as shadow::allocator::Allocator>::free"
        );
    }

    mod golden {
        //! The logs in `testdata/` are real engine logs (see
        //! `testdata/README.md`); each `<name>.sig` holds what
        //! [`Signature::from_log`] makes of `<name>.log`: the title, the id,
        //! then the key. `TRIAGE_BLESS=1 cargo test -p triage` rewrites them.

        use super::super::*;
        use std::path::{Path, PathBuf};

        /// The slot every golden log is read with; the timeout and OOM logs
        /// came from `alloc_ops` on `system`.
        const SLOT: &str = "alloc_ops/system";

        fn dir() -> PathBuf {
            Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata")
        }

        fn sig(name: &str) -> Signature {
            let path = dir().join(format!("{name}.log"));
            let log = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("{}: {e}", path.display()));
            Signature::from_log(&log, SLOT)
                .unwrap_or_else(|| panic!("{}: no finding", path.display()))
        }

        fn render(sig: &Signature) -> String {
            format!("{}\n{}\n{}\n", sig.title(), sig.id(), sig.key())
        }

        #[test]
        fn every_log_has_its_signature() {
            let bless = std::env::var_os("TRIAGE_BLESS").is_some_and(|v| v == "1");
            let mut names: Vec<String> = std::fs::read_dir(dir())
                .unwrap()
                .filter_map(|e| {
                    let name = e.unwrap().file_name().into_string().unwrap();
                    name.strip_suffix(".log").map(str::to_string)
                })
                .collect();
            names.sort();
            assert!(names.len() >= 10, "testdata/ holds {} logs", names.len());
            let mut wrong = Vec::new();
            for name in &names {
                let got = render(&sig(name));
                let path = dir().join(format!("{name}.sig"));
                if bless {
                    std::fs::write(&path, &got).unwrap();
                } else if std::fs::read_to_string(&path).ok().as_deref() != Some(got.as_str()) {
                    eprintln!("{name}.sig: want\n{got}");
                    wrong.push(name.as_str());
                }
            }
            assert!(
                wrong.is_empty(),
                "signatures changed for {wrong:?}; check, then rerun with TRIAGE_BLESS=1"
            );
        }

        #[test]
        fn two_zoo_bugs_that_fail_in_the_same_function_with_different_violation_kinds_land_in_different_groups(
        ) {
            let (overlap, alignment) = (
                "violation-overlap-alloc_ops-double-issue",
                "violation-alignment-alloc_ops-small-underalign",
            );
            // Both stop in the same executor function by the same path ...
            let site = |name: &str| -> Vec<String> {
                let log = std::fs::read_to_string(dir().join(format!("{name}.log"))).unwrap();
                stack(&log)
                    .into_iter()
                    .map(|f| f.function)
                    .filter(|f| f.starts_with("shadow::executor::"))
                    .take(3)
                    .collect()
            };
            assert_eq!(site(overlap), site(alignment));
            assert_eq!(site(overlap)[1], "shadow::executor::Executor::adopt");
            // ... and are two groups.
            let (a, b) = (sig(overlap), sig(alignment));
            assert_eq!((a.kind.as_str(), b.kind.as_str()), ("overlap", "alignment"));
            assert_ne!(a.id(), b.id());
        }

        #[test]
        fn the_same_bug_reached_through_two_targets_lands_in_one_group() {
            let alloc_ops = sig("violation-alignment-alloc_ops-small-underalign");
            let mt_ops = sig("violation-alignment-mt_ops-small-underalign");
            let heap_api = sig("violation-alignment-heap_api-small-underalign");
            assert_eq!(alloc_ops.id(), mt_ops.id());
            assert_eq!(alloc_ops.id(), heap_api.id());
            // The group's key is the one the harness tolerates.
            let line = "allocsoak violation: alignment: op #0 `worker-alloc worker=146 size=0 align=16`: \
                        block 0x7c17a75e18a8 (size 0) is not aligned to 16 [allocator zoo:small-underalign]";
            assert_eq!(mt_ops.violation_key(), violation::key_of(line).as_deref());
        }

        #[test]
        fn use_after_frees_found_by_two_checks_are_two_groups() {
            let xthread = sig("asan-heap-use-after-free-mt_ops-xthread-wrong-free");
            let heap_delete = sig("asan-heap-use-after-free-heap_api-heap-delete-drops");
            assert_eq!(xthread.message, heap_delete.message);
            assert_ne!(xthread.id(), heap_delete.id());
        }

        #[test]
        fn a_fuzz_log_and_its_replay_are_one_group() {
            let fuzz = sig("leak-alloc_ops-leak-on-shrink-fuzz");
            let replay = sig("leak-alloc_ops-leak-on-shrink");
            assert_eq!(fuzz.id(), replay.id());
        }

        #[test]
        fn out_of_memory_is_one_group_per_slot() {
            let rss = sig("oom-rss-alloc_ops-system");
            let malloc = sig("oom-malloc-alloc_ops-system");
            assert_eq!(rss.id(), malloc.id());
            let log = std::fs::read_to_string(dir().join("oom-rss-alloc_ops-system.log")).unwrap();
            let elsewhere = Signature::from_log(&log, "heap_api/system").unwrap();
            assert_ne!(elsewhere.id(), rss.id());
            assert_eq!(rss.violation_key(), None);
        }
    }
}
