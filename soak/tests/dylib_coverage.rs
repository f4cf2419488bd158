//! A C allocator built with the fuzzer's instrumentation as a shared
//! library (`dylib:`), out of tree, end to end: its coverage counters are
//! counted (`allocsoak instrumentation --dylib`), the fuzz binary loads it
//! as a second coverage module whose edges add to `cov:`, a soak files
//! its planted bug as one group (keyed by the library's own code), and its
//! fixed build runs clean. The fuzz binaries must be linked with `-rdynamic`
//! (fuzz_targets/build.rs): without it such a library does not load.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use shadow::Target;
use soak::engines::project::{Build, Project};
use soak::foundation::config::Config;

/// Compiles tiny_alloc.c into `dir` as `lib<name>.so`: instrumented as the
/// docs/allocators.md says, or plain.
fn build_tiny(dir: &Path, name: &str, instrumented: bool, planted: bool) -> PathBuf {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let source = root.join("shadow/tests/testdata/tiny_alloc.c");
    let out = dir.join(format!("lib{name}.so"));
    let planted: &[&str] = if planted { &["-DPLANTED_BUG"] } else { &[] };
    if instrumented {
        common::instrumented_dylib(&out, &[&source], planted);
        return out;
    }
    let status = Command::new("cc")
        .args(["-O2", "-fPIC", "-shared", "-o"])
        .arg(&out)
        .arg(&source)
        .args(planted)
        .status()
        .unwrap();
    assert!(status.success(), "compiling {name} failed");
    out
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// `allocsoak instrumentation --dylib <lib>`: whether it passed, and the
/// counter count it printed.
fn instrumentation(lib: &Path) -> (bool, u64) {
    let out = common::allocsoak()
        .args(["instrumentation", "--dylib"])
        .arg(lib)
        .output()
        .unwrap();
    let text = text(&out);
    let counters = text
        .lines()
        .find_map(|l| l.strip_prefix(&format!("instrumentation {} counters=", lib.display())))
        .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
        .unwrap_or_else(|| panic!("no counters line: {text}"));
    (out.status.success(), counters)
}

/// What libFuzzer said running the committed alloc_ops seeds once each (no
/// mutations) on `lib`: the modules line and the coverage after the seeds.
fn seeds_run(project: &Project, lib: &Path, scratch: &Path) -> (String, u64) {
    let corpus = scratch.join(lib.file_stem().unwrap());
    std::fs::create_dir_all(&corpus).unwrap();
    let out = Command::new(project.binary(Build::Asan, Target::AllocOps))
        .env("ALLOCSOAK_ALLOCATOR", format!("dylib:{}:t_", lib.display()))
        .env_remove("ALLOCSOAK_HISTORY")
        .env_remove("ALLOCSOAK_TOLERATE")
        .arg(&corpus)
        .arg(project.seeds(Target::AllocOps))
        .args(["-runs=0", "-seed=1"])
        .output()
        .unwrap();
    let log = text(&out);
    assert!(
        out.status.success(),
        "the seeds failed on {}: {log}",
        lib.display()
    );
    let modules = log
        .lines()
        .find(|l| l.starts_with("INFO: Loaded "))
        .unwrap_or_else(|| panic!("no modules line: {log}"))
        .to_string();
    let cov = soak::engines::libfuzzer::progress(&log)
        .unwrap_or_else(|| panic!("no coverage line: {log}"))
        .cov;
    (modules, cov)
}

/// `allocsoak fuzz --target alloc_ops --allocator dylib:<lib>:t_`, which
/// runs the clean build.
fn fuzz(lib: &Path, secs: u64) -> Output {
    common::allocsoak()
        .args(["fuzz", "--target", "alloc_ops", "--allocator"])
        .arg(format!("dylib:{}:t_", lib.display()))
        .args(["--secs", &secs.to_string()])
        .output()
        .unwrap()
}

#[test]
fn an_instrumented_dylib_is_covered_and_its_bug_found() {
    let _one = common::ONE_AT_A_TIME.lock().unwrap();
    // As the allocsoak command sees it: with soak.toml's declared
    // allocators, the fuzz binaries are the glue's.
    let project = Project::find().unwrap();
    let config = Config::load(&project.root().join("soak.toml")).unwrap();
    let project = project.with_config(&config);
    let before = common::checkout_status();
    let dir = tempfile::tempdir().unwrap();
    let planted = build_tiny(dir.path(), "planted", true, true);
    let clean = build_tiny(dir.path(), "clean", true, false);
    let plain = build_tiny(dir.path(), "plain", false, false);

    // Counted in the file: the instrumented build has counters, the plain
    // one none, which fails the check.
    let (ok, counters) = instrumentation(&clean);
    assert!(
        ok && counters > 0,
        "{counters} counters in {}",
        clean.display()
    );
    assert_eq!(instrumentation(&plain), (false, 0));

    // Found by a soak (of the binaries `allocsoak build` made, as `just
    // test` runs it first), as one group: the bug is in t_malloc, which t_calloc and
    // t_realloc inline, and every size tier and entry point runs it. The
    // library's own counters and symbols key it (shadow/src/coverage),
    // as they key an allocator linked into the binary.
    let state = dir.path().join("state");
    let allocator = format!("dylib:{}:t_", planted.display());
    common::soak(
        &state,
        &[
            "--duration",
            "40",
            "--jobs",
            "1",
            "--target",
            "alloc_ops",
            "--allocator",
            &allocator,
        ],
    );
    let groups = common::groups(&state);
    assert!(
        groups.len() == 1
            && groups[0].1 == "alignment"
            && groups[0]
                .3
                .contains(&format!("ALLOCSOAK_ALLOCATOR='{allocator}'")),
        "{groups:?}"
    );

    // Counted at run time: libFuzzer lists the library as a module of its
    // own, with every counter the file has, and the library's edges add to
    // the coverage the same inputs reach on the plain build.
    let (modules, cov) = seeds_run(&project, &clean, dir.path());
    assert!(
        modules.starts_with("INFO: Loaded 2 modules")
            && modules.contains(&format!(" {counters} [")),
        "{modules}"
    );
    let (plain_modules, plain_cov) = seeds_run(&project, &plain, dir.path());
    assert!(
        plain_modules.starts_with("INFO: Loaded 1 module"),
        "{plain_modules}"
    );
    assert!(
        cov > plain_cov,
        "cov {cov} on the instrumented build, {plain_cov} on the plain one"
    );

    // The fixed build runs clean.
    let out = fuzz(&clean, 20);
    let clean_run = text(&out);
    assert!(
        out.status.success() && clean_run.contains("found=none"),
        "{clean_run}"
    );

    let run = project.run_dir(
        "fuzz",
        &["alloc_ops", &format!("dylib:{}:t_", clean.display())],
    );
    let _ = std::fs::remove_dir_all(run);
    assert_eq!(
        common::checkout_status(),
        before,
        "the test changed the checkout"
    );
}
