//! The shipped GitHub workflows (`ci/workflows/`) pass actionlint (with
//! shellcheck over their scripts), and the flags they pass to `allocsoak`
//! exist. Fails, not skips, when actionlint or shellcheck is missing:
//! `scripts/setup` installs both.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_path_buf()
}

/// actionlint on PATH, or where `go install` put it.
fn actionlint() -> PathBuf {
    let on_path = Command::new("actionlint").arg("-version").output();
    if on_path.is_ok_and(|o| o.status.success()) {
        return PathBuf::from("actionlint");
    }
    let gopath = Command::new("go")
        .args(["env", "GOPATH"])
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .filter(|p| !p.is_empty())
        .unwrap_or_else(|| format!("{}/go", std::env::var("HOME").unwrap_or_default()));
    let installed = Path::new(&gopath).join("bin/actionlint");
    assert!(
        installed.is_file(),
        "actionlint is missing (not on PATH, not in {}); run scripts/setup",
        installed.display()
    );
    installed
}

fn workflows() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(root().join("ci/workflows"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "yml" || e == "yaml"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no workflows in ci/workflows");
    files
}

#[test]
fn every_workflow_passes_actionlint() {
    let shellcheck = Command::new("shellcheck").arg("--version").output();
    assert!(
        shellcheck.is_ok_and(|o| o.status.success()),
        "shellcheck is missing: actionlint would not check the workflows' scripts; run scripts/setup"
    );
    let lint = actionlint();
    // The linter catches what it should: a broken workflow fails it.
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("bad.yml");
    std::fs::write(
        &bad,
        "on: push\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    steps:\n      - run: echo ${{ github.nope }} $UNQUOTED\n",
    )
    .unwrap();
    let out = Command::new(&lint).arg(&bad).output().unwrap();
    assert!(!out.status.success(), "actionlint passed a broken workflow");
    for file in workflows() {
        let out = Command::new(&lint).arg(&file).output().unwrap();
        assert!(
            out.status.success(),
            "actionlint {}:\n{}{}",
            file.display(),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

#[test]
fn the_gate_workflow_passes_flags_quick_has() {
    let text = std::fs::read_to_string(root().join("ci/workflows/allocsoak-gate.yml")).unwrap();
    let call = &text[text
        .find("name: Quick gate")
        .expect("the workflow has a Quick gate step")..];
    assert!(
        call.contains("-- quick"),
        "the Quick gate step does not run `allocsoak quick`"
    );
    let call = &call[..call.find("\n\n").unwrap_or(call.len())];
    let flags: Vec<&str> = call
        .split(|c: char| c.is_whitespace() || c == '(' || c == ')')
        .filter(|w| w.starts_with("--") && w.len() > 2 && *w != "--release") // not cargo's
        .collect();
    let help = common::allocsoak()
        .args(["quick", "--help"])
        .output()
        .unwrap();
    let help = String::from_utf8_lossy(&help.stdout);
    for flag in ["--known", "--corpus", "--save-corpus", "--junit", "--secs"] {
        assert!(
            flags.contains(&flag),
            "the workflow does not pass {flag}: {call}"
        );
    }
    for flag in flags {
        assert!(
            help.contains(&format!("{flag} ")) || help.contains(&format!("{flag}\n")),
            "the workflow passes {flag}, which `allocsoak quick` does not take"
        );
    }
}
