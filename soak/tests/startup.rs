//! A harness that does not start (a `dylib:` that fails while it loads)
//! is an error of the run, in one line, never a finding of the
//! allocator: for `fuzz` and for `repro` alike.

mod common;

use std::path::Path;

use common::found;

/// A library whose constructor overflows a heap block: ASan reports it
/// while the harness loads the allocator, before any program ran.
const FAILS_AT_LOAD: &str = r#"
#include <stdlib.h>
#include <string.h>
void *t_malloc(size_t n) { return malloc(n); }
void t_free(void *p) { free(p); }
__attribute__((constructor)) static void start(void) {
    char *p = malloc(8);
    memset(p, 0, 9);
    free(p);
}
"#;

#[test]
fn a_library_that_fails_while_loading_is_an_error_of_the_run_not_a_finding() {
    let _one = common::ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let source = dir.path().join("fails.c");
    std::fs::write(&source, FAILS_AT_LOAD).unwrap();
    let lib = dir.path().join("libfails.so");
    // -O0: the constructor's overflow must survive the optimizer.
    common::instrumented_dylib(&lib, &[&source], &["-O0"]);
    let spec = format!("dylib:{}:t_", lib.display());
    let out = common::allocsoak()
        .args(["fuzz", "--target", "alloc_ops", "--allocator", &spec])
        .args(["--secs", "5"])
        .output()
        .unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "{stdout}{stderr}");
    assert!(found(&stdout).is_empty(), "filed as a finding:\n{stdout}");
    let line = stderr
        .lines()
        .find(|l| l.contains("did not start"))
        .unwrap_or_else(|| panic!("no start-up error:\n{stdout}{stderr}"));
    assert!(
        line.contains(&format!(
            "allocator `{spec}` did not start: start-up failed while loading the allocator"
        )) && line.contains("heap-buffer-overflow"),
        "{line}"
    );
    // A replay of it says the same, not "does not reproduce".
    let input = dir.path().join("input");
    std::fs::write(&input, "alloc 16\n").unwrap();
    let out = common::allocsoak()
        .args(["repro", "--target", "alloc_ops", "--allocator", &spec])
        .arg(&input)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "allocator `{spec}` did not start: start-up failed"
        )),
        "{stderr}"
    );
    assert!(Path::new(&lib).exists());
}
