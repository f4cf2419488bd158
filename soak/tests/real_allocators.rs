//! Real third-party allocators as their authors bring them, fetched from
//! the package registry in the test (no vendored copies):
//!
//! - the C sources of three mimalloc releases (1.7.5, 2.1.2, 2.2.5, from
//!   libmimalloc-sys) and of the bundled release itself built another way
//!   (2.3.2 with `MI_STAT=1`), declared side by side under mimalloc's own
//!   names in one config: one fuzz binary links all four beside the bundled
//!   mimalloc, and each runs clean under its own name, the v2 ones beside
//!   the bundled one as `diff_mimalloc`'s reference (1.7.5 declares the
//!   1 MiB alignment its header documents); 2.2.5's own `mmap` is
//!   refused in an `os-fail` window, and served after. `heap_api` is left out: in
//!   short runs it found what is still to triage (1.7.5's heap visit
//!   disowning a live block, 2.2.5 refusing a 64 MiB request);
//! - a mimalloc release built as a `dylib:` exactly as docs/allocators.md
//!   says (no `-Bsymbolic`): it binds to its own symbols, not the fuzz
//!   binary's bundled mimalloc, and runs clean but for mimalloc#763 (its
//!   zeroed realloc leaves a moved block's slack stale), which its minimized
//!   program shows under the default zeroed-realloc contract;
//! - jemalloc 5.3.0's release, built by its own configure and make as a
//!   library and declared as one (`[allocator.dylib]`): it runs clean;
//! - an embedded fixed-heap allocator (umm_malloc, from umm-malloc-sys)
//!   behind a firmware-style init shim over a static arena, declared with
//!   its documented limits (4-aligned blocks, one thread, the arena's
//!   size), both from its sources and as the shared library its author
//!   builds with the docs' line: a soak files exactly its one real bug,
//!   umm_calloc's unchecked `num * item_size`, as one group for each; the
//!   same library as a bare `dylib:` (no limits declared) files that bug
//!   and each promise it never made once (alignment, no fixed region).

mod common;
#[path = "real_allocators/umm.rs"]
mod umm;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{found, mimalloc_sources, registry_crate, run_allocsoak, with_config};
use shadow::Target;
use soak::engines::project::{Build, Project};
use umm::{Shim, Umm};

