//! A tolerated violation ends its program quietly and releases its blocks;
//! any other violation still panics. (One test: the tolerated keys are read
//! from the environment once per process.)

use shadow::violation::{key_of, tolerate};
use shadow::Program;

fn violation_of(
    text: &str,
    allocator: &'static dyn shadow::allocator::Allocator,
) -> Option<String> {
    let program: Program = text.parse().unwrap();
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        tolerate(|| {
            shadow::run(&program, allocator);
        })
    }));
    std::panic::set_hook(hook);
    result.err().map(|p| {
        p.downcast_ref::<String>()
            .cloned()
            .unwrap_or_else(|| "non-string panic".into())
    })
}

#[test]
fn known_bugs_are_got_past_and_new_ones_still_fail() {
    let double_issue = "target alloc_ops\nalloc size=40 align=8\nfree slot=0\nalloc size=40 align=8\nalloc size=40 align=8\nalloc size=24 align=8\n";
    let short_copy = "target alloc_ops\nalloc size=300 align=8\nrealloc slot=0 to=double\n";
    let both = shadow::allocator::by_name("zoo:double-issue+short-realloc-copy").unwrap();

    // The key the double issue's violation line has, as the soak files it.
    let key = key_of(
        "allocsoak violation: overlap: op #3 `alloc size=40 align=8`: block 0x5020+40 overlaps live block 0x5020+40 [allocator zoo:double-issue+short-realloc-copy]",
    )
    .unwrap();
    let dir = std::env::temp_dir().join(format!("allocsoak-tolerance-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tolerate"), format!("{key}\n")).unwrap();
    std::env::set_var("ALLOCSOAK_TOLERATE", dir.join("tolerate"));

    // Run often: the overlapping block must be forgotten and the rest
    // freed, or the zoo's free list (and ASan, in a fuzz build) would see
    // a double free.
    for _ in 0..200 {
        assert_eq!(violation_of(double_issue, both), None);
    }
    let second = violation_of(short_copy, both).expect("the second bug still fails");
    assert!(second.contains("realloc-prefix"), "{second}");
    std::fs::remove_dir_all(dir).unwrap();
}
