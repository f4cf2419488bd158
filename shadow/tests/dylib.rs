//! A C allocator loaded from a shared library (`dylib:path:prefix`): a tiny
//! allocator the test compiles runs clean, the same source with a planted
//! bug is caught, zeroed requests reach its own calloc, its own calls
//! beyond malloc and its own heap API run, and an `aligned_alloc`-only
//! library is only asked for sizes C11 allows.

mod common;

use std::path::PathBuf;
use std::process::Command;

use shadow::allocator::Resize;
use shadow::{Program, Target};

/// Compiles `testdata/tiny_alloc.c` into a shared library.
fn build(name: &str, defines: &[&str]) -> PathBuf {
    let out = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(format!("{name}.so"));
    let src = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/testdata/tiny_alloc.c");
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-O1", "-o"])
        .arg(&out)
        .arg(&src)
        .args(defines)
        .status()
        .expect("run cc");
    assert!(status.success(), "cc failed to build {}", out.display());
    out
}

#[test]
fn a_c_allocator_from_a_shared_library_runs_clean() {
    let lib = build("tiny_alloc", &[]);
    let name = format!("dylib:{}:t_", lib.display());
    for target in [Target::AllocOps, Target::HeapApi, Target::MtOps] {
        common::assert_clean(target, &name, 11, 100);
    }
}

#[test]
fn a_planted_bug_in_a_shared_library_is_found() {
    let lib = build("tiny_alloc_bug", &["-DPLANTED_BUG"]);
    let name = format!("dylib:{}:t_", lib.display());
    let program: Program = "target alloc_ops\nalloc size=40 align=16\nalloc size=24 align=16\n"
        .parse()
        .unwrap();
    assert_eq!(common::kind(&program, &name).as_deref(), Some("alignment"));
}

/// A block layout that puts every block off malloc's alignment (a 20-byte
/// header, as umm_malloc's 4-byte one) is one bug whichever call met it:
/// a small malloc, a large realloc of null, a block that fills a fixed
/// region, have one key, with no call and no tier in it. A bug of some
/// sizes only keeps its call's key.
#[test]
fn every_block_off_alignment_is_one_key_for_every_call() {
    let key = |lib: &PathBuf, text: &str| {
        let name = format!("dylib:{}:t_", lib.display());
        let line = common::violation(&common::program(text), &name).expect("a violation");
        report::key::key_of(&line).expect("a violation line")
    };
    let layout = build("tiny_alloc_header20", &["-DHEADER=20"]);
    let small = key(&layout, "target alloc_ops\nalloc size=40 align=16\n");
    let large = key(&layout, "target alloc_ops\nrealloc-null size=5000\n");
    assert_eq!(small, large);
    // A block that took the whole region leaves no room to probe: a
    // misalignment below a word is judged the layout's from it alone.
    let full = build(
        "tiny_alloc_header20_full",
        &["-DHEADER=20", "-DBUDGET=4096"],
    );
    assert_eq!(
        key(&full, "target alloc_ops\nalloc size=4090 align=16\n"),
        small
    );
    assert!(
        small.starts_with("alignment in any-call: ") && small.ends_with("all @ 4-aligned"),
        "{small}"
    );
    let some_sizes = build("tiny_alloc_bug", &["-DPLANTED_BUG"]);
    let planted = key(&some_sizes, "target alloc_ops\nalloc size=24 align=16\n");
    assert!(
        planted.starts_with("alignment in alloc size 0..64"),
        "{planted}"
    );
}