#[test]
fn mimalloc_releases_sources_link_beside_the_bundled_one_and_run_clean() {
    let _one = common::ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    // (name, libmimalloc-sys release, more of its entry, a v2 release)
    let releases = [
        // "maximum supported alignment is 1MiB" (its mimalloc.h).
        ("mimalloc-1.7.5", "0.1.24", "max_align = 1048576\n", false),
        ("mimalloc-2.1.2", "0.1.35", "", true),
        ("mimalloc-2.2.5", "0.1.43", "", true),
        ("mimalloc-2.3.2-stat", "0.1.49", "", true),
    ];
    let repo = tempfile::tempdir().unwrap();
    let mut config = String::from(
        "targets = [\"alloc_ops\", \"heap_api\", \"mt_ops\", \"diff_mimalloc\"]\n\
         timeout_secs = 10\nrss_limit_mb = 2048\n",
    );
    for (name, sys, more, _) in releases {
        let (source, include) = mimalloc_sources(sys);
        let stat = if name.ends_with("-stat") {
            ", \"MI_STAT=1\""
        } else {
            ""
        };
        config.push_str(&format!(
            "\n[[allocator]]\nname = \"{name}\"\nsize_classes = \"mimalloc\"\n{more}[allocator.c]\n\
             sources = [{source:?}]\ninclude = [{include:?}]\ndefines = [\"MI_DEBUG=0\"{stat}]\n\
             flags = [\"-O2\"]\nprefix = \"mi_\"\nzeroed_realloc = \"usable\"\n",
        ));
    }
    let config_path = repo.path().join("allocsoak.toml");
    std::fs::write(&config_path, &config).unwrap();

    let (out, text) = with_config(&config_path, &["build"]);
    assert!(out.status.success(), "build failed:\n{config}\n{text}");
    for (name, ..) in releases {
        assert!(
            text.contains(&format!("  {name}: C sources ")),
            "`build` does not say what {name} runs:\n{text}"
        );
    }

    // Its OS layer refuses in an `os-fail` window: mimalloc 2.2.5's own
    // mmap fails (its warning says so) and its 2 GiB request is null, a
    // clean failure; the same request after the window is served.
    let config = soak::foundation::config::Config::load(&config_path).unwrap();
    let binary = project()
        .with_config(&config)
        .binary(Build::for_allocator("mimalloc-2.2.5"), Target::AllocOps);
    // (whether it ran clean, mmaps refused, its log) for a program's text.
    let refusals = |text: &str| {
        let program = repo.path().join("os-fail.txt");
        let text = format!("target alloc_ops\nalloc size=100 align=8\n{text}");
        std::fs::write(&program, text).unwrap();
        let verbose = [("MIMALLOC_VERBOSE", "1")];
        let (clean, log) = common::run_text(&binary, "mimalloc-2.2.5", &program, &verbose);
        let refused = log
            .matches("unable to allocate OS memory (error: 12")
            .count();
        (clean, refused, log)
    };
    let huge = "alloc size=2147483648 align=8\n";
    let (clean, in_window, log) = refusals(&format!("os-fail ops=1\n{huge}"));
    assert!(
        clean && in_window > 0,
        "2.2.5's mmap not refused in the window:\n{log}"
    );
    let (clean, after, log) = refusals(&format!(
        "os-fail ops=1\n{huge}alloc size=16 align=8\n{huge}"
    ));
    assert!(
        clean && after == in_window,
        "refused after the window:\n{log}"
    );

    let v2: Vec<&str> = releases.iter().filter(|r| r.3).map(|r| r.0).collect();
    for (targets, allocators) in [
        (&["alloc_ops", "mt_ops"][..], vec!["mimalloc-1.7.5"]),
        (&["alloc_ops", "mt_ops"][..], v2.clone()),
    ] {
        let mut args = vec!["fuzz", "--secs", "4"];
        for target in targets {
            args.extend(["--target", target]);
        }
        for name in &allocators {
            args.extend(["--allocator", name]);
        }
        let (out, text) = with_config(&config_path, &args);
        let runs = found(&text);
        assert_eq!(runs.len(), targets.len() * allocators.len(), "{text}");
        assert!(
            out.status.success() && runs.iter().all(|(_, _, f)| f == "none"),
            "a correct mimalloc release had findings:\n{text}"
        );
    }

    // Beside the bundled mimalloc in one process: the same usable sizes.
    let mut args = vec!["fuzz", "--target", "diff_mimalloc", "--secs", "4"];
    for name in &v2 {
        args.extend(["--allocator", name]);
    }
    let (out, text) = with_config(&config_path, &args);
    assert!(
        out.status.success() && found(&text).iter().all(|(_, _, f)| f == "none"),
        "a v2 release differs from the bundled one:\n{text}"
    );
}

/// The fuzz binaries of allocsoak's own build (`just build`).
fn project() -> Project {
    Project::find().expect("the checkout")
}

