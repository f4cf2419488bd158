//! Violation lines and their keys: the one part of a crash log allocsoak
//! writes itself. `shadow` prints a violation as
//! `allocsoak violation: <kind>: op #<i> `<op>` (<site>): <message>`,
//! then who raised it: `[allocator <name>]` (the allocator under test) or,
//! on the reference side of `diff_mimalloc`, `[reference allocator <name>]`;
//! [`key_of`] turns the line into the key both tolerance (in `shadow`) and
//! signatures ([`crate::Signature`]) use, so the two always agree on what
//! one bug is.

/// What every violation line holds before its kind.
pub const MARK: &str = "allocsoak violation: ";
/// Separates the part of a message the key keeps verbatim (a panic's
/// `file:line`, whose numbers tell two panics apart).
pub const KEEP: &str = " @ ";
/// Ends a line the allocator under test raised: ` [allocator <name>]`.
pub const UNDER_TEST: &str = " [allocator ";
/// Ends a line the reference side of `diff_mimalloc` raised:
/// ` [reference allocator <name>]`.
pub const REFERENCE: &str = " [reference allocator ";

/// The violation kinds that leave the heap sound (a misaligned block, a
/// wrong usable size or good size, a dirty zeroed block, a failed request,
/// a request that had to fail and did not, capacity lost at a program's
/// end, a remote free that never came back, bytes the allocator still
/// counts in use, or blocks its walk still lists, once everything was
/// freed, memory `diff_mimalloc`'s reference holds: every block stays
/// where it was, a lost one is only leaked; a forked child's failure, or a heap corruption a hardened allocator did
/// not stop, in a child): a fuzz process goes on past them, filed or not,
/// so a replay of what it found after one must go on past them too
/// ([`sound_patterns`]).
pub const SOUND_KINDS: [&str; 15] = [
    "alignment",
    "usable-size",
    "good-size",
    "zeroed",
    "null",
    "impossible-success",
    "calloc-overflow",
    "capacity-leak",
    "remote-free-lost",
    "kept-bytes",
    "held",
    "kept-block",
    "purge-kept",
    "fork",
    "hardening",
];

/// The violation kinds a fuzzing process shows as a whole, not any one
/// program of it (memory `diff_mimalloc`'s reference holds): no replay
/// shows them again, so the pipeline files them from their record, with
/// no history replayed and nothing minimized.
pub const PROCESS_KINDS: [&str; 1] = ["held"];

/// How a sanitizer report's tolerance key starts (`asan: <title>`,
/// [`crate::Signature::tolerance_key`]).
pub const SANITIZER: &str = "asan: ";

/// Whether a tolerance key is a sanitizer report's: memory the allocator
/// itself corrupted, in doubt after it whatever its kind.
pub fn is_sanitizer(key: &str) -> bool {
    key.starts_with(SANITIZER)
}

/// The violation kinds in which the allocator itself says its heap is
/// broken: its own heap check's, its validator's.
pub const BROKEN_HEAP_KINDS: [&str; 2] = ["heap-check", "validator"];

/// Whether a tolerance key is of a bug that leaves the allocator's own
/// heap broken: a sanitizer report's (memory it corrupted), or its own
/// check's ([`BROKEN_HEAP_KINDS`]). No later program runs sound on that
/// heap, so a process that gets past one must end and start afresh.
pub fn breaks_heap(key: &str) -> bool {
    is_sanitizer(key)
        || BROKEN_HEAP_KINDS.iter().any(|kind| {
            key.strip_prefix(kind)
                .is_some_and(|r| r.starts_with(" in "))
        })
}

/// The kind a code-path signature groups under ([`crate::Signature::contains_path`]):
/// on one code path, a realloc whose new block lost bytes of the old one
/// (`realloc-prefix`) is the bug a live block changed by a call
/// (`contents`) is. A free-list push that writes into a block still
/// handed out shows as the first when the realloc's own free writes into
/// the block it returns, and as the second when a plain free writes into
/// a block held since.
pub fn path_family(kind: &str) -> &str {
    match kind {
        "realloc-prefix" => "contents",
        kind => kind,
    }
}