#[test]
fn a_missing_library_or_symbol_is_a_clear_error() {
    let err = shadow::allocator::by_name("dylib:/nonexistent/liballoc.so")
        .err()
        .unwrap();
    assert!(err.contains("cannot load allocator library"), "{err}");
    let lib = build("tiny_alloc_noprefix", &[]);
    let err = shadow::allocator::by_name(&format!("dylib:{}", lib.display()))
        .err()
        .unwrap();
    assert!(
        err.contains("has no `malloc`") && err.contains("prefix"),
        "{err}"
    );
    // A global its firmware would define, as umm_malloc's
    // `UMM_MALLOC_CFG_HEAP_SIZE`: the hint is the link, not the path.
    let err = load_error(
        "needs_firmware",
        "extern unsigned firmware_heap_size;\nunsigned t_heap_size(void) { return firmware_heap_size; }\n",
    );
    assert!(
        err.contains("undefined symbol: firmware_heap_size")
            && err.contains("-Wl,--no-undefined")
            && !err.contains("absolute path")
            && !err.contains('\n'),
        "{err}"
    );
    // Thread-locals in the initial-exec model, as jemalloc's default
    // build has: dlopen has no room for them.
    let err = load_error(
        "initial_exec",
        "static __thread __attribute__((tls_model(\"initial-exec\"))) char cache[1 << 16];\n\
         char *t_cache(void) { return cache; }\n",
    );
    assert!(
        err.contains("static TLS") && err.contains("--disable-initial-exec-tls"),
        "{err}"
    );
}

/// Why the library `name`, compiled plain from `source`, does not load as
/// a `dylib:` allocator.
fn load_error(name: &str, source: &str) -> String {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR"));
    let src = dir.join(format!("{name}.c"));
    std::fs::write(&src, source).unwrap();
    let lib = dir.join(format!("{name}.so"));
    let status = Command::new("cc")
        .args(["-shared", "-fPIC", "-o"])
        .arg(&lib)
        .arg(&src)
        .status()
        .expect("run cc");
    assert!(status.success());
    shadow::allocator::by_name(&format!("dylib:{}:t_", lib.display()))
        .err()
        .unwrap()
}

#[test]
fn a_calloc_that_does_not_zero_is_caught() {
    let lib = build("tiny_alloc_dirty_calloc", &["-DDIRTY_CALLOC"]);
    let name = format!("dylib:{}:t_", lib.display());
    // A zeroed request malloc's alignment serves is the library's calloc.
    for text in [
        "target alloc_ops\nalloc size=40 align=8 zeroed\n",
        "target alloc_ops\ncalloc count=5 size=8\n",
    ] {
        let program = common::program(text);
        assert_eq!(
            common::kind(&program, &name).as_deref(),
            Some("zeroed"),
            "{text}"
        );
    }
}

/// A library's own aligned realloc, zeroed realloc, in-place expand,
/// sized free and good size run, instead of the adapter's emulation: its
/// planted bug in the aligned realloc is found, which the emulation (alloc,
/// copy, free here) hid.
#[test]
fn a_c_allocators_own_calls_beyond_malloc_run() {
    let program =
        common::program("target alloc_ops\nalloc size=100 align=64\nrealloc slot=0 to=300\n");
    let more = build("tiny_alloc_more", &["-DMORE_API"]);
    let name = format!("dylib:{}:t_", more.display());
    assert_eq!(common::violation(&program, &name), None);
    common::assert_clean(Target::AllocOps, &name, 12, 100);
    let lib = shadow::allocator::by_name(&name).unwrap();
    let extras = lib.extras().unwrap();
    assert_eq!(
        extras.good_size(24, 8),
        Some(shadow::allocator::GoodSize::AtLeastAsked(24))
    );

    let buggy = format!(
        "dylib:{}:t_",
        build(
            "tiny_alloc_short_realloc_aligned",
            &["-DMORE_API", "-DSHORT_REALLOC_ALIGNED"]
        )
        .display()
    );
    assert_eq!(
        common::kind(&program, &buggy).as_deref(),
        Some("realloc-prefix")
    );
    // Without the library's own call, the adapter's emulation runs, and the
    // bug in the library's code is never reached.
    let emulated = format!(
        "dylib:{}:t_",
        build("tiny_alloc_short_emulated", &["-DSHORT_REALLOC_ALIGNED"]).display()
    );
    assert_eq!(common::violation(&program, &emulated), None);
}

