//! The instrumentation check counts real coverage counters: an object built
//! with `-fsanitize=fuzzer-no-link` has them, the same object without has none.

use std::path::{Path, PathBuf};
use std::process::Command;

fn archive(dir: &Path, name: &str, flags: &[&str]) -> PathBuf {
    let clang = soak::project::clang().expect("clang matching nightly's LLVM (just setup)");
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
    let with = soak::instrumentation::count(&archive(&dir, "with", &["-fsanitize=fuzzer-no-link"]))
        .unwrap();
    let without = soak::instrumentation::count(&archive(&dir, "without", &[])).unwrap();
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