#[test]
fn a_mimalloc_release_as_dylib_binds_to_its_own_code() {
    let _one = common::ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let project = project();
    // The binary keeps its bundled mimalloc to itself: a library's calls
    // and globals of the same names resolve inside the library.
    let binary = project.binary(Build::Asan, Target::AllocOps);
    let nm = Command::new("nm")
        .args(["-D", "--defined-only", "--format=posix"])
        .arg(&binary)
        .output()
        .unwrap();
    let exported = String::from_utf8_lossy(&nm.stdout);
    let leaked: Vec<&str> = exported
        .lines()
        .filter_map(|l| l.split_whitespace().next())
        .filter(|s| s.starts_with("mi_") || s.starts_with("_mi_") || s.contains("odr_asan_gen_mi"))
        .collect();
    assert!(
        nm.status.success() && exported.contains("__asan_"),
        "{exported}"
    );
    assert!(
        leaked.is_empty(),
        "{} exports its bundled mimalloc: {leaked:?}",
        binary.display()
    );

    // Built exactly as docs/allocators.md says.
    let dir = tempfile::tempdir().unwrap();
    let (source, include) = mimalloc_sources("0.1.43");
    let lib = dir.path().join("libmimalloc-2.2.5.so");
    let include = include.display().to_string();
    common::instrumented_dylib(&lib, &[&source], &["-I", &include]);
    let spec = format!("dylib:{}:mi_", lib.display());
    // Past mimalloc#763, which a zeroed realloc may meet (below), as a
    // soak gets past a filed bug: anything else is a finding.
    let tolerate = dir.path().join("tolerate");
    std::fs::write(&tolerate, "zeroed in realloc-zeroed*\n").unwrap();
    let mut fuzz = common::allocsoak();
    fuzz.env("ALLOCSOAK_TOLERATE", &tolerate);
    let (out, text) = run_allocsoak(
        fuzz,
        &[
            "fuzz",
            "--target",
            "alloc_ops",
            "--target",
            "heap_api",
            "--allocator",
            &spec,
            "--secs",
            "5",
        ],
    );
    let runs = found(&text);
    assert_eq!(runs.len(), 2, "{text}");
    assert!(
        out.status.success() && runs.iter().all(|(_, _, f)| f == "none"),
        "mimalloc 2.2.5 as dylib had findings:\n{text}"
    );

    // mimalloc#763 in this release's own code, held to the zeroed family's
    // contract by default: a zeroed block grown by a moving zeroed realloc,
    // then grown in place, shows its stale slack. The bundled mimalloc,
    // held to its old usable size, runs the same program clean.
    let program = project
        .root()
        .join("corpus/findings/mimalloc-2.2.5-rezalloc-moved-slack.txt");
    let replay = |allocator: &str| common::run_text(&binary, allocator, &program, &[]).1;
    let release = replay(&spec);
    assert!(
        release.contains("allocsoak violation: zeroed: op #2 `realloc-zeroed slot=0 to=+1`"),
        "mimalloc#763 not seen in mimalloc 2.2.5:\n{release}"
    );
    let bundled = replay("mimalloc");
    assert!(!bundled.contains("allocsoak violation"), "{bundled}");
}

/// jemalloc 5.3.0, from tikv-jemalloc-sys 0.5.4's copy of its release,
/// built as its users build it (its own `configure` and `make`) with the
/// docs' instrumentation, and declared as a library (`[allocator.dylib]`,
/// its `je_` prefix): it loads beside the bundled jemalloc (5.3.1, whose
/// symbols are `_rjem_`), its counters count, and it runs clean on every
/// target (`diff_mimalloc` beside the bundled mimalloc compares no usable
/// sizes: its size classes are its own).
/// Its default build keeps thread-locals in the initial-exec model, which
/// dlopen has no room for; `--disable-initial-exec-tls` is jemalloc's
/// documented switch for loading it after start-up, and the load error
/// names it (`shadow/tests/dylib.rs`).
#[test]
fn a_jemalloc_release_built_by_its_own_makefile_runs_clean_as_a_library() {
    let _one = common::ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let sys = registry_crate("tikv-jemalloc-sys", "0.5.4+5.3.0-patched");
    let repo = tempfile::tempdir().unwrap();
    let tree = repo.path().join("jemalloc");
    // The release's tree, with the configure script the crate generated
    // for it (as its build.rs does).
    let copied = Command::new("cp")
        .arg("-r")
        .arg(sys.join("jemalloc"))
        .arg(&tree)
        .status()
        .unwrap();
    assert!(copied.success());
    for file in ["configure", "VERSION"] {
        std::fs::copy(sys.join("configure").join(file), tree.join(file)).unwrap();
    }
    let clang = soak::engines::project::clang().expect("clang matching nightly's LLVM");
    let flags = "-O1 -g -fsanitize=fuzzer-no-link,address -fsanitize-recover=address";
    let configured = Command::new("sh")
        .arg("./configure")
        .args([
            "--with-jemalloc-prefix=je_",
            "--disable-cxx",
            "--enable-doc=no",
        ])
        .args(["--disable-static", "--disable-initial-exec-tls"])
        .env("CC", &clang)
        .env("CFLAGS", flags)
        .env("LDFLAGS", "-fsanitize=address")
        .current_dir(&tree)
        .output()
        .unwrap();
    assert!(
        configured.status.success(),
        "{}",
        String::from_utf8_lossy(&configured.stdout)
    );
    let made = Command::new("make")
        .args(["-j2", "build_lib_shared"])
        .current_dir(&tree)
        .output()
        .unwrap();
    assert!(
        made.status.success(),
        "{}",
        String::from_utf8_lossy(&made.stderr)
    );

    let config = repo.path().join("allocsoak.toml");
    std::fs::write(
        &config,
        // Its fork handlers let a forked child allocate: `race-fork` holds it to that.
        "[[allocator]]\nname = \"jemalloc-5.3.0\"\nfork_safe = true\n\
         [allocator.dylib]\npath = \"jemalloc/lib/libjemalloc.so.2\"\nprefix = \"je_\"\n",
    )
    .unwrap();
    let (out, text) = with_config(&config, &["build"]);
    assert!(
        out.status.success() && text.contains("jemalloc-5.3.0: the shared library "),
        "{text}"
    );
    let (out, text) = with_config(&config, &["instrumentation"]);
    assert!(out.status.success(), "{text}");
    let (out, text) = with_config(&config, &["fuzz", "--secs", "4"]);
    let runs = found(&text);
    assert_eq!(runs.len(), shadow::Target::ALL.len(), "{text}");
    assert!(
        out.status.success() && runs.iter().all(|(_, _, f)| f == "none"),
        "jemalloc 5.3.0 had findings:\n{text}"
    );
}

