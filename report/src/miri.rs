//! Miri's reports (`cargo miri run` of a glue's `miri` binary): what its
//! first error says, read as a [`Signature`] like any crash's, or as a
//! limit of Miri's model that says nothing about the allocator.
//!
//! Miri stops a program at its first error: a head line (`error:
//! Undefined Behavior: ...`), the source it points at, help lines (where
//! the pointer's tag was made), then `stack backtrace:` with one
//! numbered function per frame and its `at path:line` under it.

use crate::key::numbers_to_n;
use crate::Signature;

/// What the Miri runner (`allocsoak_fuzz::miri`) prints before each
/// input: Miri stops the process at its first error, and the last such
/// line names the program that reached it.
pub const INPUT: &str = "allocsoak miri: input ";
/// What the runner prints after an input that ran to its end.
pub const CLEAN: &str = "allocsoak miri: clean ";

/// What one Miri report is to allocsoak.
#[derive(Debug, PartialEq, Eq)]
pub enum Miri {
    /// Undefined behaviour the allocator caused (or the harness met
    /// through a pointer the allocator handed out).
    Finding(Signature),
    /// An operation Miri cannot run, or models more narrowly than the
    /// OS: the program stopped there and says nothing about the
    /// allocator. Miri's head line.
    Unsupported(String),
}

/// Head lines, in the order they are looked for: the line's start, and
/// the finding's kind (`None`: Miri could not go on).
const HEADS: &[(&str, Option<&str>)] = &[
    ("error: Undefined Behavior: ", Some("miri-ub")),
    ("error: deadlock: ", Some("miri-deadlock")),
    ("error: unsupported operation: ", None),
    ("error: abnormal termination: ", None),
];

/// Undefined behaviour that is Miri's model, not the program: the head
/// says the first, the source line Miri points at holds the second. An
/// `munmap` of part of a mapping is valid POSIX (dlmalloc 0.2.14's
/// `sys_trim` does it); Miri's mappings are objects freed whole.
const MODEL_LIMITS: &[(&str, &str)] = &[(
    "which does not point to the beginning of an object",
    "munmap(",
)];

/// Frames that are not the allocator's: the standard library's and the
/// harness's (its adapters call the allocator, its checks read blocks).
const NOT_THE_ALLOCATOR: &[&str] = &["std::", "core::", "alloc::", "allocsoak_fuzz::", "shadow::"];

/// Miri's first error in `log`, if it reports one; `allocator` is the
/// one the program ran on.
pub fn parse(log: &str, allocator: &str) -> Option<Miri> {
    let lines: Vec<&str> = log.lines().collect();
    let (at, text, kind) = lines.iter().enumerate().find_map(|(i, line)| {
        HEADS
            .iter()
            .find_map(|(head, kind)| line.strip_prefix(head).map(|text| (i, text.trim(), *kind)))
    })?;
    let report = &lines[at + 1..];
    let source = report
        .iter()
        .take_while(|l| !l.contains("stack backtrace:"));
    let model_limit = MODEL_LIMITS
        .iter()
        .any(|(says, code)| text.contains(says) && source.clone().any(|l| l.contains(code)));
    let Some(kind) = kind.filter(|_| !model_limit) else {
        return Some(Miri::Unsupported(lines[at].trim().to_string()));
    };
    let frame = allocator_frame(report)
        .or_else(|| tag_made_at(report))
        .unwrap_or_else(|| "?".into());
    // One aliasing bug, whichever model Miri held it to: each words it
    // its own way.
    let alt = match report
        .iter()
        .any(|l| ALIASING.iter().any(|m| l.contains(m)))
    {
        true => vec![format!("{kind}: aliasing in {frame}")],
        false => Vec::new(),
    };
    Some(Miri::Finding(Signature {
        kind: kind.into(),
        allocator: allocator.into(),
        frames: vec![frame],
        message: format!("{kind}: {}", numbers_to_n(text)),
        path: false,
        alt,
    }))
}

/// What Miri's help says of a violation of its aliasing model, Stacked
/// Borrows' or Tree Borrows'.
const ALIASING: [&str; 2] = ["Stacked Borrows rules", "Tree Borrows rules"];

/// The first frame of the backtrace that is the allocator's own.
fn allocator_frame(report: &[&str]) -> Option<String> {
    report
        .iter()
        .skip_while(|l| !l.contains("stack backtrace:"))
        .filter_map(|l| {
            let (number, name) = l.trim().split_once(": ")?;
            number.parse::<usize>().ok().map(|_| name)
        })
        .find(|name| {
            let bare = name.trim_start_matches('<');
            !NOT_THE_ALLOCATOR.iter().any(|p| bare.starts_with(p))
        })
        .map(String::from)
}

