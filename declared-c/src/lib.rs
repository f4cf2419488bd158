//! Builds a C allocator a config declares (`[allocator.c]`) into the
//! glue crate, from the glue's build script, so that the code that runs
//! under its name is exactly its own.
//!
//! Its sources are compiled as given (the glue's `cc::Build`, with
//! `allocsoak build`'s CC and CFLAGS), then partially linked with a shim
//! into one object in which every symbol but the shim's handle,
//! `allocsoak_c_<ident>`, is made local (`ld -r`, then `objcopy
//! --keep-global-symbol`), and renamed into the allocator's own namespace
//! with the COMDAT groups named after them (`objcopy --redefine-syms`: the
//! linker keeps one group of a name across objects, such as one function's
//! code and counters). So a declared allocator whose functions share
//! names with another's (an older mimalloc's sources, prefix `mi_`, beside
//! the bundled mimalloc that `diff_mimalloc` compares against, or a second
//! declared allocator) neither replaces it nor calls into it: each call
//! resolves inside its own object. The shim hands the functions the
//! sources define under the prefix to Rust, null for those they do not.
//! Its calls that get memory from the OS go through allocsoak
//! ([`OS_CALLS`]), which can refuse them.

use std::path::{Path, PathBuf};
use std::process::Command;

/// The functions the shim hands over, in `shadow::allocator::CFunctions`'
/// order (its `more` last); `usable_size` is the first of two names the
/// allocator defines. A declaration's `[allocator.c.functions]` maps one
/// by its first name to a symbol of any name.
pub const FUNCTIONS: [&[&str]; 33] = [
    &["malloc"],
    &["free"],
    &["calloc"],
    &["realloc"],
    &["malloc_usable_size", "usable_size"],
    &["posix_memalign"],
    &["memalign"],
    &["aligned_alloc"],
    &["malloc_aligned"],
    &["realloc_aligned"],
    &["rezalloc"],
    &["rezalloc_aligned"],
    &["expand"],
    &["free_size"],
    &["free_size_aligned"],
    &["good_size"],
    &["heap_new"],
    &["heap_delete"],
    &["heap_destroy"],
    &["heap_malloc"],
    &["heap_zalloc"],
    &["heap_malloc_aligned"],
    &["heap_zalloc_aligned"],
    &["heap_realloc"],
    &["heap_realloc_aligned"],
    &["heap_collect"],
    &["heap_contains", "heap_check_owned", "heap_contains_block"],
    &["heap_visit_blocks"],
    &["heap_rezalloc"],
    &["heap_rezalloc_aligned"],
    &["heap_check"],
    &["in_use"],
    &["walk"],
];

/// Builds the allocator `ident` from `sources` with `base` (includes,
/// defines and flags, no files) and tells cargo to link it as
/// `declared_<ident>`; `mapped` names the symbol of a function (by its
/// first name in [`FUNCTIONS`]) that does not follow the prefix. Panics,
/// as a build script does, with what failed.
pub fn build(
    ident: &str,
    prefix: &str,
    mapped: &[(&str, &str)],
    sources: &[PathBuf],
    base: &cc::Build,
) {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("run from a build script"));
    for source in sources {
        println!("cargo:rerun-if-changed={}", source.display());
    }
    let objects = base.clone().files(sources).compile_intermediates();
    let defined = defined_symbols(&objects);
    for (function, symbol) in mapped {
        if !defined.iter().any(|d| d == symbol) {
            panic!("the declared C allocator `{ident}` maps {function} to `{symbol}`, which its sources do not define");
        }
    }
    let found = found(prefix, mapped, &defined);
    for (names, found) in FUNCTIONS[..2].iter().zip(&found) {
        if found.is_none() {
            panic!("the declared C allocator `{ident}` defines no `{prefix}{}`: check its sources and prefix", names[0]);
        }
    }
    let shim = out.join(format!("allocsoak_c_{ident}.c"));
    write(&shim, &shim_source(ident, &found));
    let shim_objects = base.clone().file(&shim).compile_intermediates();

    let linked = out.join(format!("declared_{ident}.o"));
    run(Command::new("ld")
        .arg("-r")
        .arg("-o")
        .arg(&linked)
        .args(&objects)
        .args(&shim_objects));
    // Local symbols are not enough: the compiler puts a function's code
    // with its coverage counters, and a global with ASan's metadata, in a
    // COMDAT group named after it (`_mi_heap_default_key`, `options`), and
    // the linker keeps one group of a name across all objects. A group of
    // the bundled mimalloc's would then win over this object's, leaving
    // references to a discarded section. So every symbol the object
    // defines is renamed into the allocator's own namespace, and the
    // groups named after them with it; a group kept whole still holds a
    // function's counters and PC table together (dissolving the groups
    // would let the linker drop one without the other).
    let renames = out.join(format!("declared_{ident}.renames"));
    let mut lines = renamed(ident, &all_defined_symbols(&linked));
    lines.push_str(&os_calls(&undefined_symbols(&linked)));
    write(&renames, &lines);
    run(Command::new("objcopy")
        .arg(format!("--keep-global-symbol=allocsoak_c_{ident}"))
        .arg(format!("--redefine-syms={}", renames.display()))
        .arg(&linked));
    let archive = out.join(format!("libdeclared_{ident}.a"));
    let _ = std::fs::remove_file(&archive);
    run(Command::new("ar").arg("crs").arg(&archive).arg(&linked));
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=declared_{ident}");
}

