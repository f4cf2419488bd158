//! Race sections make every call a block takes from another thread, not
//! only alloc, free and realloc: zeroed allocations, sized frees, in-place
//! resizes and usable-size queries, each checked as its serial op is. And
//! a block's slack is written without a usable-size probe too.

mod common;

use std::fmt::Write;

use shadow::allocator::Allocator;

/// `zoo:<bug>` over `system`, made on the calling thread (the zoo's own).
fn zoo(bug: &str) -> &'static dyn Allocator {
    let base = common::by_name("system").unwrap();
    let name = format!("zoo:{bug}@system");
    Box::leak(Box::new(zoo::Zoo::new(&name, bug, base).unwrap()))
}

/// Blocks of many sizes made on the main thread, then one section in
/// which four workers make every call on them and on new ones at once.
fn every_call() -> String {
    let mut text = String::from("target mt_ops\n");
    let sizes = [24, 100, 1000, 5000, 7000, 70_000];
    for (i, size) in sizes.iter().cycle().take(24).enumerate() {
        let zeroed = if i % 3 == 0 { " zeroed" } else { "" };
        writeln!(text, "alloc size={size} align=8{zeroed}").unwrap();
    }
    for i in 0..6 {
        let w = |k: usize| (i + k) % 4;
        let to = ["double", "half", "+1", "same", "4000", "-1"][i];
        writeln!(
            text,
            "race-alloc worker={} size={} align=16 zeroed",
            w(0),
            sizes[i]
        )
        .unwrap();
        writeln!(text, "race-free worker={} slot={i} sized", w(1)).unwrap();
        writeln!(
            text,
            "race-resize worker={} slot={} to={to} extra=16",
            w(2),
            6 + i
        )
        .unwrap();
        writeln!(text, "race-usable-size worker={} slot={}", w(3), 12 + i).unwrap();
    }
    text.push_str("usable-size slot=newest\n");
    text
}

#[test]
fn every_race_call_runs_clean_on_correct_allocators() {
    let program = common::program(&every_call());
    for allocator in ["system", "mimalloc", "jemalloc"] {
        for _ in 0..100 {
            common::run(&program, allocator).unwrap_or_else(|line| panic!("{allocator}: {line}"));
        }
    }
}

/// The text of each new step reads back as the same op, flags and all.
#[test]
fn race_calls_read_back_from_their_text() {
    let program = common::program(&every_call());
    assert_eq!(common::program(&program.to_string()), program);
    let text = program.to_string();
    for word in [
        "zeroed",
        "sized",
        "race-resize",
        "extra=16",
        "race-usable-size",
    ] {
        assert!(text.contains(word), "{word} missing from\n{text}");
    }
}

/// A zeroed request made off the zoo's own thread keeps a free-list link
/// in its first word: only a race section's zeroed allocation reaches it.
/// The same requests on the main thread, and the workers' plain ones, run
/// clean.
#[test]
fn a_zeroed_block_dirty_only_off_the_main_thread_is_found_by_a_race() {
    let zoo = zoo("xthread-zeroed-link");
    let serial = "target mt_ops\nalloc size=7000 align=8 zeroed\nworker-alloc worker=1 size=7000 align=8\nrace-alloc worker=2 size=7000 align=8\n";
    let _one = common::exclusive(zoo.name());
    common::caught(&common::program(serial), zoo).expect("clean off the race's zeroed call");
    let raced = "target mt_ops\nrace-alloc worker=2 size=7000 align=8 zeroed\n";
    let line = common::caught_as(&common::program(raced), zoo, "zeroed");
    assert!(line.contains("race-alloc"), "{line}");
}

/// A sized free from another thread and an in-place resize there reach
/// the zoo's sized-free and in-place bugs, as their serial ops do.
#[test]
fn sized_frees_and_resizes_in_a_race_reach_the_sized_and_in_place_calls() {
    let cases = [
        (
            "sized-free-misclass",
            "target mt_ops\nalloc size=100 align=8\nrace-free worker=1 slot=0 sized\nalloc size=4000 align=8\nusable-size slot=newest\n",
        ),
        (
            "expand-overclaims",
            "target mt_ops\nalloc size=1000 align=8\nrace-resize worker=1 slot=0 to=+1 extra=0\n",
        ),
    ];
    for (bug, text) in cases {
        let zoo = zoo(bug);
        let _one = common::exclusive(zoo.name());
        let plain = text.replace(" sized", "").replace(
            "race-resize worker=1 slot=0 to=+1 extra=0",
            "race-realloc worker=1 slot=0 to=+1",
        );
        common::caught(&common::program(&plain), zoo)
            .unwrap_or_else(|line| panic!("{bug}: the plain calls reached it: {line}"));
        common::caught_as(&common::program(text), zoo, "usable-size");
    }
}

/// One new block in four gets its slack written when it comes, with no
/// usable-size probe drawn: a footer the allocator keeps in the usable
/// size it reports breaks, and its free panics.
#[test]
fn the_slack_of_new_blocks_is_written_without_a_probe() {
    let zoo = zoo("slack-footer");
    let _one = common::exclusive(zoo.name());
    let text = "target alloc_ops\n".to_string() + &"alloc size=9000 align=8\n".repeat(16);
    let line = common::caught_as(&common::program(&text), zoo, "panic");
    assert!(line.contains("footer"), "{line}");
}
