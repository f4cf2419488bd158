//! Stack frames: parsing a sanitizer-format frame line, normalizing its
//! function name, and the rules for which frames can never be the bug.

use std::fmt;

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
    // libc's string functions' machine-specific bodies
    // (`__memcpy_avx_unaligned_erms`): their caller made the copy.
    "__memcpy",
    "__memmove",
    "__mempcpy",
    "__memset",
    "__pthread_kill",
    "__assert_fail",
    "_mi_assert_fail",
    // The shadow's byte-pattern reader and its ASan probe (in
    // shadow/src/sanitizer.rs before it was shadow/src/poison.rs): see
    // `is_noise`.
    "shadow::pattern::",
    "shadow::sanitizer::",
    "shadow::poison::",
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
pub(crate) const ALLOC_ENTRIES: &[&str] = &[
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

/// Whether a frame is allocsoak's own harness, which drives the allocator
/// under test: `shadow` (but the zoo: a crate of its own, `zoo/`, and in
/// logs from before, `shadow/src/allocator/zoo`), the fuzz targets and a
/// config's generated glue. By its file, so inlined frames count too.
pub(crate) fn is_harness(frame: &Frame) -> bool {
    let file = frame.file.as_str();
    (file.contains("/shadow/src/") && !file.contains("/shadow/src/allocator/zoo"))
        || file.contains("/fuzz_targets/")
        || file.contains("/allocsoak/declared/")
}

/// Whether a frame can never be the bug (see [`Signature`]).
pub(crate) fn is_noise(frame: &Frame) -> bool {
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
        // ...and asks ASan first, through shadow/src/poison.rs (in logs
        // from before, shadow/src/sanitizer.rs), whose one-byte read
        // reports a poisoned block in the check's place.
        || file.ends_with("shadow/src/poison.rs")
        || file.ends_with("shadow/src/sanitizer.rs")
}

/// One frame line, with its index: `#N 0xPC in function file:line:col`,
/// `#N 0xPC in function (module+0xoff)`, or `#N 0xPC  (module+0xoff)`.
pub(crate) fn parse_frame(line: &str) -> Option<(usize, Frame)> {
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
/// trailing generic arguments, `<Type>::f` as `Type::f`, and a declared C
/// allocator's function under the name its author wrote.
fn normalize_function(name: &str) -> String {
    let mut name = name.trim();
    if let Some(i) = name.find(" (/") {
        name = &name[..i];
    }
    name = declared_name(name);
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

/// A declared C allocator's symbol as its author named it: `declared-c`
/// renames each into `allocsoak.<ident>.<name>` so two releases link side
/// by side, and the symbolizer names an outermost frame by that symbol but
/// an inlined one by its source name, so a key that kept the namespace
/// would split one bug by inlining.
pub fn declared_name(name: &str) -> &str {
    name.strip_prefix("allocsoak.")
        .and_then(|rest| rest.split_once('.'))
        .map_or(name, |(_, own)| own)
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
    fn the_shadows_asan_probe_is_noise_where_it_is_and_was() {
        for line in [
            "    #0 0x55 in shadow::poison::accessible /work/main/shadow/src/poison.rs:40:13",
            "    #0 0x55 in shadow::sanitizer::accessible /work/main/shadow/src/sanitizer.rs:423:13",
            "    #0 0x55 in accessible /work/main/shadow/src/poison.rs:40:13",
        ] {
            let (_, f) = parse_frame(line).unwrap();
            assert!(is_noise(&f), "{line}");
        }
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
        assert_eq!(normalize_function("allocsoak.tiny.t_malloc"), "t_malloc");
        assert_eq!(normalize_function("allocsoak.mi..str.1b14"), ".str.1b14");
        assert_eq!(
            normalize_function("<zoo::Zoo as shadow::allocator::Allocator>::free"),
            "<zoo::Zoo as shadow::allocator::Allocator>::free"
        );
    }
}
