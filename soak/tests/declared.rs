//! Your allocator, out of tree: a config in a temp dir declares a local
//! Rust crate (a Sync-only static `GlobalAlloc`, clean and with planted
//! bugs, one in the usable size it reports, a free only its walk of
//! its blocks shows, a live block its walk misses, a count a failed mmap
//! leaves high; an `allocator_api2` allocator
//! whose slices are longer than asked, honest and overclaiming), a bump allocator from crates.io (`allocator_api2`), a fixed-arena
//! allocator from crates.io (embedded-alloc's TLSF heap over 4 MiB,
//! initialized in place, whose refusals are legitimate by its declared
//! `arena`), an author's heap over rlsf from crates.io held to rlsf's
//! walk of its blocks, two releases of one crate from crates.io side by side
//! (dlmalloc 0.1 and 0.2, each under a name of its own) and a C allocator from source with a planted bug, under
//! mimalloc's function names. `allocsoak --config` builds them into the
//! fuzz targets, finds each planted bug with the right kind (the C one's
//! own code runs, not the bundled mimalloc's), runs the clean ones clean
//! (`diff_mimalloc`'s reference is the bundled mimalloc, not the C one), counts coverage counters inside the declared
//! crate and the C sources, replays a finding with `repro`, files a planted
//! leak as `rss-drift` from the glue's drift build, and leaves the
//! checkout as it was.

mod common;

use std::path::{Path, PathBuf};

use common::{found, with_config};

/// The test's own copy of `testdata/declared`, outside the checkout.
fn author_repo() -> PathBuf {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let dir = std::env::temp_dir().join("allocsoak-test-declared");
    let _ = std::fs::remove_dir_all(&dir);
    common::copy_dir(&manifest.join("tests/testdata/declared"), &dir);
    // tiny_mi.c includes it.
    std::fs::copy(
        manifest.join("../shadow/tests/testdata/tiny_alloc.c"),
        dir.join("tiny_alloc.c"),
    )
    .unwrap();
    dir
}

