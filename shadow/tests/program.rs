//! The op language: decoding is total and deterministic, programs print as
//! text and parse back to the same program, sizes reach allocator edges.

mod common;

use shadow::op::NewSize;
use shadow::{Op, Program, Target};

#[test]
fn text_round_trips_for_every_target() {
    for target in Target::ALL {
        for data in common::inputs(21, 200, 512) {
            let program = Program::decode(target, &data);
            assert_eq!(
                Program::decode(target, &data),
                program,
                "decoding is deterministic"
            );
            let text = program.to_string();
            assert_eq!(
                text.lines().count(),
                program.ops.len() + 1,
                "one op per line after the header"
            );
            let back: Program = text.parse().unwrap_or_else(|e| panic!("{e}\n{text}"));
            assert_eq!(back, program);
        }
    }
}

#[test]
fn decoding_reaches_allocator_edges() {
    let mut sizes = Vec::new();
    let mut aligns = Vec::new();
    let mut zero_realloc = false;
    for data in common::inputs(5, 3000, 512) {
        for op in Program::decode(Target::AllocOps, &data).ops {
            match op {
                Op::Alloc { size, align, .. } => {
                    sizes.push(size);
                    aligns.push(align);
                }
                Op::Realloc {
                    to: NewSize::Zero, ..
                } => zero_realloc = true,
                _ => {}
            }
        }
    }
    let has = |s: usize| sizes.contains(&s);
    assert!(
        has(0) && has(8) && has(17) && has(4096) && has(4097) && has(65536),
        "small and threshold sizes"
    );
    assert!(
        has(512 << 10) && has(4 << 20) && has(32 << 20),
        "large thresholds"
    );
    assert!(
        sizes.iter().any(|&s| s >= isize::MAX as usize - 65535),
        "sizes near isize::MAX"
    );
    assert!(
        aligns.contains(&1) && aligns.contains(&16) && aligns.contains(&(4 << 20)),
        "alignments 1 B to 4 MiB"
    );
    assert!(
        sizes
            .iter()
            .zip(&aligns)
            .any(|(&s, &a)| s == a && a >= 4096),
        "size == align"
    );
    assert!(
        sizes.iter().zip(&aligns).any(|(&s, &a)| s <= 8 && a == 16),
        "size < align"
    );
    assert!(zero_realloc, "realloc to 0");
}

#[test]
fn emitted_test_carries_the_program_text() {
    let program =
        common::program("target alloc_ops\nalloc size=24 align=8\nrealloc slot=0 to=double\n");
    let test = Program::rust_test(
        std::slice::from_ref(&program),
        "replays_overlap",
        "zoo:double-issue",
        "",
    );
    assert!(test.contains("#[test]\nfn replays_overlap()"), "{test}");
    assert!(test.contains(&program.to_string()), "{test}");
    assert!(
        test.contains("unwrap_or_else(|_| \"zoo:double-issue\".to_string())"),
        "{test}"
    );
    assert!(
        test.contains("// shadow = { path = \"<allocsoak>/shadow\" }\n// zoo = { path = \"<allocsoak>/zoo\" }\n"),
        "{test}"
    );
    assert!(test.contains("    zoo::register();\n"), "{test}");
    // A mimalloc flavor is a feature of its own; v3 also drops v2.
    let v3 = Program::rust_test(std::slice::from_ref(&program), "t", "mimalloc-v3", "");
    assert!(
        v3.contains(r#"// shadow = { path = "<allocsoak>/shadow", default-features = false, features = ["jemalloc", "mimalloc-v3"] }"#),
        "{v3}"
    );
    let debug = Program::rust_test(
        std::slice::from_ref(&program),
        "t",
        "zoo:usable-oversize@mimalloc-debug",
        "",
    );
    assert!(
        debug.contains(r#"features = ["mimalloc-debug"] }"#),
        "{debug}"
    );
}

#[test]
fn bad_program_text_names_the_line() {
    let err = "target alloc_ops\nalloc size=24\n"
        .parse::<Program>()
        .unwrap_err();
    assert!(err.contains("line 2") && err.contains("align"), "{err}");
    let err = "alloc size=24 align=8\n".parse::<Program>().unwrap_err();
    assert!(err.contains("target"), "{err}");
    // No allocator is asked for an alignment that is not a power of two.
    let err = "target alloc_ops\nalloc size=24 align=24\n"
        .parse::<Program>()
        .unwrap_err();
    assert!(
        err.contains("line 2: `align=24` is not a power of two"),
        "{err}"
    );
}

#[test]
fn decoding_reaches_bulk_ops_huge_sizes_and_every_optional_call() {
    let mut seen = std::collections::BTreeSet::new();
    let (mut full_page, mut around_4g, mut far_huge) = (false, false, false);
    for data in common::inputs(7, 3000, 512) {
        for op in Program::decode(Target::AllocOps, &data).ops {
            let text = op.to_string();
            seen.insert(text.split(' ').next().unwrap().to_string());
            match op {
                Op::BulkAlloc { count, .. } => full_page |= count >= 4096,
                Op::Alloc { size, .. } => {
                    around_4g |= size > 1 << 32 && size <= (1 << 32) + 65536;
                    far_huge |= (1 << 40..shadow::edges::IMPOSSIBLE_FROM).contains(&size);
                }
                _ => {}
            }
        }
    }
    for name in [
        "bulk-alloc",
        "bulk-free",
        "realloc-zeroed",
        "resize-in-place",
        "free-sized",
        "realloc-plain",
        "realloc-null",
        "free-null",
        "purge",
    ] {
        assert!(seen.contains(name), "{name} is never decoded");
    }
    assert!(full_page, "a bulk allocation of a page's worth of blocks");
    assert!(around_4g, "a size just past 2^32 (a 32-bit truncation)");
    assert!(far_huge, "a huge size far past any machine's memory");
}

#[test]
fn a_differential_program_makes_only_calls_both_sides_have() {
    for data in common::inputs(8, 500, 512) {
        let program = Program::decode(Target::DiffMimalloc, &data);
        assert!(program.ops.iter().all(|op| !op.is_extra()), "{program}");
    }
}
