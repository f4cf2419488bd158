//! `allocsoak bisect` on a repository the test makes: eight commits of a C
//! allocator (tiny_alloc.c), where commit 3 does not build, commit 4 mends
//! it, commit 5 plants a bug (blocks of 17 to 32 bytes 8 bytes short of
//! their alignment) and commit 7 removes it. A soak at commit 6 files the
//! bug as one group (it is inlined into three entry points); bisect names commit 5 as its cause (commit 3 skipped) and commit 7
//! as its fix, stores both on the group, and leaves the repository's
//! working tree as it was.

mod common;

use std::path::Path;
use std::process::Command;

fn git(repo: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(repo)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// Writes `text` as the allocator's source and commits it; its id.
fn commit(repo: &Path, text: &str, subject: &str) -> String {
    std::fs::write(repo.join("tiny_alloc.c"), text).unwrap();
    git(repo, &["add", "-A"]);
    git(repo, &["commit", "-q", "-m", subject]);
    git(repo, &["rev-parse", "HEAD"])
}

/// `allocsoak --config <config> <args>`, which must succeed: its output.
fn ok(config: &Path, args: &[&str]) -> String {
    let (out, text) = common::with_config(config, args);
    assert!(out.status.success(), "{text}");
    text
}

#[test]
fn bisect_names_the_commit_that_planted_a_bug_and_the_one_that_fixed_it() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("myalloc");
    std::fs::create_dir_all(&repo).unwrap();
    git(&repo, &["init", "-q"]);
    git(&repo, &["config", "user.email", "author@example.com"]);
    git(&repo, &["config", "user.name", "Author"]);
    let clean = std::fs::read_to_string(
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../shadow/tests/testdata/tiny_alloc.c"),
    )
    .unwrap();
    let planted = format!("#define PLANTED_BUG\n{clean}");
    let c: Vec<String> = vec![
        commit(&repo, &clean, "add the allocator"),
        commit(
            &repo,
            &format!("{clean}/* headers first */\n"),
            "document the header",
        ),
        commit(
            &repo,
            &format!("{clean}this does not compile;\n"),
            "start the size classes",
        ),
        commit(
            &repo,
            &format!("{clean}/* size classes */\n"),
            "mend the build",
        ),
        commit(&repo, &planted, "align small blocks to their header"),
        commit(&repo, &format!("{planted}/* tidy */\n"), "tidy"),
        commit(
            &repo,
            &format!("{clean}/* aligned */\n"),
            "fix small-block alignment",
        ),
        commit(
            &repo,
            &format!("{clean}/* aligned, documented */\n"),
            "more docs",
        ),
    ];
    let config = dir.path().join("allocsoak.toml");
    std::fs::write(
        &config,
        "[[allocator]]\nname = \"tiny\"\n[allocator.c]\nsources = [\"myalloc/tiny_alloc.c\"]\nprefix = \"t_\"\n",
    )
    .unwrap();

    // The bug is in the working tree (commit 6): a soak files it.
    git(&repo, &["checkout", "-q", &c[5]]);
    let config_arg = config.to_str().unwrap();
    ok(&config, &["build", "--allocator", "tiny"]);
    let state = dir.path().join("state");
    common::soak(
        &state,
        &[
            "--config",
            config_arg,
            "--duration",
            "20",
            "--jobs",
            "1",
            "--target",
            "alloc_ops",
            "--allocator",
            "tiny",
        ],
    );
    // One group, though t_malloc's bug is inlined into t_calloc and
    // t_realloc: their paths name its code by its own name.
    let groups = common::groups(&state);
    assert!(
        groups.len() == 1 && groups[0].1 == "alignment",
        "{groups:?}"
    );
    let group = groups[0].0.clone();

    let repo_arg = repo.to_str().unwrap();
    let state_arg = state.to_str().unwrap();
    let text = ok(
        &config,
        &[
            "bisect", &group, "--repo", repo_arg, "--good", &c[0], "--bad", &c[5], "--state",
            state_arg,
        ],
    );
    assert!(
        text.contains(&format!(
            "first reproduces at {} \"align small blocks",
            c[4]
        )),
        "commit 5 is the cause:\n{text}"
    );
    assert!(
        text.contains(&format!(
            "{} start the size classes: skipped: does not build",
            &c[2][..12]
        )),
        "commit 3 is skipped:\n{text}"
    );

    let text = ok(
        &config,
        &[
            "bisect", &group, "--fixed", "--repo", repo_arg, "--bad", &c[5], "--good", &c[7],
            "--state", state_arg,
        ],
    );
    assert!(
        text.contains(&format!("fixed at {} \"fix small-block alignment\"", c[6])),
        "commit 7 is the fix:\n{text}"
    );

    // Stored on the group: its page and triage show both.
    let page =
        std::fs::read_to_string(state.join("crashes").join(&group).join("REPORT.md")).unwrap();
    assert!(
        page.contains(&format!("| caused by | `{}` align small blocks", c[4]))
            && page.contains(&format!(
                "| fixed by | `{}` fix small-block alignment",
                c[6]
            )),
        "{page}"
    );
    let (out, _) = common::with_config(&config, &["triage", "--state", state_arg]);
    let list = String::from_utf8_lossy(&out.stdout);
    assert!(list.contains(&format!("[cause {}", &c[4][..12])), "{list}");
    let pages = dir.path().join("pages");
    let pages_arg = pages.to_str().unwrap();
    ok(
        &config,
        &["dash", "--state", state_arg, "--export", pages_arg],
    );
    let listed = std::fs::read_to_string(pages.join("groups.html")).unwrap();
    assert!(
        listed.contains(&format!("fix {}", &c[6][..12])),
        "the dashboard's groups page shows the fix:\n{listed}"
    );

    // The repository is as it was: commit 6 checked out, nothing changed,
    // no worktree left.
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), c[5]);
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    assert_eq!(git(&repo, &["worktree", "list"]).lines().count(), 1);

    // A revision that is not an ancestor is a one-line error.
    let (out, _) = common::with_config(
        &config,
        &[
            "bisect", &group, "--repo", repo_arg, "--good", &c[5], "--bad", &c[0], "--state",
            state_arg,
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("is not an ancestor of") && err.lines().count() == 1,
        "{err}"
    );
}