/// The global symbols `objects` define (`nm --defined-only --extern-only`).
fn defined_symbols(objects: &[PathBuf]) -> Vec<String> {
    let text = run(Command::new("nm")
        .args(["--defined-only", "--extern-only", "--format=posix"])
        .args(objects));
    parse_nm(&text)
}

/// Every symbol `object` defines, local ones too (`nm --defined-only`).
fn all_defined_symbols(object: &Path) -> Vec<String> {
    let text = run(Command::new("nm")
        .args(["--defined-only", "--format=posix"])
        .arg(object));
    parse_nm(&text)
}

/// The symbols `object` uses and does not define (`nm --undefined-only`).
fn undefined_symbols(object: &Path) -> Vec<String> {
    let text = run(Command::new("nm")
        .args(["--undefined-only", "--format=posix"])
        .arg(object));
    parse_nm(&text)
}

/// The OS calls that get or give back memory, which the allocator makes
/// through `__wrap_<name>` instead (defined in `shadow`'s
/// `allocator/os/`, which fails those that get memory in an `os-fail`
/// window, keeps the ledger of what `diff_mimalloc`'s reference mapped,
/// and otherwise calls the C library, as for the rest of a fuzz binary
/// linked with `--wrap`): its OS layer, made to refuse on demand.
pub const OS_CALLS: [&str; 4] = ["mmap", "mmap64", "munmap", "sbrk"];

/// `objcopy --redefine-syms` lines sending the [`OS_CALLS`] among
/// `undefined` to allocsoak's.
fn os_calls(undefined: &[String]) -> String {
    OS_CALLS
        .iter()
        .filter(|call| undefined.iter().any(|u| u == *call))
        .map(|call| format!("{call} __wrap_{call}\n"))
        .collect()
}

/// Symbols the sanitizers' module constructors share across all objects
/// by design (one of each runs, registering every object's globals and
/// counters once): never renamed.
const SHARED: [&str; 3] = [
    "asan.module_",
    "sancov.module_",
    "___asan_globals_registered",
];

/// `objcopy --redefine-syms` lines moving `defined` into `ident`'s own
/// namespace (`allocsoak.<ident>.<name>`), but for the shim's handle and
/// the [`SHARED`] symbols.
fn renamed(ident: &str, defined: &[String]) -> String {
    let handle = format!("allocsoak_c_{ident}");
    defined
        .iter()
        .filter(|s| **s != handle && !SHARED.iter().any(|p| s.starts_with(p)))
        .map(|s| format!("{s} allocsoak.{ident}.{s}\n"))
        .collect()
}

/// The names in `nm --format=posix` output: `name type value [size]` per
/// symbol, `file.o:` lines between objects.
fn parse_nm(text: &str) -> Vec<String> {
    let mut names: Vec<String> = text
        .lines()
        .filter(|l| !l.ends_with(':'))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    names.sort();
    names.dedup();
    names
}

/// The symbol of each of [`FUNCTIONS`] among `defined`: the mapped one,
/// else the prefixed name; `None` where there is neither.
fn found(prefix: &str, mapped: &[(&str, &str)], defined: &[String]) -> Vec<Option<String>> {
    FUNCTIONS
        .iter()
        .map(
            |names| match mapped.iter().find(|(function, _)| *function == names[0]) {
                Some((_, symbol)) => Some(symbol.to_string()),
                None => names
                    .iter()
                    .map(|n| format!("{prefix}{n}"))
                    .find(|n| defined.contains(n)),
            },
        )
        .collect()
}