/// Tolerate-file lines (`<kind> in *`) that get past every sound
/// violation: what a replay of a crash from a fuzz process that went on
/// past them adds to its tolerate file.
pub fn sound_patterns() -> String {
    SOUND_KINDS.iter().map(|k| format!("{k} in *\n")).collect()
}

/// Pulls the kind out of a violation line (from a panic message or a log).
pub fn kind_of(line: &str) -> Option<&str> {
    let rest = &line[line.find(MARK)? + MARK.len()..];
    rest.split(':').next()
}

/// The key of a violation line: `<kind> in <site>: <message>`, with every
/// number in the message replaced by `N` (but what follows ` @ `, a
/// panic's location) and the allocator suffix dropped; a line the
/// reference allocator raised keeps its suffix (` [reference allocator
/// <name>]`, verbatim), so the reference's bug is never grouped with, or
/// tolerated as, the allocator under test's. The site is the
/// allocator call with the block's size and alignment buckets ([`Site`]);
/// a panic names its own frame, so its key is `panic: <message>` with no
/// site (one panic reached through alloc and realloc is one bug).
/// Lines from before sites existed key on the op family instead: the op's
/// name with its `worker-`/`heap-` variant folded in.
pub fn key_of(line: &str) -> Option<String> {
    let (kind, site, message, reference) = parts(line)?;
    Some(key(kind, &site, message, reference))
}

/// The family key of a violation line ([`family`]): its key with the
/// call alone for its site.
pub fn family_of(line: &str) -> Option<String> {
    let (kind, site, message, reference) = parts(line)?;
    Some(family(kind, call_of(&site), message, reference))
}

/// The key of a violation with its call alone for its site, no size or
/// alignment tiers (`alignment in realloc: block N (size N) is not aligned
/// to N`): what a signature without a code path keys on. The tiers tell
/// where the harness's sizes fell, not which code ran, so one bug of one
/// call is one group whatever sizes met it (the keys, tiers and all, stay
/// what tolerance lists: the group's variants).
pub fn family(kind: &str, call: &str, message: &str, reference: Option<&str>) -> String {
    key(kind, call, message, reference)
}

/// The call of a site as a line prints it (`alloc size 0..64 align ..16`
/// is `alloc`; a site without a block is its call).
fn call_of(site: &str) -> &str {
    site.split_once(" size ").map_or(site, |(call, _)| call)
}

/// A violation line's kind, site, message (without who raised it) and
/// reference.
fn parts(line: &str) -> Option<(&str, String, &str, Option<&str>)> {
    let rest = &line[line.find(MARK)? + MARK.len()..];
    let (kind, rest) = rest.split_once(": ")?;
    let (site, message) = match rest.strip_prefix("op #") {
        Some(r) => {
            let (_, r) = r.split_once(" `")?;
            let (op, r) = r.split_once('`')?;
            match r.strip_prefix(" (").and_then(|r| r.split_once("): ")) {
                Some((site, message)) => (site.to_string(), message),
                None => (old_family(op), r.strip_prefix(": ")?),
            }
        }
        None => ("?".to_string(), rest),
    };
    let (message, reference) = match (message.rfind(REFERENCE), message.rfind(UNDER_TEST)) {
        (Some(i), _) => (&message[..i], reference_of(&message[i..])),
        (None, Some(i)) => (&message[..i], None),
        (None, None) => (message, None),
    };
    Some((kind, site, message, reference))
}

/// The key of a violation from its parts: its kind, its site, its message
/// (without who raised it) and, when the reference side of
/// `diff_mimalloc` raised it, the reference's name. The harness builds
/// keys from its typed violations with it; [`key_of`] reads the same parts
/// out of a line (an engine log from before records), so both agree.
pub fn key(kind: &str, site: &str, message: &str, reference: Option<&str>) -> String {
    let message = normalized(message, reference);
    if kind == "panic" {
        return format!("panic: {message}");
    }
    format!("{kind} in {site}: {message}")
}

/// The key of a violation without its site, `<kind>: <message>`: what a
/// signature keyed on the allocator's code path keeps, so that one path
/// reached through several calls, size tiers and targets is one group.
pub fn what(kind: &str, message: &str, reference: Option<&str>) -> String {
    format!("{kind}: {}", normalized(message, reference))
}

