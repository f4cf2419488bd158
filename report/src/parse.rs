//! Reading a log: the first finding (`finding`, step 1), the crash stack
//! after it (`first_stack`, step 2), the frames that can be the bug
//! (`top_frames`, step 3), a message per class of finding, and a sanitizer
//! error's alternative titles (`sanitizer_alt_titles`, step 4).

use crate::frame::{is_harness, is_noise, parse_frame, Frame, ALLOC_ENTRIES};
use crate::key;

/// How many frames of the crash stack take part in a signature: one, the
/// function where it went wrong, as syzkaller's titles (`KASAN:
/// use-after-free Read in f`) key its crashes. Its callers in the
/// allocator are the entry points that led there (alloc, realloc), and
/// would split one bug into a group per entry point.
pub(crate) const FRAMES: usize = 1;

/// What a log reports first; decides which parts make a signature.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Class {
    Violation,
    Sanitizer,
    Leak,
    Assertion,
    Crash,
    /// The engine's timeout (libFuzzer's or honggfuzz's) or libFuzzer's
    /// out-of-memory.
    Engine,
}

/// Step 1: the first finding: the line it starts on, its class and kind.
/// A violation anywhere outranks everything else; otherwise the first line
/// that reports something wins.
pub(crate) fn finding(lines: &[&str]) -> Option<(usize, Class, String)> {
    let violation = lines
        .iter()
        .enumerate()
        .find_map(|(i, line)| Some((i, key::kind_of(line)?)));
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
    // honggfuzz's (`--tmout_sigvtalrm`): `pid=… took too much time (limit
    // 10 s). Killing it with SIGVTALRM`.
    if line.contains("ERROR: libFuzzer: timeout") || line.contains("took too much time (limit") {
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
pub(crate) fn sanitizer_message(kind: &str, after: &[&str]) -> String {
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
pub(crate) fn leak_message(after: &[&str]) -> String {
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
pub(crate) fn assertion_message(after: &[&str]) -> String {
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
    key::numbers_to_n(&format!("assertion `{}` ({})", expr.trim(), func.trim()))
}

/// A crash's message: `panic: <message>` with numbers as N for a Rust panic
/// (the message is the line after `panicked at <file>:<line>:<col>:`), else
/// `deadly signal`.
pub(crate) fn crash_message(after: &[&str]) -> String {
    let Some(at) = after[0].split("panicked at ").nth(1) else {
        return "deadly signal".into();
    };
    // Before Rust 1.73 the message was on the line: `panicked at 'msg', file`.
    let message = match at.strip_prefix('\'') {
        Some(m) => m.rsplit_once("', ").map_or(m, |(m, _)| m),
        None => after.get(1).copied().unwrap_or(""),
    };
    format!("panic: {}", key::numbers_to_n(message.trim()))
}

/// Step 2: the first sanitizer-format stack in `lines`: the run of frame
/// lines from the first `#0` to the first line that is not a frame.
pub(crate) fn first_stack(lines: &[&str]) -> Vec<Frame> {
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
/// stack that are not noise, consecutive repeats counted once. Below the
/// first, allocsoak's harness is noise too ([`is_harness`]): which of its
/// checks or ops reached the allocator says nothing of the allocator's
/// bug. For a leak the allocation entry points (`malloc`, `calloc`, ...)
/// and the harness are noise from the first frame on: the frame kept is
/// the allocator's code that got the memory it lost.
pub(crate) fn top_frames(after: &[&str], leak: bool) -> Vec<String> {
    let mut top: Vec<String> = Vec::new();
    for frame in first_stack(after) {
        if top.len() == FRAMES {
            break;
        }
        if is_noise(&frame)
            || (leak && ALLOC_ENTRIES.contains(&frame.function.as_str()))
            || ((leak || !top.is_empty()) && is_harness(&frame))
        {
            continue;
        }
        if top.last() != Some(&frame.function) {
            top.push(frame.function);
        }
    }
    top
}

/// ASan's error types of a read or write the memory did not allow: which
/// one a bad access gets depends on what lay at the address (a redzone, a
/// freed block, nothing mapped), not on the bug. One bug's accesses share
/// the alternative title `bad-access in f` (syzkaller's, for KASAN's and
/// the page faults' titles).
const BAD_ACCESS: &[&str] = &[
    "heap-buffer-overflow",
    "heap-use-after-free",
    "unknown-crash",
    "SEGV",
    "BUS",
    "wild-addr",
    "wild-addr-read",
    "wild-addr-write",
    "use-after-poison",
    "container-overflow",
    "global-buffer-overflow",
    "stack-buffer-overflow",
    "dynamic-stack-buffer-overflow",
    "stack-use-after-return",
    "stack-use-after-scope",
    "intra-object-overflow",
];

/// ASan's error types of a free of memory that was not a live block:
/// alternative title `bad-free in f`.
const INVALID_FREE: &[&str] = &[
    "double-free",
    "bad-free",
    "alloc-dealloc-mismatch",
    "new-delete-type-mismatch",
];

/// Step 4, for a sanitizer error: its alternative titles (syzkaller's
/// `AltTitles`): two reports of one allocator that share one show one bug,
/// though ASan named them apart. `frames` are the report's frames, and
/// `freed` says whether they are where the block was freed
/// ([`freed_behind_harness`]).
///
/// - `bad-free in g` for a report keyed by where the block was freed: the
///   harness's read of the block and its later free of it are two
///   symptoms of the allocator's free in `g`.
/// - else `bad-access in f` for any bad read or write ([`BAD_ACCESS`]) in
///   the allocator's `f`: a copy past a block's end is a
///   `heap-buffer-overflow`, an `unknown-crash` or a `SEGV` by where the
///   copy ended. An access the harness made has none: the harness reads
///   every block, and which one it found broken says nothing of where.
/// - else `bad-free in f` for a bad free ([`INVALID_FREE`]) in `f`. So a
///   function that frees the wrong block is one bug, whether the block it
///   freed was live (the harness meets it later) or already freed (ASan
///   meets the free itself).
pub(crate) fn sanitizer_alt_titles(
    kind: &str,
    frames: &[String],
    freed: bool,
    after: &[&str],
) -> Vec<String> {
    let Some(f) = frames.first() else {
        return Vec::new();
    };
    let title = if freed {
        format!("bad-free in {f}")
    } else if BAD_ACCESS.contains(&kind) && !accessed_by_harness(after) {
        format!("bad-access in {f}")
    } else if INVALID_FREE.contains(&kind) {
        format!("bad-free in {f}")
    } else {
        return Vec::new();
    };
    vec![title]
}

/// For a use-after-free the harness met reading a block it holds, and a
/// double free or usable-size query of a block the harness holds and gave
/// the call ([`HELD_BLOCK`]): the frame that freed the block first
/// ([`freed_at`]), which is where the allocator went wrong (the harness
/// frees each of its blocks once, and reads and asks about only blocks it
/// holds). `None` for any other report (a double free of another block,
/// inside the allocator, is keyed by where it happened), or one without a
/// `freed by` stack.
pub(crate) fn freed_behind_harness(kind: &str, after: &[&str]) -> Option<String> {
    let behind = match kind {
        "double-free" | "bad-malloc_usable_size" => given_held_block(after),
        "heap-use-after-free" => accessed_by_harness(after),
        _ => false,
    };
    behind.then(|| freed_at(after)).flatten()
}

/// The line the harness adds to a sanitizer report of a block it holds
/// and gave the failing call (a free, a realloc, a usable-size query),
/// then its address: the allocator had freed the block before.
pub const HELD_BLOCK: &str = "allocsoak: the harness holds the block at";

/// The line the harness prints after a sanitizer report raised during an
/// op of `diff_mimalloc`'s reference allocator, before
/// `[reference allocator <name>]`: the report is the reference's.
pub const ON_REFERENCE: &str = "allocsoak: raised on the reference side";

/// The reference allocator a sanitizer report (the first in `after`,
/// which starts at it) was raised on, from the harness's line right after
/// the report's SUMMARY ([`ON_REFERENCE`]).
pub fn reference_side<'a>(after: &[&'a str]) -> Option<&'a str> {
    let summary = after.iter().position(|l| l.starts_with("SUMMARY:"))?;
    after[summary + 1..]
        .iter()
        .take(2)
        .find(|l| l.starts_with(ON_REFERENCE))
        .and_then(|l| crate::key::reference_of(l))
}

/// The function `diff_mimalloc` runs each of its reference's ops in
/// (`shadow::sanitizer::on_reference_side`): a stack that holds it is of
/// a call the reference made.
pub const REFERENCE_FRAME: &str = "on_reference_side";

/// What a `diff_mimalloc` process prints once it has loaded its
/// reference, before the reference's name.
pub const REFERENCE_NAMED: &str = "allocsoak: diff_mimalloc's reference: ";

/// The reference allocator a finding at `lines[at]` with no line of the
/// harness's after it (a timeout, a leak) was raised on: the first stack
/// after it (the hung call's, the leaked block's allocation) runs in
/// [`REFERENCE_FRAME`], and the process named its reference before it
/// ([`REFERENCE_NAMED`]).
pub fn reference_in_stack<'a>(lines: &[&'a str], at: usize) -> Option<&'a str> {
    let in_reference = first_stack(&lines[at..]).iter().any(|frame| {
        frame.function == REFERENCE_FRAME
            || (frame.function.strip_suffix(REFERENCE_FRAME)).is_some_and(|m| m.ends_with("::"))
    });
    if !in_reference {
        return None;
    }
    lines[..at]
        .iter()
        .rev()
        .find_map(|l| l.strip_prefix(REFERENCE_NAMED))
        .map(str::trim)
}

