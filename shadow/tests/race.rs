//! Race sections put several threads inside the allocator at once: a bug
//! that only a race triggers (the zoo's racy free list) is found by them
//! and never by the same ops run one at a time; correct allocators run
//! race sections clean.

mod common;

use std::fmt::Write;

/// Worker 0 owns 24 blocks of the racy class; then, in one section (or
/// one op at a time), workers 1 and 2 free them while worker 0 allocates.
fn program(race: bool) -> String {
    let mut text = String::from("target mt_ops\n");
    for _ in 0..24 {
        writeln!(text, "worker-alloc worker=0 size=400 align=8").unwrap();
    }
    let (free, alloc) = if race {
        ("race-free", "race-alloc")
    } else {
        ("worker-free", "worker-alloc")
    };
    for i in 0..12 {
        writeln!(text, "{free} worker={} slot={i}", 1 + i % 2).unwrap();
        writeln!(text, "{alloc} worker=0 size=400 align=8").unwrap();
    }
    text.push_str("alloc size=400 align=8\n");
    text
}

#[test]
fn a_racy_free_list_is_found_by_a_race_and_never_one_op_at_a_time() {
    let serial = common::program(&program(false));
    for _ in 0..300 {
        assert_eq!(common::kind(&serial, "zoo:racy-free-list"), None);
    }
    let raced = common::program(&program(true));
    let expected = ["overlap", "contents", "realloc-prefix"];
    let found = (0..2000).find_map(|i| common::kind(&raced, "zoo:racy-free-list").map(|k| (i, k)));
    let (tries, found) = found.expect("2000 race sections never lost an update");
    eprintln!("the race showed after {} sections", tries + 1);
    assert!(expected.contains(&found.as_str()), "{found}");
}

#[test]
fn race_sections_run_clean_on_correct_allocators() {
    let raced = common::program(&program(true));
    for allocator in ["system", "mimalloc", "jemalloc"] {
        for _ in 0..200 {
            assert_eq!(common::kind(&raced, allocator), None, "{allocator}");
        }
    }
}

#[test]
fn one_remote_free_op_races_the_owner() {
    let op = common::program(
        "target mt_ops\nrace-remote-free freer=1 owner=0 size=400 align=8 count=12\nalloc size=24 align=8\n",
    );
    let found = (0..2000).find_map(|_| common::kind(&op, "zoo:racy-free-list"));
    assert!(
        found.is_some(),
        "2000 remote-free races never lost an update"
    );
    for allocator in ["system", "mimalloc", "jemalloc"] {
        for _ in 0..200 {
            assert_eq!(common::kind(&op, allocator), None, "{allocator}");
        }
    }
}