#[test]
fn declared_allocators_are_built_fuzzed_and_found_without_touching_the_checkout() {
    let _one = common::ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let before = common::checkout_status();
    let repo = author_repo();
    let config = repo.join("allocsoak.toml");

    let (out, text) = with_config(&config, &["build"]);
    assert!(out.status.success(), "build failed:\n{text}");
    // What each name runs, as built.
    for says in [
        "  tinyc: C sources ",
        "  mimalloc-rs: crate mimalloc 0.1.",
        "  diff_mimalloc's reference: mimalloc 2.",
        "  bump: crate bumpalo 3.",
        "  dlmalloc-0.1: crate dlmalloc 0.1.",
        "  dlmalloc-0.2: crate dlmalloc 0.2.",
    ] {
        assert!(
            text.contains(says),
            "`build` does not say {says:?}:\n{text}"
        );
    }

    // Each planted bug, with its kind.
    let planted = [
        "planted-buggy",
        "tinyc",
        "planted-oversize",
        "planted-overlong",
        "tlsf-claims-hardened",
        "planted-miscounted",
        "embedded-tlsf-used",
        "planted-walk-keeping",
        "planted-walk-unlisting",
        "planted-mapped-leaky",
    ];
    let mut args = vec!["fuzz", "--target", "alloc_ops", "--secs", "60"];
    args.extend(planted.iter().flat_map(|a| ["--allocator", a]));
    let (out, text) = with_config(&config, &args);
    assert_eq!(
        out.status.code(),
        Some(1),
        "fuzz should report findings:\n{text}"
    );
    let found_bugs = found(&text);
    let kind_of = |name: &str| {
        found_bugs
            .iter()
            .find(|(_, allocator, _)| allocator == name)
            .map(|(_, _, kind)| kind.as_str())
    };
    assert_eq!(found_bugs.len(), planted.len(), "{text}");
    assert_eq!(kind_of("planted-buggy"), Some("realloc-prefix"), "{text}");
    // A declared count of bytes in use: one that drifts (only the count
    // shows it), and embedded-alloc 0.7.0's `used()`, which panics.
    assert_eq!(kind_of("planted-miscounted"), Some("kept-bytes"), "{text}");
    assert_eq!(kind_of("embedded-tlsf-used"), Some("panic"), "{text}");
    // A declared walk of the blocks in use: a free kept (only the walk at
    // the program's end shows it), a live block missing from it (only the
    // walk after an op shows it).
    assert_eq!(
        kind_of("planted-walk-keeping"),
        Some("kept-block"),
        "{text}"
    );
    assert_eq!(
        kind_of("planted-walk-unlisting"),
        Some("unlisted-block"),
        "{text}"
    );
    // A failure path only a refusing OS reaches (`os-fail`: the crate's
    // own mmap, wrapped in the fuzz binaries).
    assert_eq!(
        kind_of("planted-mapped-leaky"),
        Some("kept-bytes"),
        "{text}"
    );
    assert_eq!(kind_of("tlsf-claims-hardened"), Some("hardening"), "{text}");
    assert_eq!(kind_of("tinyc"), Some("zeroed"), "{text}");
    // The usable sizes the crate's `usable_size` and the slices claim:
    // the harness writes up to them, past the blocks, which ASan sees (or
    // the shadow's check of the usable size).
    for name in ["planted-oversize", "planted-overlong"] {
        assert!(
            matches!(kind_of(name), Some("heap-buffer-overflow" | "usable-size")),
            "{name}:\n{text}"
        );
    }
    // planted-overlong's one line (`block`, inlined into `allocate` and
    // `allocate_zeroed` alike) computed the length both entry points
    // claim: a replay keys each by it, as one bug.
    for call in ["alloc size=1 align=1", "alloc size=1 align=1 zeroed"] {
        let input = repo.join("overlong.txt");
        std::fs::write(&input, format!("target alloc_ops\n{call}\n")).unwrap();
        let (_, replay) = with_config(
            &config,
            &[
                "repro",
                "--target",
                "alloc_ops",
                "--allocator",
                "planted-overlong",
                input.to_str().unwrap(),
            ],
        );
        assert!(
            replay.contains(
                "usable-size: block N size N usable N: past the end of the block in block\n"
            ),
            "{call}:\n{replay}"
        );
    }

    // The finding replays by its declared name, from the input file.
    let input = text
        .lines()
        .find_map(|l| {
            l.trim()
                .strip_prefix("Reproduce with: ALLOCSOAK_ALLOCATOR=planted-buggy ")
        })
        .and_then(|cmd| cmd.split_whitespace().nth(1))
        .unwrap_or_else(|| panic!("no repro command for planted-buggy:\n{text}"))
        .to_string();
    let emitted = repo.join("emitted_test.rs");
    let (out, replay) = with_config(
        &config,
        &[
            "repro",
            &input,
            "--target",
            "alloc_ops",
            "--allocator",
            "planted-buggy",
            "--emit-test",
            emitted.to_str().unwrap(),
        ],
    );
    assert_eq!(
        out.status.code(),
        Some(1),
        "repro should reproduce:\n{replay}"
    );
    assert!(replay.contains("realloc-prefix"), "{replay}");
    let test = std::fs::read_to_string(&emitted).unwrap();
    assert!(
        test.contains("declare(\"planted-buggy\"") && test.contains("planted::BUGGY"),
        "the emitted test declares the allocator:\n{test}"
    );

    // A count kept per thread that a thread's exit drops: held across
    // threads' exits (an mt_ops program's).
    let (out, text) = with_config(
        &config,
        &[
            "fuzz",
            "--target",
            "mt_ops",
            "--allocator",
            "planted-thread-miscounted",
            "--secs",
            "60",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    let found_bugs = found(&text);
    assert_eq!(found_bugs.len(), 1, "{text}");
    assert_eq!(found_bugs[0].2, "kept-bytes", "{text}");

    // The clean ones run clean on every target: mimalloc-rs, the `mimalloc`
    // crate, runs its own C mimalloc (tinyc's mi_calloc does not zero);
    // planted-clean with the usable sizes its crate reports; embedded-tlsf
    // and planted-counted (and planted-thread-counted, across threads'
    // exits) held to their counts of bytes in use;
    // planted-walked and tlsf-pool (rlsf 0.2.3 from crates.io) to their
    // walks of the blocks in use; planted-mapped through os-fail windows.
    let (out, text) = with_config(
        &config,
        &[
            "fuzz",
            "--allocator",
            "planted-clean",
            "--allocator",
            "bump",
            "--allocator",
            "embedded-tlsf",
            "--allocator",
            "mimalloc-rs",
            "--allocator",
            "planted-counted",
            "--allocator",
            "planted-walked",
            "--allocator",
            "tlsf-pool",
            "--allocator",
            "planted-thread-counted",
            "--allocator",
            "planted-mapped",
            "--secs",
            "6",
        ],
    );
    let clean = found(&text);
    assert_eq!(clean.len(), 45, "5 targets x 9 allocators:\n{text}");
    assert!(
        out.status.success() && clean.iter().all(|(_, _, f)| f == "none"),
        "clean allocators had findings:\n{text}"
    );

    // Two releases of one crate, each its own code, side by side; and
    // Scudo, held to the attacks it stops (the fixture says why alloc_ops).
    let (out, text) = with_config(
        &config,
        &[
            "fuzz",
            "--target",
            "alloc_ops",
            "--allocator",
            "dlmalloc-0.1",
            "--allocator",
            "dlmalloc-0.2",
            "--allocator",
            "scudo",
            "--secs",
            "6",
        ],
    );
    let clean = found(&text);
    assert!(
        out.status.success() && clean.len() == 3 && clean.iter().all(|(_, _, f)| f == "none"),
        "two releases of dlmalloc, and scudo:\n{text}"
    );

    // An allocator-api2 allocator whose slices are longer than asked (and
    // honest): its blocks are used to their slices' ends, clean.
    let (out, text) = with_config(
        &config,
        &[
            "fuzz",
            "--target",
            "alloc_ops",
            "--target",
            "heap_api",
            "--allocator",
            "planted-slack",
            "--secs",
            "6",
        ],
    );
    let clean = found(&text);
    assert_eq!(clean.len(), 2, "2 targets:\n{text}");
    assert!(
        out.status.success() && clean.iter().all(|(_, _, f)| f == "none"),
        "planted-slack had findings:\n{text}"
    );

    // One initialized where it stays (`new`, then `init` on the placed
    // value) runs clean; it panics on any call if it was moved after init.
    let (out, text) = with_config(
        &config,
        &[
            "fuzz",
            "--allocator",
            "planted-pinned",
            "--target",
            "alloc_ops",
            "--secs",
            "10",
        ],
    );
    assert!(
        out.status.success()
            && found(&text) == [("alloc_ops".into(), "planted-pinned".into(), "none".into())],
        "planted-pinned (init in place) had findings:\n{text}"
    );

    // Coverage reaches the author's code: counters in the crate and the C sources.
    let (out, text) = with_config(&config, &["instrumentation"]);
    assert!(out.status.success(), "{text}");
    for allocator in ["allocator=planted-clean ", "allocator=tinyc "] {
        let counters = text
            .lines()
            .find(|l| l.contains(allocator))
            .and_then(|l| {
                l.split_whitespace()
                    .find_map(|w| w.strip_prefix("counters="))
            })
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("no instrumentation line for {allocator}:\n{text}"));
        assert!(
            counters > 0,
            "{allocator} has no coverage counters:\n{text}"
        );
    }

    // RSS drift over the declared allocators (the glue's own `drift`
    // build): planted-leaky keeps its big freed blocks where LeakSanitizer
    // would not see them, and is filed as rss-drift with a culprit that
    // `repro` confirms; planted-clean, replayed beside it, is not.
    let state = repo.join("state");
    let out = common::soak_until(
        &state,
        &[
            "--config",
            config.to_str().unwrap(),
            "--duration",
            "45",
            "--jobs",
            "1",
            "--target",
            "alloc_ops",
            "--allocator",
            "planted-clean",
            "--drift-share",
            "1",
        ],
        common::drift_filed_with_culprits,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let drift_groups: Vec<_> = common::groups(&state)
        .into_iter()
        .filter(|g| g.1 == "rss-drift")
        .collect();
    assert_eq!(drift_groups.len(), 1, "{drift_groups:?}\n{text}");
    let (id, title) = (&drift_groups[0].0, &drift_groups[0].4);
    assert!(title.contains("alloc_ops/planted-leaky"), "{title}");
    let culprits = std::fs::read_dir(state.join("crashes").join(id).join("culprits"))
        .unwrap()
        .count();
    assert!(culprits >= 1, "no culprits in {id}");
    let (out, replay) = with_config(&config, &["repro", id, "--state", state.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "repro should drift:\n{replay}");
    let (_, table) = with_config(&config, &["drift", "--state", state.to_str().unwrap()]);
    let clean = table
        .lines()
        .find(|l| l.starts_with("alloc_ops/planted-clean"))
        .unwrap_or_else(|| panic!("no planted-clean series:\n{table}"));
    assert!(!clean.ends_with("drifts"), "{table}");

    assert_eq!(common::checkout_status(), before, "the checkout changed");
}

/// A wrapper crate's one bug, met at every size, is one group: libc_alloc
/// 1.0.4's realloc loses an over-aligned block's alignment. Its code is
/// inlined into the harness's adapter, so no counters give a path, and
/// each size tier the harness drew was a group of its own (4 in 2 minutes).
#[test]
fn a_wrapper_crates_one_bug_at_every_size_is_one_group() {
    let _one = common::ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let repo = author_repo();
    let config = repo.join("allocsoak.toml");
    let (out, text) = with_config(&config, &["build"]);
    assert!(out.status.success(), "build failed:\n{text}");
    assert!(
        text.contains("  libc-alloc: crate libc_alloc 1.0.4"),
        "{text}"
    );

    let state = repo.join("state-libc-alloc");
    let sites = |state: &Path| common::count(state, "SELECT COUNT(DISTINCT site) FROM variant");
    let out = common::soak_until(
        &state,
        &[
            "--config",
            config.to_str().unwrap(),
            "--duration",
            "150",
            "--jobs",
            "2",
            "--drift-share",
            "0",
            "--target",
            "alloc_ops",
            "--allocator",
            "libc-alloc",
        ],
        |state| sites(state) >= 2,
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let groups = common::groups(&state);
    assert_eq!(groups.len(), 1, "{groups:?}\n{text}");
    assert_eq!(
        (groups[0].1.as_str(), groups[0].4.as_str()),
        (
            "alignment",
            "alignment in realloc: block N (size N) is not aligned to N"
        ),
        "{text}"
    );
    assert!(sites(&state) >= 2, "one size tier only:\n{text}");
}

#[test]
fn a_bad_declaration_is_a_one_line_error() {
    let dir = std::env::temp_dir().join("allocsoak-test-declared-bad");
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("allocsoak.toml");
    for (text, says) in [
        ("[[allocator]]\nname = \"x\"\n", "give `crate`"),
        (
            "[[allocator]]\nname = \"x\"\ncrate = \"y\"\nversion = \"1\"\n",
            "give one of `new`",
        ),
        (
            "[[allocator]]\nname = \"system\"\ncrate = \"y\"\nversion = \"1\"\nnew = \"y::Y\"\n",
            "bundled",
        ),
        (
            "[[allocator]]\nname = \"x\"\n[allocator.c]\nsources = [\"a.c\"]\nprefix = \"\"\n",
            "c.prefix",
        ),
        (
            "[[allocator]]\nname = \"x\"\n[allocator.c]\nsources = [\"a.c\"]\nprefix = \"m_\"\n[allocator.c.functions]\ngrow = \"m_grow\"\n",
            "has no function `grow`",
        ),
        // The `mimalloc` crate's secure build would make diff_mimalloc's
        // reference the secure build too (one libmimalloc-sys per binary).
        (
            "[[allocator]]\nname = \"x\"\ncrate = \"mimalloc\"\nversion = \"0.1\"\nfeatures = [\"secure\", \"v2\"]\nnew = \"mimalloc::MiMalloc\"\n",
            "libmimalloc-sys with the features [secure, v2]",
        ),
        // A release with a `v2` feature that leaves it off asks for v3.
        (
            "[[allocator]]\nname = \"x\"\ncrate = \"mimalloc\"\nversion = \"0.1\"\nnew = \"mimalloc::MiMalloc\"\n",
            "turn on [v2] there",
        ),
        // tikv-jemallocator 0.5 is built on tikv-jemalloc-sys 0.5: a
        // second jemalloc, which cargo cannot link beside allocsoak's.
        (
            "[[allocator]]\nname = \"x\"\ncrate = \"tikv-jemallocator\"\nversion = \"=0.5.4\"\nnew = \"tikv_jemallocator::Jemalloc\"\n",
            "its crate needs tikv-jemalloc-sys 0.5.4",
        ),
        (
            "[[allocator]]\nname = \"x\"\ncrate = \"tikv-jemallocator\"\nversion = \"=0.7.0\"\nnew = \"tikv_jemallocator::Jemalloc\"\n",
            "turn on [stats] there",
        ),
        // Two releases of one compatible series are one in a build.
        (
            "[[allocator]]\nname = \"a\"\ncrate = \"a\"\npackage = \"dlmalloc\"\nversion = \"0.2.1\"\nstatic = \"a::GlobalDlmalloc\"\n\n\
             [[allocator]]\nname = \"b\"\ncrate = \"b\"\npackage = \"dlmalloc\"\nversion = \"=0.2.14\"\nstatic = \"b::GlobalDlmalloc\"\n",
            "ask for dlmalloc 0.2.1 and =0.2.14, one compatible series",
        ),
        (
            "[[allocator]]\nname = \"x\"\npackage = \"y\"\n[allocator.c]\nsources = [\"a.c\"]\nprefix = \"m_\"\n",
            "`package` goes with `crate`",
        ),
    ] {
        std::fs::write(&config, text).unwrap();
        let (out, err) = with_config(&config, &["build"]);
        assert_eq!(out.status.code(), Some(2), "{text}\n{err}");
        assert!(
            err.contains(says) && err.trim().lines().count() == 1,
            "{text}\n{err}"
        );
    }
}

/// A release of the `mimalloc` crate from before its `v2` feature cannot
/// ask for mimalloc's v2 line: cargo unifies its libmimalloc-sys with
/// allocsoak's own build, so it is accepted, and `build` says it runs that
/// build; so does tikv-jemallocator 0.7 with the `stats` it can ask for.
/// Resolution only, not a build.
#[test]
fn an_old_wrapper_release_runs_allocsoaks_build_and_says_so() {
    use soak::engines::project::{Build, Project};
    use soak::foundation::config::Config;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("old.toml");
    std::fs::write(
        &config,
        "targets = [\"alloc_ops\"]\n\n[[allocator]]\nname = \"mi-0.1.43\"\ncrate = \"mimalloc\"\n\
         version = \"=0.1.43\"\nnew = \"mimalloc::MiMalloc\"\n\n\
         [[allocator]]\nname = \"tj-0.7\"\ncrate = \"tikv-jemallocator\"\n\
         version = \"=0.7.0\"\nfeatures = [\"stats\"]\nnew = \"tikv_jemallocator::Jemalloc\"\n",
    )
    .unwrap();
    let config = Config::load(&config).unwrap();
    let project = Project::find().unwrap().with_config(&config);
    project.check_declared(Build::Asan).unwrap();
    project.write_glue(Build::Asan).unwrap();
    let lines = project
        .provenance(
            Build::Asan,
            &["mi-0.1.43".to_string(), "tj-0.7".to_string()],
        )
        .unwrap();
    assert!(
        lines[0].runs.starts_with("crate mimalloc 0.1.43")
            && lines[0].runs.contains(
                "it runs allocsoak's own mimalloc 2.3.2 (v2 line) from libmimalloc-sys 0.1.49"
            ),
        "{}",
        lines[0].runs
    );
    assert!(
        lines[1].runs.starts_with("crate tikv-jemallocator 0.7.0")
            && lines[1]
                .runs
                .contains("it runs allocsoak's own jemalloc from tikv-jemalloc-sys 0.7"),
        "{}",
        lines[1].runs
    );
}

/// A release the registry has yanked resolves only from the config's lock
/// file (`<config>.lock` beside it); without one, a one-line error says
/// where it goes. Resolution only (the natives check `build` starts with),
/// not a build.
#[test]
fn a_yanked_version_resolves_only_from_the_configs_lock_file() {
    use soak::engines::project::{Build, Project};
    use soak::foundation::config::Config;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("pinned.toml");
    std::fs::write(
        &config,
        "targets = [\"alloc_ops\"]\n\n[[allocator]]\nname = \"ll\"\ncrate = \"linked_list_allocator\"\n\
         version = \"=0.10.0\"   # yanked from crates.io\nstatic = \"X\"\n",
    )
    .unwrap();
    let check = || {
        let config = Config::load(&config).unwrap();
        Project::find()
            .unwrap()
            .with_config(&config)
            .check_declared(Build::Asan)
    };
    let err = format!("{:#}", check().unwrap_err());
    let lock = dir.path().join("pinned.lock");
    assert!(
        err.contains("`ll`")
            && err.contains("is yanked")
            && err.contains(&lock.display().to_string())
            && !err.contains('\n'),
        "{err}"
    );
    // A lock file that has it: the package alone (cargo resolves the rest).
    std::fs::write(
        &lock,
        "version = 3\n\n[[package]]\nname = \"linked_list_allocator\"\nversion = \"0.10.0\"\n\
         source = \"registry+https://github.com/rust-lang/crates.io-index\"\n\
         checksum = \"222d00bf23b303e0c82c7a4d5f04dc90f33a58b26a3adb1a09c6fbcf56cbd2a9\"\n",
    )
    .unwrap();
    check().unwrap();
}