/// A message with numbers as `N` (but what follows [`KEEP`]) and, for the
/// reference side of `diff_mimalloc`, its name appended.
fn normalized(message: &str, reference: Option<&str>) -> String {
    let raised_by = reference.map_or_else(String::new, |r| format!("{REFERENCE}{r}]"));
    match message.rsplit_once(KEEP) {
        Some((text, kept)) => format!("{}{KEEP}{kept}{raised_by}", numbers_to_n(text.trim())),
        None => format!("{}{raised_by}", numbers_to_n(message.trim())),
    }
}

/// The reference allocator that raised a violation line (or key), or
/// `None` when the allocator under test did.
pub fn reference_of(line: &str) -> Option<&str> {
    let rest = &line[line.rfind(REFERENCE)? + REFERENCE.len()..];
    rest.split_once(']').map(|(name, _)| name)
}

/// The op family of a line without a site: `heap-alloc` and `worker-alloc`
/// are `alloc`; `end of program` is `end`.
fn old_family(op: &str) -> String {
    if op == "end of program" {
        return "end".into();
    }
    let name = op.split_whitespace().next().unwrap_or("");
    let name = name.strip_prefix("worker-").unwrap_or(name);
    if name == "heap-alloc" { "alloc" } else { name }.to_string()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_heap_the_allocator_says_is_broken_is_told_from_a_sound_one() {
        assert!(breaks_heap("asan: heap-use-after-free READ in umm_free"));
        assert!(breaks_heap(
            "heap-check in free size 65..4K align ..16: its heap check returned false"
        ));
        assert!(breaks_heap("validator in end: heap corrupt at N"));
        assert!(!breaks_heap(
            "calloc-overflow in calloc size impossible align ..16: count N"
        ));
        assert!(!breaks_heap(
            "heap-checker in free: a kind that only starts like one"
        ));
        assert!(!breaks_heap(
            "overlap in alloc size 0..64 align ..16: block N overlaps"
        ));
    }

    #[test]
    fn lines_without_a_site_key_on_the_op_family() {
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
    fn a_reference_side_line_keys_apart_and_names_the_reference() {
        let line = |by: &str| {
            format!("allocsoak violation: overlap: op #3 `alloc size=40 align=8` (alloc size 0..64 align ..16): block 0x10+40 overlaps live block 0x10+40 [{by}]")
        };
        let under_test = line("allocator zoo:double-issue");
        let reference = line("reference allocator mimalloc");
        let want = "overlap in alloc size 0..64 align ..16: block N+N overlaps live block N+N";
        assert_eq!(key_of(&under_test).as_deref(), Some(want));
        let key = key_of(&reference).unwrap();
        assert_eq!(key, format!("{want} [reference allocator mimalloc]"));
        assert_eq!(reference_of(&reference), Some("mimalloc"));
        assert_eq!(
            reference_of(&key),
            Some("mimalloc"),
            "the key still names it"
        );
        assert_eq!(reference_of(&under_test), None);
        let panic = "allocsoak violation: panic: op #1 `alloc size=2500 align=8` (alloc size 65..4K align ..16): allocator panicked: index 43 @ src/x.rs:12 [reference allocator mimalloc-debug]";
        assert_eq!(
            key_of(panic).as_deref(),
            Some("panic: allocator panicked: index N @ src/x.rs:12 [reference allocator mimalloc-debug]")
        );
        let diff = "allocsoak violation: diff: op #0 `alloc size=100 align=8` (alloc size 65..4K align ..16): usable size 104 but mimalloc's is 112 [allocator port, reference mimalloc]";
        assert_eq!(
            key_of(diff).as_deref(),
            Some("diff in alloc size 65..4K align ..16: usable size N but mimalloc's is N")
        );
        assert_eq!(
            reference_of(diff),
            None,
            "a diff is the allocator under test's"
        );
    }

    #[test]
    fn different_messages_of_one_kind_keep_different_keys() {
        let a = "allocsoak violation: allocator-error: op #1 `free slot=0`: mimalloc: error: double free detected of block 0x10";
        let b = "allocsoak violation: allocator-error: op #1 `free slot=0`: mimalloc: error: pointer not in heap 0x10";
        assert_ne!(key_of(a), key_of(b));
    }
}
