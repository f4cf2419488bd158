//! Whose code a function is: the allocator's, or the harness's, Rust's
//! libraries' or a runtime's ([`is_allocator_code`]). Only the allocator's
//! counters are watched and named in a path (`super`).

/// The crates of Rust's standard library and of the harness (`shadow`,
/// `report`, the fuzz targets and everything they link but allocators):
/// their code is never the allocator's, and the fuzz builds compile them
/// without coverage but a few ([`uncovered_crates`]). `harness_crates_are_named`
/// checks this list against the dependency graph and the fuzz binaries.
const NOT_ALLOCATOR: [&str; 47] = [
    "std",
    "core",
    "alloc",
    "hashbrown",
    "shadow",
    "report",
    "allocsoak_fuzz",
    "fuzz_targets",
    "alloc_ops",
    "heap_api",
    "mt_ops",
    "diff_mimalloc",
    "workload",
    "drift",
    "miri",
    "allocsoak_declared",
    "libfuzzer_sys",
    "honggfuzz",
    "arbitrary",
    "allocator_api2",
    "libc",
    "libloading",
    "memmap2",
    "object",
    "memchr",
    "rustc_demangle",
    "addr2line",
    "gimli",
    "perf_event_open_sys",
    "fallible_iterator",
    "stable_deref_trait",
    "serde",
    "serde_core",
    "serde_json",
    "itoa",
    "zmij",
    "ryu",
    "sha2",
    "digest",
    "block_buffer",
    "crypto_common",
    "generic_array",
    "typenum",
    "cpufeatures",
    "lazy_static",
    "rustc_version",
    "semver",
];

/// The harness's crates that keep their coverage in the fuzz builds: the
/// entry points and the input's first decoding (`arbitrary`). An allocator
/// with no instrumentation of its own (`system`) then still gives the
/// fuzzer the shape of its inputs to go by, at a few dozen counters.
const COVERED_HARNESS: [&str; 11] = [
    "allocsoak_fuzz",
    "fuzz_targets",
    "alloc_ops",
    "heap_api",
    "mt_ops",
    "diff_mimalloc",
    "workload",
    "allocsoak_declared",
    "libfuzzer_sys",
    "honggfuzz",
    "arbitrary",
];

/// The crates the fuzz builds compile without sanitizer coverage
/// (`fuzz_targets/rustc-wrapper`): the harness's but [`COVERED_HARNESS`]
/// (Rust's own libraries come compiled, without it).
pub fn uncovered_crates() -> impl Iterator<Item = &'static str> {
    NOT_ALLOCATOR
        .into_iter()
        .filter(|c| !COVERED_HARNESS.contains(c))
}

/// Whether `name` (demangled) is the allocator's code, not the harness's,
/// Rust's libraries' or a runtime's. A function belongs to the crate of
/// its path, or for a method `<Type as Trait>::f` to the crate of `Type`
/// (of `Trait` when `Type` is a primitive: `<u32 as arbitrary::Arbitrary>`).
/// A name with no path is C: the allocator's, but the sanitizer runtime's
/// `__` functions and the fuzzer's entry points; a C++ one (mangled, as a
/// stack names it) too, but libFuzzer's (`fuzzer::`), the sanitizer
/// runtimes' (`__asan::`, `__sanitizer::`) and C++'s own (`std::`). The
/// zoo (crate `zoo`) is an allocator.
pub fn is_allocator_code(name: &str) -> bool {
    let name = name.trim_start_matches('<');
    if !name.contains("::") {
        const RUNTIME: [&str; 3] = ["__", "LLVMFuzzer", "rust_fuzzer_"];
        let cpp_runtime = |n: &str| n == "fuzzer" || n == "std" || n.starts_with("__");
        return !RUNTIME.iter().any(|p| name.starts_with(p))
            && !cpp_namespace(name).is_some_and(cpp_runtime);
    }
    !NOT_ALLOCATOR.contains(&owner(name))
}

