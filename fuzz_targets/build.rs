//! Links the fuzz binaries with `-rdynamic`, so a C allocator loaded as
//! `dylib:` can be built with the fuzzer's instrumentation
//! (`-fsanitize=fuzzer-no-link,address`): the `.so` then resolves
//! `__sanitizer_cov_*` and `__asan_*` from the binary, which links the
//! sanitizer runtime and libFuzzer statically and exports nothing without
//! this. It is a build-script link arg rather than a RUSTFLAGS one so that
//! only the binaries relink when it changes, and a bare `cargo fuzz build`
//! gets it too.

fn main() {
    println!("cargo:rustc-link-arg-bins=-rdynamic");
}
