//! A replay finds a block changed behind the program's back at the call
//! that changed it, not where the block is next used: its contents
//! violation is of that call, so its key is that call's code path, however
//! the fuzzing process came upon it. (One test: whether this process is a
//! replay is in the settings, put in place once per process.)

mod common;

#[test]
fn a_replay_finds_a_changed_block_at_the_call_that_changed_it() {
    // `stale-link`: freeing slot 1 writes a link into slot 0 (popped from
    // the free list, live again). Fuzzing meets it at op #5, before slot 0
    // is freed (`zoo.rs`); a replay, right after op #4.
    let program = common::program(
        "target alloc_ops\nalloc size=80 align=8\nfree slot=0\nalloc size=80 align=8\n\
         alloc size=80 align=8\nfree slot=1\nfree slot=0\n",
    );
    let dir = std::env::temp_dir().join(format!("allocsoak-located-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let record = dir.join("record.json");
    shadow::settings::install(shadow::settings::Settings {
        record: Some(record.clone()),
        ..Default::default()
    })
    .expect("nothing read the settings before");
    let replay = common::violation(&program, "zoo:stale-link").expect("the bug is met");
    assert!(
        replay.contains("contents: op #4 `free slot=1`") && replay.contains("by this op's calls"),
        "{replay}"
    );
    let written = std::fs::read_to_string(&record).expect("the replay writes its record");
    let record = report::Record::from_json(&written).unwrap();
    assert_eq!(record.kind, "contents");
    assert!(
        record.key.starts_with("contents in free "),
        "{}",
        record.key
    );
    std::fs::remove_dir_all(dir).unwrap();
}