/// The shim's C: `allocsoak_c_<ident>()` returns the allocator's
/// functions (`found`, in [`FUNCTIONS`] order), null where it has none.
fn shim_source(ident: &str, found: &[Option<String>]) -> String {
    let mut text = format!(
        "/* Generated by allocsoak for `{ident}`; do not edit. */\n#include <stddef.h>\n\n"
    );
    for name in found.iter().flatten() {
        text.push_str(&format!("extern void {name}(void);\n"));
    }
    text.push_str(&format!(
        "\nstruct allocsoak_c_functions {{ void *f[{}]; }};\n\n\
         struct allocsoak_c_functions allocsoak_c_{ident}(void) {{\n    struct allocsoak_c_functions f = {{{{\n",
        FUNCTIONS.len()
    ));
    for name in found {
        match name {
            Some(name) => text.push_str(&format!("        (void *){name},\n")),
            None => text.push_str("        NULL,\n"),
        }
    }
    text.push_str("    }};\n    return f;\n}\n");
    text
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text)
        .unwrap_or_else(|e| panic!("failed to write {}: {e}", path.display()));
}

/// Runs `cmd`; its standard output, or a panic saying what failed.
fn run(cmd: &mut Command) -> String {
    let out = cmd.output().unwrap_or_else(|e| {
        panic!("failed to run {cmd:?}: {e} (binutils' ld, objcopy, nm and ar are needed)")
    });
    if !out.status.success() {
        panic!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nm_output_reads_as_names() {
        let text = "a.o:\nt_free T 40 20\nt_malloc T 0 30\n\nshim.o:\nt_malloc T 0 30\n";
        assert_eq!(parse_nm(text), ["t_free", "t_malloc"]);
    }

    #[test]
    fn every_defined_symbol_moves_but_the_handle_and_the_sanitizers_shared_ones() {
        let defined = [
            "mi_malloc",
            "_mi_heap_default_key",
            ".str.1b14",
            "allocsoak_c_mi",
            "asan.module_ctor",
            "sancov.module_ctor_8bit_counters",
            "___asan_globals_registered",
        ]
        .map(String::from);
        assert_eq!(
            renamed("mi", &defined),
            "mi_malloc allocsoak.mi.mi_malloc\n\
             _mi_heap_default_key allocsoak.mi._mi_heap_default_key\n\
             .str.1b14 allocsoak.mi..str.1b14\n"
        );
    }

    #[test]
    fn the_os_calls_it_makes_go_through_allocsoak() {
        let undefined = ["memcpy", "mmap", "sbrk", "munmap"].map(String::from);
        assert_eq!(
            os_calls(&undefined),
            "mmap __wrap_mmap\nmunmap __wrap_munmap\nsbrk __wrap_sbrk\n"
        );
    }

    #[test]
    fn the_shim_hands_over_what_is_defined_and_null_for_the_rest() {
        let defined = ["t_free", "t_malloc", "t_usable_size", "t_grow"].map(String::from);
        let shim = shim_source("tinyc", &found("t_", &[("expand", "t_grow")], &defined));
        assert!(
            shim.contains("struct allocsoak_c_functions allocsoak_c_tinyc(void)"),
            "{shim}"
        );
        let entries: Vec<&str> = shim
            .lines()
            .filter(|l| l.starts_with("        "))
            .map(str::trim)
            .collect();
        assert_eq!(
            entries,
            [
                "(void *)t_malloc,",
                "(void *)t_free,",
                "NULL,",
                "NULL,",
                "(void *)t_usable_size,",
                "NULL,",
                "NULL,",
                "NULL,",
                "NULL,",
                "NULL,",
                "NULL,",
                "NULL,",
                "(void *)t_grow,",
                "NULL,",
                "NULL,",
                "NULL,",
                // The heap API.
                "NULL,",
                "NULL,",
                "NULL,",
                "NULL,",
                "NULL,",
                "NULL,",
                "NULL,",
                "NULL,",
                "NULL,",
                "NULL,",
                "NULL,",
                "NULL,",
                "NULL,",
                "NULL,",
                // The heap's own check, its count of bytes in use, its walk.
                "NULL,",
                "NULL,",
                "NULL,",
            ]
        );
    }
}
