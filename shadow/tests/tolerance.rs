//! Getting past known bugs: a tolerated violation that leaves the heap
//! sound is counted and the program goes on with the block; any other
//! tolerated violation, and a panic inside the allocator, ends its program
//! quietly and releases its blocks; anything not tolerated still panics.
//! (One test: the settings, and the tolerated keys, are put in place once
//! per process.)

use shadow::tolerance::tolerate;
use shadow::Program;

fn violation_of(text: &str, allocator: &str) -> Option<String> {
    let program: Program = text.parse().unwrap();
    zoo::register();
    let allocator = shadow::allocator::by_name(allocator).unwrap();
    // Silenced once, under the hook the harness wraps on its first call,
    // as an engine's hook is in a fuzz binary.
    static QUIET: std::sync::Once = std::sync::Once::new();
    QUIET.call_once(|| std::panic::set_hook(Box::new(|_| {})));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        tolerate(|| {
            shadow::run(&program, allocator);
        })
    }));
    result.err().map(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .unwrap_or_else(|| "non-string panic".into())
    })
}

#[test]
fn known_bugs_are_got_past_and_new_ones_still_fail() {
    let dir = std::env::temp_dir().join(format!("allocsoak-tolerance-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    // The double issue's key as the soak files it, a pattern for every
    // alignment violation, and one for every panic.
    let keys = "overlap in alloc size 0..64 align ..16: block N+N overlaps live block N+N\n\
                alignment in *\n\
                usable-size in *\n\
                panic: *\n";
    std::fs::write(dir.join("tolerate"), keys).unwrap();
    shadow::settings::install(shadow::settings::Settings {
        tolerate: Some(dir.join("tolerate")),
        ..Default::default()
    })
    .expect("nothing read the settings before");

    // Ends its program: the overlapping block must be forgotten and the
    // rest freed, or the zoo's free list (and ASan, in a fuzz build) would
    // see a double free. Run often.
    let double_issue = "target alloc_ops\nalloc size=40 align=8\nfree slot=0\nalloc size=40 align=8\nalloc size=40 align=8\nalloc size=24 align=8\n";
    let short_copy = "target alloc_ops\nalloc size=300 align=8\nrealloc slot=0 to=double\n";
    let both = "zoo:double-issue+short-realloc-copy";
    for _ in 0..200 {
        assert_eq!(violation_of(double_issue, both), None);
    }
    let second = violation_of(short_copy, both).expect("the second bug still fails");
    assert!(second.contains("realloc-prefix"), "{second}");

    // Goes on: the misaligned block is kept, and growing it reaches the
    // bug behind the alignment bug.
    let behind = "target alloc_ops\nalloc size=8 align=16\nrealloc slot=0 to=64\n";
    let line = violation_of(behind, "zoo:small-underalign+misaligned-realloc-short")
        .expect("the bug behind the tolerated one is reached");
    assert!(
        line.contains("realloc-prefix") && line.contains("op #1"),
        "{line}"
    );
    assert_eq!(violation_of(behind, "zoo:small-underalign"), None);

    // A panic inside the allocator is a finding; tolerated, it ends its
    // program, and the allocator serves the next one.
    let panics = "target alloc_ops\nalloc size=100 align=8\nalloc size=2500 align=8\nalloc size=100 align=8\n";
    for _ in 0..50 {
        assert_eq!(violation_of(panics, "zoo:panic-class"), None);
    }
    let after = "target alloc_ops\nalloc size=300 align=8\nrealloc slot=0 to=double\nalloc size=2500 align=8\n";
    let line = violation_of(after, "zoo:panic-class+short-realloc-copy").unwrap();
    assert!(line.contains("realloc-prefix"), "{line}");
    let on_realloc = "target alloc_ops\nalloc size=100 align=8\nrealloc slot=0 to=2500\n";
    assert_eq!(
        violation_of(on_realloc, "zoo:panic-class"),
        None,
        "one panic, however reached"
    );

    // A block cut short goes on at the size it has: an in-place resize
    // that claims 1000 bytes of a 600-byte block is flagged, and the block
    // is held at its usable size, so no later realloc or free is asked to
    // copy or free the 1000 (a second report of the one lie).
    let overclaim: Program =
        "target alloc_ops\nalloc size=600 align=8\nresize-in-place slot=0 to=1000 extra=0\n"
            .parse()
            .unwrap();
    zoo::register();
    let zoo = shadow::allocator::by_name("zoo:expand-overclaims").unwrap();
    tolerate(|| {
        let mut executor = shadow::Executor::new(zoo, shadow::Mode::Checked);
        for (i, op) in overclaim.ops.iter().enumerate() {
            executor.step(i, op);
        }
        let block = executor.shadow().blocks()[0];
        assert!(
            block.usable < 1000 && block.size == block.usable,
            "held at {} bytes, usable {}",
            block.size,
            block.usable
        );
        executor.finish(overclaim.ops.len());
    });
    std::fs::remove_dir_all(dir).unwrap();
}