/// The outermost namespace of a mangled C++ name (Itanium ABI:
/// `_ZN6fuzzer6Fuzzer15ExecuteCallbackEPKhm` is in `fuzzer`; `_ZNSt…`
/// and `_ZSt…` in `std`); `None` for any other name.
fn cpp_namespace(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("_Z")?;
    let rest = rest.strip_prefix('N').unwrap_or(rest);
    let rest = rest.trim_start_matches(['K', 'V', 'r']);
    if rest.starts_with("St") {
        return Some("std");
    }
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let len: usize = rest[..digits].parse().ok()?;
    rest.get(digits..digits + len)
}

/// The crate a symbol's function belongs to (see [`is_allocator_code`]):
/// `None` for a C function (no path).
pub fn crate_of_symbol(mangled: &str) -> Option<String> {
    let name = format!("{:#}", rustc_demangle::demangle(mangled));
    let name = name.trim_start_matches('<');
    name.contains("::").then(|| owner(name).to_string())
}

/// The crate a demangled Rust function name belongs to (see
/// [`is_allocator_code`]); `core` for a primitive's inherent method.
fn owner(name: &str) -> &str {
    /// `&mut Type`, `*const Type`, `[Type]`, `dyn Trait`: `Type`, `Trait`.
    fn pointee(mut s: &str) -> &str {
        loop {
            let t = s.trim_start_matches(['&', '*', '<', '[', '(']);
            let t = ["mut ", "const ", "dyn "]
                .iter()
                .find_map(|p| t.strip_prefix(p))
                .unwrap_or(t);
            if t == s {
                return s;
            }
            s = t;
        }
    }
    /// The first segment of a path (`crate::...`).
    fn crate_of(s: &str) -> Option<&str> {
        let end = s.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))?;
        (end > 0 && s[end..].starts_with("::")).then(|| &s[..end])
    }
    crate_of(pointee(name))
        .or_else(|| {
            // A primitive self type: the trait's crate, if any.
            let (_, tr) = name.split_once(" as ")?;
            crate_of(pointee(tr))
        })
        .unwrap_or("core")
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;

    #[test]
    fn the_harness_and_rusts_libraries_are_not_the_allocator() {
        for name in [
            "<zoo::Zoo as shadow::allocator::Allocator>::alloc",
            "<zoo::Zoo>::align_ignored",
            "mi_heap_malloc_zero_aligned_at",
            "_mi_page_malloc",
            "_ZN5myarn5Arena8allocateEm",
            "<dlmalloc::GlobalDlmalloc as core::alloc::global::GlobalAlloc>::alloc",
            "rlsf::tlsf::Tlsf<u32, u32, 24, 8>::allocate",
            "<rlsf::tlsf::Tlsf<u32, u32, 19, 32>>::deallocate",
            "<talc::Talc<talc::ErrOnOom> as core::ops::Drop>::drop",
        ] {
            assert!(is_allocator_code(name), "{name}");
        }
        for name in [
            "<shadow::allocator::system::System as shadow::allocator::Allocator>::alloc",
            "<u32 as arbitrary::Arbitrary>::arbitrary",
            "<&mut serde_json::de::Deserializer<serde_json::read::StrRead> as serde_core::de::Deserializer>::deserialize_any::<V>",
            "<str>::replace::<&str>",
            "<&str as core::str::pattern::Pattern>::is_contained_in",
            "<memchr::arch::x86_64::avx2::packedpair::Finder>::find_prefilter_impl",
            "<rustc_demangle::v0::Printer>::print_backref::<<rustc_demangle::v0::Printer>::print_path::{closure#1}>",
            "<object::read::any::File>::parse",
            "<[u8] as core::fmt::Debug>::fmt",
            "shadow::executor::Executor::step",
            "core::ptr::drop_glue::<zoo::Zoo>",
            "<std::collections::hash::map::HashMap<usize, usize>>::insert",
            "__asan_memcpy",
            "_ZN6fuzzer6Fuzzer15ExecuteCallbackEPKhm",
            "_ZN6__asan9Allocator8AllocateEmmPN11__sanitizer18BufferedStackTraceENS_9AllocTypeEb",
            "_ZNK11__sanitizer15StackDepotNode4loadEj",
            "_ZNSt3__16vectorIiNS_9allocatorIiEEE9push_backEOi",
            "allocsoak_declared::install",
            "<<shadow::workers::WorkerPool>::run<usize, <shadow::executor::Executor>::call::{closure#0}> as core::ops::function::FnOnce<()>>::call_once::{shim:vtable#0}",
        ] {
            assert!(!is_allocator_code(name), "{name}");
        }
    }

    /// Every crate a fuzz target links is either the harness's (in
    /// `NOT_ALLOCATOR`) or one of the bundled allocators': a new dependency
    /// of the harness fails here until it is named.
    #[test]
    fn harness_crates_are_named() {
        const ALLOCATORS: [&str; 7] = [
            "zoo",
            "libmimalloc_sys",
            "tikv_jemalloc_sys",
            "rlsf",
            "cty",
            "const_default",
            "cfg_if",
        ];
        let meta = fuzz_metadata();
        let unnamed: Vec<String> = linked_packages(&meta)
            .iter()
            .map(|id| package_name(&meta, id))
            .chain(fuzz_binaries(&meta))
            .filter(|name| {
                !NOT_ALLOCATOR.contains(&name.as_str()) && !ALLOCATORS.contains(&name.as_str())
            })
            .collect();
        assert!(
            unnamed.is_empty(),
            "crates a fuzz target links, neither harness nor allocator: {unnamed:?}"
        );
    }

    /// `cargo metadata` of the fuzz targets' package, as the honggfuzz
    /// build for x86-64 Linux resolves it.
    fn fuzz_metadata() -> serde_json::Value {
        let manifest = concat!(env!("CARGO_MANIFEST_DIR"), "/../fuzz_targets/Cargo.toml");
        let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
        let out = std::process::Command::new(cargo)
            .args([
                "metadata",
                "--format-version",
                "1",
                "--features",
                "honggfuzz",
                "--filter-platform",
                "x86_64-unknown-linux-gnu",
            ])
            .args(["--manifest-path", manifest])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice(&out.stdout).unwrap()
    }

    /// The ids of the packages the fuzz binary links: normal dependencies
    /// from the root, not through build scripts or proc macros.
    fn linked_packages(meta: &serde_json::Value) -> BTreeSet<String> {
        let nodes = meta["resolve"]["nodes"].as_array().unwrap();
        let mut todo = vec![meta["resolve"]["root"].as_str().unwrap().to_string()];
        let mut seen = BTreeSet::new();
        while let Some(id) = todo.pop() {
            if is_proc_macro(meta, &id) || !seen.insert(id.clone()) {
                continue;
            }
            let node = nodes.iter().find(|n| n["id"] == id.as_str()).unwrap();
            for dep in node["deps"].as_array().unwrap() {
                let normal = dep["dep_kinds"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|k| k["kind"].is_null());
                if normal {
                    todo.push(dep["pkg"].as_str().unwrap().to_string());
                }
            }
        }
        seen
    }

    /// Whether package `id` is a proc macro.
    fn is_proc_macro(meta: &serde_json::Value, id: &str) -> bool {
        meta["packages"].as_array().unwrap().iter().any(|p| {
            p["id"] == id
                && p["targets"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .any(|t| t["kind"][0] == "proc-macro")
        })
    }

    /// Package `id`'s name as a crate name (`-` as `_`).
    fn package_name(meta: &serde_json::Value, id: &str) -> String {
        let p = meta["packages"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["id"] == id)
            .unwrap();
        p["name"].as_str().unwrap().replace('-', "_")
    }

    /// The root package's binaries: each is a crate of its own.
    fn fuzz_binaries(meta: &serde_json::Value) -> Vec<String> {
        let root = meta["resolve"]["root"].as_str().unwrap();
        let packages = meta["packages"].as_array().unwrap();
        let package = packages.iter().find(|p| p["id"] == root).unwrap();
        let targets = package["targets"].as_array().unwrap();
        targets
            .iter()
            .filter(|t| t["kind"][0] == "bin")
            .map(|t| t["name"].as_str().unwrap().replace('-', "_"))
            .collect()
    }
}
