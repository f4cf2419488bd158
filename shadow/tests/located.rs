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
    // A panic hook boxed at the size of the program's blocks (96 bytes,
    // as `stale-link` asks its base for each):
    // a child that freed it as it set its own would be handed it for the
    // program's first block, and watch another word than the one the
    // parent found changed (as any heap difference from the parent's
    // would make it).
    let previous = std::panic::take_hook();
    let pad = [0u8; 80];
    std::panic::set_hook(Box::new(move |info| {
        std::hint::black_box(&pad);
        previous(info)
    }));
    let dir = std::env::temp_dir().join(format!("allocsoak-located-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let record_file = dir.join("record.json");
    shadow::settings::install(shadow::settings::Settings {
        record: Some(record_file.clone()),
        ..Default::default()
    })
    .expect("nothing read the settings before");
    let replay = common::violation(&program, "zoo:stale-link").expect("the bug is met");
    assert!(
        replay.contains("contents: op #4 `free slot=1`") && replay.contains("by this op's calls"),
        "{replay}"
    );
    let written = std::fs::read_to_string(&record_file).expect("the replay writes its record");
    let record = report::Record::from_json(&written).unwrap();
    assert_eq!(record.kind, "contents");
    assert!(
        record.key.starts_with("contents in free "),
        "{}",
        record.key
    );
    // The replay's child watched the changed word during op #4: the
    // store is the free-list push's back-link, whichever entry point ran
    // it, and that function keys the violation.
    assert_eq!(record.path.len(), 1, "{:?}", record.path);
    assert!(
        record.path[0].starts_with("zoo::") && record.path[0].ends_with("push_stale_list"),
        "{:?}",
        record.path
    );

    // The same store, reached through a realloc: its new block is the one
    // popped (slot 0's old block, freed first), and its free of the old
    // one links into it: the new block lost its prefix. One writer, one key.
    let program = common::program(
        "target alloc_ops\nalloc size=80 align=8\nalloc size=80 align=8\nfree slot=0\n\
         realloc-plain slot=0 to=72\n",
    );
    let replay = common::violation(&program, "zoo:stale-link").expect("the bug is met");
    assert!(replay.contains("realloc-prefix: op #3"), "{replay}");
    let written = std::fs::read_to_string(&record_file).expect("the replay writes its record");
    let prefix = report::Record::from_json(&written).unwrap();
    assert_eq!(prefix.path, record.path);
    std::fs::remove_dir_all(dir).unwrap();
}