/// A library's own heap API (mimalloc's names) runs `heap_api`'s heap ops:
/// clean on the correct heaps, and its planted bug in the heap's zeroed
/// allocation is found, which the emulation (membership kept here, the
/// library's `calloc`) never reaches.
#[test]
fn a_c_allocators_own_heap_api_runs() {
    let program = common::program(
        "target heap_api\nheap-new\nheap-alloc heap=0 size=40 align=8\n\
         heap-alloc heap=0 size=100 align=8 zeroed\nheap-alloc heap=0 size=64 align=128 zeroed\n\
         heap-visit heap=0\nheap-delete heap=0\nheap-new\nheap-alloc heap=0 size=24 align=8\n\
         heap-destroy heap=0\n",
    );
    let own = format!(
        "dylib:{}:t_",
        build("tiny_alloc_heaps", &["-DHEAP_API"]).display()
    );
    let lib = shadow::allocator::by_name(&own).unwrap();
    let heaps = lib.heaps().expect("its own heap API");
    let h = heaps.new_heap().unwrap();
    // SAFETY: `h` came from `new_heap` just above and is live; 8 is a power of two
    // malloc serves. `p` is only compared as an address after this.
    let p = unsafe { heaps.alloc_in(h, 48, 8, false) };
    assert_eq!(heaps.contains(h, p as usize), Some(true));
    assert_eq!(heaps.visit(h), Some(vec![(p as usize, 48)]));
    // SAFETY: `h` is live; it and its block `p` are not used again.
    unsafe { heaps.destroy(h) };
    assert_eq!(common::violation(&program, &own), None);
    common::assert_clean(Target::HeapApi, &own, 13, 100);

    let dirty = |name, defines: &[&str]| format!("dylib:{}:t_", build(name, defines).display());
    let buggy = dirty(
        "tiny_alloc_heaps_dirty",
        &["-DHEAP_API", "-DHEAP_ZALLOC_DIRTY"],
    );
    assert_eq!(common::kind(&program, &buggy).as_deref(), Some("zeroed"));
    // Without its heap API the heaps are emulated, and the bug in the
    // library's heap code is never reached.
    let emulated = dirty("tiny_alloc_heaps_emulated", &["-DHEAP_ZALLOC_DIRTY"]);
    assert!(shadow::allocator::by_name(&emulated)
        .unwrap()
        .heaps()
        .is_none());
    assert_eq!(common::violation(&program, &emulated), None);
}

/// A heap's block gets the library's own zeroed realloc in its heap
/// (`heap_rezalloc`), in-place expand and sized free: clean on the correct
/// library, and its planted bug in `heap_rezalloc` is found, which the
/// plain blocks' `rezalloc` in the same build never reaches.
#[test]
fn a_heap_blocks_zeroed_realloc_expand_and_sized_free_are_the_librarys_own() {
    let program = common::program(
        "target heap_api\nheap-new\nheap-alloc heap=0 size=40 align=8\n\
         realloc-zeroed slot=0 to=200\nresize-in-place slot=0 to=100 extra=0\nheap-visit heap=0\n\
         free-sized slot=0\nheap-alloc heap=0 size=24 align=64\nrealloc-zeroed slot=0 to=300\n\
         heap-destroy heap=0\n",
    );
    let defines = ["-DHEAP_API", "-DMORE_API"];
    let own = format!(
        "dylib:{}:t_",
        build("tiny_alloc_heap_more", &defines).display()
    );
    let lib = shadow::allocator::by_name(&own).unwrap();
    let heaps = lib.heaps().expect("its own heap API");
    let h = heaps.new_heap().unwrap();
    // SAFETY: `h` is live, and each call gets the block the previous one returned,
    // with its size and align (`t_expand` leaves the block as it is, still 96 bytes for
    // `free_sized_in`); `destroy` ends `h` last. Assumes the 48-byte `alloc_in` succeeds (null
    // not checked); a null `q` fails the `visit` assert before it is used.
    unsafe {
        let p = heaps.alloc_in(h, 48, 8, false);
        let q = heaps
            .realloc_zeroed_in(
                h,
                p,
                Resize {
                    old: 48,
                    align: 8,
                    to: 96,
                },
            )
            .expect("heap_rezalloc");
        assert_eq!(heaps.visit(h), Some(vec![(q as usize, 96)]));
        let shrink = Resize {
            old: 96,
            align: 8,
            to: 64,
        };
        assert!(heaps.resize_in_place_in(h, q, shrink, 0).is_some());
        assert!(heaps.free_sized_in(h, q, 96, 8));
        assert_eq!(heaps.visit(h), Some(vec![]));
        heaps.destroy(h);
    }
    assert_eq!(common::violation(&program, &own), None);
    common::assert_clean(Target::HeapApi, &own, 14, 100);

    let buggy = format!(
        "dylib:{}:t_",
        build(
            "tiny_alloc_heap_rezalloc_dirty",
            &["-DHEAP_API", "-DMORE_API", "-DHEAP_REZALLOC_DIRTY"]
        )
        .display()
    );
    assert_eq!(common::kind(&program, &buggy).as_deref(), Some("zeroed"));
    let plain =
        common::program("target alloc_ops\nalloc size=40 align=8\nrealloc-zeroed slot=0 to=200\n");
    assert_eq!(common::violation(&plain, &buggy), None);
}

