//! The instrumentation check counts real coverage counters: an object built
//! with `-fsanitize=fuzzer-no-link` has them, the same object without has none.

use std::path::{Path, PathBuf};
use std::process::Command;

fn archive(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let clang =
        soak::engines::project::clang().expect("clang matching nightly's LLVM (just setup)");
    let src = dir.join("alloc.c");
    std::fs::write(
        &src,
        "int pick(int n) { if (n > 8) return n * 2; return n + 1; }\n",
    )
    .unwrap();
    let obj = dir.join(format!("{name}.o"));
    let status = Command::new(&clang)
        .args(["-c", "-O1"])
        .args(flags)
        .arg(&src)
        .arg("-o")
        .arg(&obj)
        .status()
        .unwrap();
    assert!(status.success(), "{clang} failed");
    let ar = dir.join(format!("lib{name}.a"));
    let status = Command::new("ar")
        .arg("rcs")
        .arg(&ar)
        .arg(&obj)
        .status()
        .unwrap();
    assert!(status.success(), "ar failed");
    ar
}

#[test]
fn counters_are_counted_only_when_instrumented() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("instrumentation");
    std::fs::create_dir_all(&dir).unwrap();
    let with = soak::engines::instrumentation::count(&archive(
        &dir,
        "with",
        &["-fsanitize=fuzzer-no-link"],
    ))
    .unwrap();
    let without = soak::engines::instrumentation::count(&archive(&dir, "without", &[])).unwrap();
    assert!(
        with.counters >= 2 && with.instrumented == 1 && with.objects == 1,
        "{} counters",
        with.counters
    );
    assert_eq!(
        (without.counters, without.instrumented, without.objects),
        (0, 0, 1)
    );
}

/// A position-independent executable from `alloc.c` (static functions,
/// compiled with `flags`) and `main.c` (the sanitizer-coverage hooks,
/// uninstrumented).
fn executable(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let clang =
        soak::engines::project::clang().expect("clang matching nightly's LLVM (just setup)");
    std::fs::write(
        dir.join("alloc.c"),
        "__attribute__((noinline)) static int pick(int n) { if (n > 8) return n * 2; return n + 1; }\n\
         int run(int n) { return pick(n) + pick(n + 9); }\n",
    )
    .unwrap();
    std::fs::write(
        dir.join("main.c"),
        "#include <stdint.h>\n\
         void __sanitizer_cov_8bit_counters_init(char *a, char *b) {}\n\
         void __sanitizer_cov_pcs_init(const uintptr_t *a, const uintptr_t *b) {}\n\
         int run(int);\n\
         int main(int argc, char **argv) { return run(argc); }\n",
    )
    .unwrap();
    let exe = dir.join(name);
    let compile = |src: &str, obj: &str, flags: &[&str]| {
        let status = Command::new(&clang)
            .args(["-c", "-O1", "-fPIE"])
            .args(flags)
            .arg(dir.join(src))
            .arg("-o")
            .arg(dir.join(obj))
            .status()
            .unwrap();
        assert!(status.success(), "{clang} failed on {src}");
    };
    compile("alloc.c", "alloc.o", flags);
    compile("main.c", "main.o", &[]);
    // Linked by nightly's lld, as the fuzz binaries are: it leaves the PC
    // table's entries to the dynamic relocations (zeros in the file).
    let sysroot = Command::new("rustc")
        .args(["+nightly", "--print", "sysroot"])
        .output()
        .unwrap();
    let lld = Path::new(String::from_utf8_lossy(&sysroot.stdout).trim())
        .join("lib/rustlib/x86_64-unknown-linux-gnu/bin/gcc-ld/ld.lld");
    let status = Command::new(&clang)
        .arg("-pie")
        .arg(format!("--ld-path={}", lld.display()))
        .arg(dir.join("alloc.o"))
        .arg(dir.join("main.o"))
        .arg("-o")
        .arg(&exe)
        .status()
        .unwrap();
    assert!(status.success(), "{clang} failed to link");
    exe
}

#[test]
fn counters_in_a_linked_binary_are_counted_by_source_file() {
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("instrumentation-binary");
    std::fs::create_dir_all(&dir).unwrap();
    let with = soak::engines::instrumentation::count_in_binary(&executable(
        &dir,
        "with",
        &["-fsanitize-coverage=inline-8bit-counters,pc-table"],
    ))
    .unwrap();
    assert!(
        with.files.get("alloc.c").is_some_and(|&n| n >= 1),
        "{with:?}"
    );
    let without =
        soak::engines::instrumentation::count_in_binary(&executable(&dir, "without", &[]));
    assert!(
        without.is_err() || without.unwrap().files.is_empty(),
        "an uninstrumented binary has counters"
    );
}

/// Each fuzz binary runs with its target's ASan defaults
/// (`shadow::sanitizer::asan_defaults`), as ASan itself reports them:
/// `mt_ops` and `workload` alone without LeakSanitizer and stack-use-after-return
/// detection.
#[test]
fn each_fuzz_binary_runs_with_its_targets_asan_defaults() {
    use shadow::Target;
    use soak::engines::project::{Build, Project};
    let project = Project::find().unwrap();
    let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join("asan-defaults");
    std::fs::create_dir_all(&dir).unwrap();
    let empty = dir.join("empty");
    std::fs::write(&empty, b"").unwrap();
    for target in Target::ALL {
        let out = Command::new(project.binary(Build::Asan, target))
            .env("ASAN_OPTIONS", "help=1")
            .env("ALLOCSOAK_ALLOCATOR", "system")
            .arg("-runs=1")
            .arg(&empty)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stderr);
        // "\t<flag>\n\t\t- <what it does> (Current Value: <value>)"
        let value = |flag: &str| {
            let (_, after) = text
                .split_once(&format!("\t{flag}\n"))
                .unwrap_or_else(|| panic!("{target}: ASan's help has no {flag}: {text}"));
            let (_, v) = after.split_once("(Current Value: ").unwrap();
            v.split(')').next().unwrap().to_string()
        };
        // Off in the targets whose threads start and end within inputs.
        let off_in_threaded = match target {
            Target::MtOps | Target::Workload => "false",
            _ => "true",
        };
        assert_eq!(value("detect_leaks"), off_in_threaded, "{target}");
        assert_eq!(
            value("detect_stack_use_after_return"),
            off_in_threaded,
            "{target}"
        );
        assert_eq!(value("allocator_may_return_null"), "true", "{target}");
        assert_eq!(value("quarantine_size_mb"), "64", "{target}");
    }
}