/// The address a sanitizer report is about, from its ERROR line
/// (`attempting double-free on 0x...`, `heap-use-after-free on address
/// 0x...`, `... which is not owned: 0x...`).
pub fn reported_address(report: &str) -> Option<usize> {
    let line = report
        .lines()
        .find(|l| l.contains("ERROR: AddressSanitizer: "))?;
    let hex = line
        .split(|c: char| c.is_whitespace())
        .find_map(|w| w.strip_prefix("0x"))?;
    usize::from_str_radix(hex.trim_end_matches(|c: char| !c.is_ascii_hexdigit()), 16).ok()
}

/// The start of the heap block a sanitizer report's address lies in or
/// next to, from its description (`0x… is located 0 bytes after 56-byte
/// region [0x…,0x…)`).
pub fn reported_region(report: &str) -> Option<usize> {
    let line = report.lines().find(|l| l.contains("-byte region ["))?;
    let (_, inside) = line.split_once("-byte region [")?;
    let (start, _) = inside.split_once(',')?;
    usize::from_str_radix(start.trim().trim_start_matches("0x"), 16).ok()
}

/// Whether the harness said the report is of the block it gave the call
/// ([`HELD_BLOCK`]), before the next report.
fn given_held_block(after: &[&str]) -> bool {
    after
        .iter()
        .skip(1)
        .take_while(|l| !l.contains("ERROR: "))
        .any(|l| l.contains(HELD_BLOCK))
}

/// Whether the first frame of the first stack that is not noise is
/// allocsoak's harness: the harness itself made the access.
fn accessed_by_harness(after: &[&str]) -> bool {
    first_stack(after)
        .iter()
        .find(|f| !is_noise(f))
        .is_some_and(is_harness)
}

/// The top frame of the stack that freed the block, ASan's `freed by
/// thread T here:` (for a use-after-free and a double free alike), by the
/// rule of [`top_frames`]; `None` when the report has none.
fn freed_at(after: &[&str]) -> Option<String> {
    let end = after[1..]
        .iter()
        .position(|l| l.contains("ERROR: "))
        .map_or(after.len(), |i| i + 1);
    let at = after[..end]
        .iter()
        .position(|l| l.contains("freed by thread"))?;
    top_frames(&after[at + 1..end], false).into_iter().next()
}
