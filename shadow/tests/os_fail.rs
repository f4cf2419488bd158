//! The allocator's OS layer refusing on demand (`os-fail`): a request it
//! cannot serve from what it holds fails cleanly in the window, is served
//! after it, and a correct allocator runs such programs clean.

mod common;

/// A small block kept across the window; in the window, a 24 MiB request
/// (new memory: mimalloc's huge segment) and a small one; after it, the
/// large request again.
const PROGRAM: &str = "target alloc_ops
alloc size=100 align=8
os-fail ops=2
alloc size=25165824 align=8
alloc size=64 align=16
alloc size=25165824 align=8
";

#[test]
fn mimalloc_fails_cleanly_in_the_window_and_serves_after_it() {
    let stats = common::run(&common::program(PROGRAM), "mimalloc").expect("clean");
    // The large request in the window (and the small one, should it need
    // a new segment); a null after it would be a violation.
    assert!(stats.failed >= 1 && stats.skipped == 0, "{stats:?}");
}

#[test]
fn an_allocator_without_an_os_layer_to_fail_skips_the_op() {
    // Outside the fuzz binaries (linked with `--wrap=mmap`), jemalloc's
    // OS calls are the C library's: nothing to refuse.
    for name in ["system", "jemalloc"] {
        let stats = common::run(&common::program(PROGRAM), name).expect(name);
        assert_eq!((stats.failed, stats.skipped), (0, 1), "{name}: {stats:?}");
    }
}
