//! A program's blocks get the seeds its ops give them, so a replay of one
//! input in a fresh process checks the windows of a large block the fuzz
//! process checked, and finds what it found. (One test: the last program
//! seen is process-wide.)

mod common;

use shadow::executor::seed_base_for;

#[test]
fn a_program_gets_the_seeds_its_ops_give_it_whatever_ran_before() {
    let large = common::program("target alloc_ops\nalloc size=140000 align=8 zeroed\n");
    let small = common::program("target alloc_ops\nalloc size=100 align=8\n");
    let first = seed_base_for(&large);
    assert_ne!(seed_base_for(&small), first, "another program, other seeds");
    assert_eq!(
        seed_base_for(&large),
        first,
        "after other programs, as in a replay"
    );
    assert_ne!(
        seed_base_for(&large),
        first,
        "run again at once: memory its last run left must not hold its pattern"
    );
}