/// Where the tag of the pointer at fault was made, `path:line`, when
/// every frame is the harness's (it wrote a block through a pointer the
/// allocator made too narrow): the `-->` line after Miri's `was created`
/// help.
fn tag_made_at(report: &[&str]) -> Option<String> {
    let made = report.iter().position(|l| l.contains("was created"))?;
    report[made..].iter().find_map(|l| {
        let place = l.trim().strip_prefix("--> ")?;
        // `path:line:column`: the column moves with any edit of the line.
        Some(place.rsplit_once(':').map_or(place, |(p, _)| p).to_string())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn testdata(name: &str) -> String {
        let path = format!("{}/testdata/miri/{name}", env!("CARGO_MANIFEST_DIR"));
        std::fs::read_to_string(&path).unwrap()
    }

    #[test]
    fn a_partial_munmap_is_a_limit_of_miri_not_a_finding() {
        let log = testdata("dlmalloc-partial-munmap.log");
        let Some(Miri::Unsupported(head)) = parse(&log, "dlmalloc") else {
            panic!("{:?}", parse(&log, "dlmalloc"))
        };
        assert!(head.contains("does not point to the beginning"), "{head}");
    }

    #[test]
    fn an_mmap_flag_miri_does_not_model_is_unsupported() {
        let log = testdata("rlsf-map-fixed.log");
        assert!(matches!(parse(&log, "rlsf"), Some(Miri::Unsupported(_))));
    }

    #[test]
    fn undefined_behaviour_is_keyed_by_the_allocators_frame() {
        // The munmap report with its source line changed: no longer the
        // model's limit, so the allocator's first frame is blamed.
        let log = testdata("dlmalloc-partial-munmap.log").replace("libc::munmap(", "unmap(");
        let Some(Miri::Finding(sig)) = parse(&log, "dlmalloc") else {
            panic!("{:?}", parse(&log, "dlmalloc"))
        };
        assert_eq!(sig.kind, "miri-ub");
        assert_eq!(
            sig.frames,
            ["<dlmalloc::sys::System as dlmalloc::Allocator>::free_part"]
        );
        assert_eq!(
            sig.message,
            "miri-ub: deallocating N[allocN]<N> which does not point to the beginning of an object"
        );
    }

    #[test]
    fn a_tag_made_too_narrow_is_keyed_where_it_was_made() {
        let log = "error: Undefined Behavior: attempting a write access using <55> at alloc9[0x10], but that tag does not exist in the borrow stack for this location\n\
                   \x20 --> /work/shadow/src/pattern.rs:40:9\n\
                   help: <55> was created by a SharedReadWrite retag at offsets [0x0..0x8]\n\
                   \x20 --> /work/zoo/src/narrow.rs:31:17\n\
                   \x20 = note: stack backtrace:\n\
                   \x20         0: shadow::pattern::fill\n\
                   \x20         1: allocsoak_fuzz::miri::main\n";
        let Some(Miri::Finding(sig)) = parse(log, "zoo:narrow") else {
            panic!()
        };
        assert_eq!(sig.frames, ["/work/zoo/src/narrow.rs:31"]);
    }

    /// rlsf 0.2.1's aliasing bug (yvt/rlsf#9) as each model words it:
    /// two keys, one alternative title, so one group whichever ran.
    #[test]
    fn one_aliasing_bug_under_either_model_shares_its_alternative_title() {
        let of = |name| match parse(&testdata(name), "arena") {
            Some(Miri::Finding(sig)) => sig,
            other => panic!("{name}: {other:?}"),
        };
        let stacked = of("rlsf-0.2.1-stacked-borrows.log");
        let tree = of("rlsf-0.2.1-tree-borrows.log");
        assert_ne!(stacked.id(), tree.id());
        assert_eq!(stacked.alt, tree.alt);
        assert!(
            stacked.alt[0].starts_with("miri-ub: aliasing in rlsf::tlsf::Tlsf::")
                && stacked.alt[0].ends_with("insert_free_block_ptr_aligned"),
            "{:?}",
            stacked.alt
        );
        assert!(stacked.same_bug(&tree) && tree.same_bug(&stacked));
        // Not an aliasing rule: no such title.
        let munmap = testdata("dlmalloc-partial-munmap.log").replace("libc::munmap(", "unmap(");
        let Some(Miri::Finding(sig)) = parse(&munmap, "dlmalloc") else {
            panic!()
        };
        assert!(sig.alt.is_empty(), "{:?}", sig.alt);
    }

    #[test]
    fn a_clean_run_reports_nothing() {
        assert_eq!(parse("allocsoak miri: clean seed\n", "rlsf"), None);
    }
}