#[test]
fn aligned_alloc_is_asked_only_for_multiples_of_the_alignment() {
    let lib = build("tiny_alloc_aligned_alloc", &["-DALIGNED_ALLOC_ONLY"]);
    let name = format!("dylib:{}:t_", lib.display());
    let program = common::program(
        "target alloc_ops\nalloc size=40 align=64\nalloc size=100 align=32 zeroed\nrealloc slot=0 to=double\n",
    );
    assert_eq!(common::violation(&program, &name), None);
    common::assert_clean(Target::AllocOps, &name, 12, 100);
}

/// The budget-limited build, declared as a config's C allocator with
/// `arena = 65536` declares it (`linked_c(..).with_arena(..)` in the glue).
fn over_its_region() -> Box<dyn shadow::allocator::Allocator> {
    // Its own copy: a library loaded twice is one library, one budget.
    let lib = build("tiny_alloc_region", &["-DBUDGET=65536"]);
    let spec = format!("{}:t_", lib.display());
    Box::new(
        shadow::allocator::Dylib::open(&spec)
            .unwrap()
            .with_arena(65536),
    )
}

#[test]
fn a_c_allocator_over_a_fixed_region_may_refuse_what_cannot_fit() {
    let program = common::program(
        "target alloc_ops\nalloc size=40000 align=16\nalloc size=40000 align=16\nfree slot=0\nalloc size=40000 align=16\n",
    );
    // Undeclared, its refusal of a second 40000 bytes is a `null`.
    let lib = build("tiny_alloc_budget", &["-DBUDGET=65536"]);
    let undeclared = format!("dylib:{}:t_", lib.display());
    assert_eq!(common::kind(&program, &undeclared).as_deref(), Some("null"));
    // With its region declared, the refusal is legitimate, and the rest runs clean.
    shadow::allocator::declare("tiny-region", over_its_region);
    assert_eq!(common::violation(&program, "tiny-region"), None);
    common::assert_clean(Target::AllocOps, "tiny-region", 13, 100);
}

/// A C allocator's `good_size` is held to what its API family promises,
/// mimalloc's "Generally, `mi_usable_size(mi_malloc(size)) ==
/// mi_good_size(size)`": at least the request by default, so an estimate
/// above the usable size is not a finding and one below the request is;
/// exactly where it is declared exact (`good_size_exact_up_to`).
#[test]
fn a_c_allocators_good_size_is_held_to_its_declared_contract() {
    let program = common::program("target alloc_ops\nalloc size=100 align=8\n");
    let rounds = build(
        "tiny_alloc_good_rounds",
        &["-DMORE_API", "-DGOOD_SIZE_ROUNDS"],
    );
    let name = format!("dylib:{}:t_", rounds.display());
    assert_eq!(common::violation(&program, &name), None);
    let short = build(
        "tiny_alloc_good_short",
        &["-DMORE_API", "-DGOOD_SIZE_SHORT"],
    );
    let name = format!("dylib:{}:t_", short.display());
    assert_eq!(common::kind(&program, &name).as_deref(), Some("good-size"));

    let spec = format!("{}:t_", rounds.display());
    let exact: &'static dyn shadow::allocator::Allocator = Box::leak(Box::new(
        shadow::allocator::Dylib::open(&spec)
            .unwrap()
            .with_good_size_exact_up_to(64 << 10),
    ));
    common::caught_as(&program, exact, "good-size");
}
