//! Links the fuzz binaries with `-rdynamic`, so a C allocator loaded as
//! `dylib:` can be built with the fuzzer's instrumentation
//! (`-fsanitize=fuzzer-no-link,address`): the `.so` then resolves
//! `__sanitizer_cov_*` and `__asan_*` from the binary, which links the
//! sanitizer runtime and libFuzzer statically and exports nothing without
//! this. `exports.map` keeps the bundled allocators' symbols out of that
//! export, so a library of the same names binds to its own. They are
//! build-script link args rather than RUSTFLAGS so that only the binaries
//! relink when they change, and a bare `cargo fuzz build` gets them too.
//!
//! `--wrap` sends the binary's own references to `mmap`, `mmap64`,
//! `munmap` and `sbrk` (jemalloc's, a declared crate's) to shadow's
//! `__wrap_*`, which refuse those that get memory in an `os-fail` window
//! and keep the ledger of what `diff_mimalloc`'s reference mapped
//! (`shadow/src/allocator/os/`).

fn main() {
    let map = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("exports.map");
    println!("cargo:rerun-if-changed={}", map.display());
    println!("cargo:rustc-link-arg-bins=-rdynamic");
    println!("cargo:rustc-link-arg-bins=-Wl,--wrap=mmap,--wrap=mmap64,--wrap=munmap,--wrap=sbrk");
    println!(
        "cargo:rustc-link-arg-bins=-Wl,--version-script={}",
        map.display()
    );
}