/// umm_malloc's calloc multiplies without an overflow check
/// (`umm_malloc((size_t)(item_size * num))`, umm_malloc.c in
/// umm-malloc-sys 0.3.2): a soak files it, and nothing else, from its
/// sources and as a library declared with the same limits (before the
/// adapter kept the declared contract: 3 groups in 75 s, 4 in 120). As a
/// bare `dylib:`, which can declare none, it files the bug and each
/// promise it never made once: 16-byte alignment (every block is off, so
/// no call keys it), no fixed region (keyed by umm's function that chose
/// the null, whichever entry point asked). Keyed by each entry's whole
/// path, they were 4 `alignment` and 3 `null`. Its walk of the blocks in
/// use (`uh_walk`, umm_info's walk) is found by name in each form and held
/// after every op; a shim beside it that serves some zeroed requests from
/// a side buffer its walk misses (`umm-side`) files that once, as an
/// `unlisted-block`.
#[test]
fn a_fixed_heap_c_allocator_files_its_one_real_bug_once() {
    let _one = common::ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let repo = tempfile::tempdir().unwrap();
    let umm = Umm::fetch(repo.path(), Shim::Plain);
    let side = Umm::fetch(repo.path(), Shim::SidePool);
    let mut includes: Vec<String> = umm
        .include
        .iter()
        .map(|d| format!("-I{}", d.display()))
        .collect();
    includes.extend(Umm::DEFINES.map(|d| format!("-D{d}")));
    let includes: Vec<&str> = includes.iter().map(String::as_str).collect();
    let library = repo.path().join("libumm.so");
    let files: Vec<&Path> = umm.sources.iter().map(PathBuf::as_path).collect();
    common::instrumented_dylib(&library, &files, &includes);
    let config = repo.path().join("allocsoak.toml");
    std::fs::write(
        &config,
        format!(
            "targets = [\"alloc_ops\"]\n\n{}\n{}\n\
             [[allocator]]\nname = \"umm-so\"\n{}[allocator.dylib]\npath = \"libumm.so\"\nprefix = \"uh_\"\n{}",
            umm.declared("umm"),
            side.declared("umm-side"),
            Umm::LIMITS,
            Umm::HEAP_CHECK,
        ),
    )
    .unwrap();
    let (out, text) = with_config(&config, &["build"]);
    assert!(
        out.status.success() && text.contains("umm-so: the shared library "),
        "{text}"
    );

    let state = repo.path().join("state");
    let bare = format!("dylib:{}:uh_", library.display());
    let of = |name: &str| format!("ALLOCSOAK_ALLOCATOR='{name}'");
    let kinds_of = |state: &Path, name: &str| -> Vec<String> {
        let mut kinds: Vec<String> = common::groups(state)
            .into_iter()
            .filter(|g| g.3.contains(&of(name)))
            .map(|g| g.1)
            .collect();
        kinds.dedup();
        kinds
    };
    let calloc = ["calloc-overflow"];
    let promises = ["alignment", "calloc-overflow", "null"];
    // At most 150 s: all were filed within 100 s here.
    let args = format!(
        "--config {} --duration 150 --jobs 2 --slice-secs 30 \
         --allocator umm --allocator umm-so --allocator umm-side --allocator {bare}",
        config.display()
    );
    let args: Vec<&str> = args.split_whitespace().collect();
    common::soak_until(&state, &args, |s| {
        kinds_of(s, "umm") == calloc
            && kinds_of(s, "umm-so") == calloc
            && kinds_of(s, "umm-side").contains(&"unlisted-block".to_string())
            && kinds_of(s, &bare) == promises
    });
    let groups = common::groups(&state);
    for name in ["umm", "umm-so"] {
        let of: Vec<_> = groups.iter().filter(|g| g.3.contains(&of(name))).collect();
        assert!(
            of.len() == 1 && of[0].1 == "calloc-overflow" && of[0].4.contains("umm_calloc"),
            "{name}: {groups:?}"
        );
    }
    // Every umm block is 4 bytes off 8-byte alignment (its 4-byte block
    // header): one `alignment` group, keyed by no call (umm_malloc and
    // umm_realloc, which places a block itself when it moves one down
    // into a free neighbour, filed one each when keyed by the function
    // that chose the block).
    let bare: Vec<_> = groups.iter().filter(|g| g.3.contains(&of(&bare))).collect();
    let count = |kind: &str| bare.iter().filter(|g| g.1 == kind).count();
    assert!(
        count("alignment") == 1 && count("null") == 1 && count("calloc-overflow") == 1,
        "{groups:?}"
    );
    assert!(
        bare.iter().any(|g| g.1 == "alignment"
            && g.4.contains("any-call")
            && g.4.contains("all @ 4-aligned")),
        "{groups:?}"
    );
    // The side buffer's blocks, once, keyed by the shim's calloc; beside
    // it at most umm's calloc bug, which umm-side has too (the soak does
    // not wait for it there).
    let side: Vec<_> = groups
        .iter()
        .filter(|g| g.3.contains(&of("umm-side")))
        .collect();
    let unlisted: Vec<_> = side.iter().filter(|g| g.1 == "unlisted-block").collect();
    assert!(
        unlisted.len() == 1
            && unlisted[0].4.contains("uh_calloc")
            && side.len() - 1 == side.iter().filter(|g| g.1 == "calloc-overflow").count()
            && side.len() <= 2,
        "{groups:?}"
    );
    assert_eq!(groups.len(), 2 + side.len() + bare.len(), "{groups:?}");
}

/// A bug that breaks a fixed heap's free list without a crash shows
/// later as whatever the broken list does next (capacity lost at a
/// program's end, a block handed out twice, a list walked forever). With
/// the allocator's own heap check declared, it is found at the call that
/// broke the list and filed once, keyed by that call's path. The bug is
/// planted in umm_malloc's real sources: a plain free of a block of 77 to
/// 96 bytes, put at the head of the free list, leaves the old head's back
/// link as it was.
#[test]
fn a_declared_heap_check_files_a_bug_that_breaks_the_heap_at_its_call() {
    let _one = common::ONE_AT_A_TIME
        .lock()
        .unwrap_or_else(|e| e.into_inner());
    let repo = tempfile::tempdir().unwrap();
    let mut umm = Umm::fetch(repo.path(), Shim::PlantedFree);
    let original = std::fs::read_to_string(&umm.umm_malloc).unwrap();
    let push = "        UMM_PFREE(UMM_NFREE(0)) = c;\n";
    assert_eq!(original.matches(push).count(), 1, "umm_free_core's push");
    let planted = original.replace(
        push,
        "        extern int planted_free;\n\
         if (!(planted_free && UMM_NFREE(0) != 0))\n\
         UMM_PFREE(UMM_NFREE(0)) = c;\n",
    );
    // Its own copy, found first: the other files come from the registry.
    let own = repo.path().join("umm");
    std::fs::create_dir(&own).unwrap();
    std::fs::write(own.join("umm_malloc.c"), planted).unwrap();
    for file in ["umm_info.c", "umm_integrity.c", "umm_poison.c"] {
        let from = umm.umm_malloc.with_file_name(file);
        std::fs::copy(from, own.join(file)).unwrap();
    }
    umm.include.insert(0, own);
    let config = repo.path().join("allocsoak.toml");
    std::fs::write(
        &config,
        format!(
            "targets = [\"alloc_ops\"]\n\n{}",
            umm.declared("umm-planted")
        ),
    )
    .unwrap();
    let (out, text) = with_config(&config, &["build"]);
    assert!(out.status.success(), "{text}");
    let state = repo.path().join("state");
    common::soak(
        &state,
        &[
            "--config",
            config.to_str().unwrap(),
            "--duration",
            "60",
            "--jobs",
            "2",
        ],
    );
    // The planted bug once, at the free; and umm's own calloc bug.
    let groups: Vec<(String, String)> = common::groups(&state)
        .into_iter()
        .map(|g| (g.1, g.4))
        .collect();
    let kinds: Vec<&str> = groups.iter().map(|g| g.0.as_str()).collect();
    assert_eq!(kinds, ["calloc-overflow", "heap-check"], "{groups:?}");
    assert!(
        groups[1].1.contains("uh_free") && groups[1].1.contains("umm_free_core"),
        "{groups:?}"
    );
    // Past the broken heap, slices fuzz on (forked: a fresh heap for each
    // child), to their time, and reach code the first ones did not.
    let first_cov = common::count(
        &state,
        "SELECT MAX(cov) FROM slice WHERE id <= (SELECT MIN(id) FROM slice WHERE outcome = 'heap-check')",
    );
    let past = "FROM slice WHERE id > (SELECT MIN(id) FROM slice WHERE outcome = 'heap-check') \
                AND fuzz_secs > 20";
    assert!(
        common::count(
            &state,
            &format!("SELECT COUNT(*) {past} AND outcome = 'time'")
        ) > 0,
        "no slice fuzzed past the first heap-check to its time"
    );
    let later_cov = common::count(&state, &format!("SELECT MAX(cov) {past}"));
    assert!(later_cov > first_cov, "cov {first_cov} -> {later_cov}");

    // Read as an error count, umm's `true` says every heap is broken: the
    // run stops before any program, in one line, and files nothing.
    let misread = std::fs::read_to_string(&config).unwrap().replace(
        "heap_check_returns = \"bool\"",
        "heap_check_returns = \"errors\"",
    );
    std::fs::write(&config, misread).unwrap();
    let (out, text) = with_config(&config, &["build"]);
    assert!(out.status.success(), "{text}");
    let corpus = repo.path().join("corpus");
    let (out, text) = with_config(
        &config,
        &["fuzz", "--secs", "5", "--corpus", corpus.to_str().unwrap()],
    );
    assert!(
        !out.status.success()
            && text.contains("its heap check fails on a fresh heap (its heap check returned 1)")
            && !text.contains("found="),
        "{text}"
    );
}

/// mimalloc 2.3.2's forced purge at delay 0 purges nothing marked under
/// an earlier delay (corpus/findings): a huge block's segment, freed under
/// the fuzz binary's hour-long delay, stays resident in its arena block.
/// The bundled mimalloc purges first under a delay of 1 ms and runs the
/// finding's program clean; the zoo's purge that keeps the usual delay,
/// planted in it, leaves that block resident: `purge-kept`.
#[test]
fn a_free_arena_block_left_resident_by_a_forced_purge_is_purge_kept() {
    let project = project();
    let binary = project.binary(Build::Asan, Target::AllocOps);
    let program = project
        .root()
        .join("corpus/findings/mimalloc-2.3.2-purge-delay-zero-strands.txt");
    let (clean, log) = common::run_text(&binary, "mimalloc", &program, &[]);
    assert!(clean && !log.contains("allocsoak violation"), "{log}");
    let (clean, log) = common::run_text(&binary, "zoo:purge-ignores-delay@mimalloc", &program, &[]);
    assert!(
        !clean && log.contains("allocsoak violation: purge-kept: op #2 `purge delay=now force`"),
        "{log}"
    );
}
