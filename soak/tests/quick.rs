//! End-to-end: the quick gate (`allocsoak quick`) on the real fuzz
//! binaries. It fails on a new finding and writes it as markdown and JUnit
//! with signature, input and repro command; a repository with a known bug
//! (a known-groups file) still gates on the new one behind it; a known
//! group that no longer reproduces is reported fixed; a persistent corpus
//! is read and saved back without losing an input; a correct allocator
//! passes.

mod common;

use std::path::Path;
use std::process::Output;

use common::{allocsoak, ONE_AT_A_TIME};

/// Two planted bugs: small-underalign fires on most inputs, and
/// short-realloc-copy hides behind it.
const TWO_BUGS: &str = "zoo:small-underalign+short-realloc-copy";

fn quick(out: &Path, allocator: &str, secs: &str, more: &[&str]) -> Output {
    allocsoak()
        .args(["quick", "--target", "alloc_ops", "--allocator", allocator])
        .args(["--secs", secs, "--jobs", "1", "--out"])
        .arg(out)
        .args(more)
        .env_remove("GITHUB_STEP_SUMMARY")
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

fn known_file(state: &Path, file: &Path) {
    let out = allocsoak()
        .args(["triage", "known", "--state"])
        .arg(state)
        .arg("--out")
        .arg(file)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", text(&out));
}

/// Keeps only the groups of `kind` in a known-groups file.
fn keep_only(file: &Path, kind: &str) {
    let mut known: toml::Table = std::fs::read_to_string(file).unwrap().parse().unwrap();
    let groups = known
        .get_mut("group")
        .and_then(|g| g.as_array_mut())
        .unwrap();
    groups.retain(|g| g.get("kind").and_then(|k| k.as_str()) == Some(kind));
    assert!(!groups.is_empty(), "no {kind} group in {}", file.display());
    std::fs::write(file, toml::to_string(&known).unwrap()).unwrap();
}

/// Well-formed XML, by a real parser.
fn parse_xml(xml: &str) {
    let mut reader = quick_xml::Reader::from_str(xml);
    loop {
        match reader.read_event() {
            Ok(quick_xml::events::Event::Eof) => break,
            Ok(_) => {}
            Err(e) => panic!("junit.xml is not XML: {e}\n{xml}"),
        }
    }
}

#[test]
fn the_gate_fails_on_new_findings_only() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("quick-out");
    let summary = dir.path().join("step-summary.md");
    std::fs::write(&summary, "earlier step\n").unwrap();

    // 1. The first bug: exit 1, written as text, markdown and JUnit.
    let out = allocsoak()
        .args(["quick", "--target", "alloc_ops", "--allocator", TWO_BUGS])
        .args(["--secs", "20", "--jobs", "1", "--out"])
        .arg(&out_dir)
        .arg("--junit")
        .arg(dir.path().join("junit.xml"))
        .env("GITHUB_STEP_SUMMARY", &summary)
        .output()
        .unwrap();
    let log = text(&out);
    assert_eq!(out.status.code(), Some(1), "{log}");
    assert!(log.contains("[new] alignment"), "{log}");
    let run1 = out_dir.join("latest").canonicalize().unwrap();
    let md = std::fs::read_to_string(&summary).unwrap();
    assert!(
        md.starts_with("earlier step\n"),
        "the job summary was overwritten:\n{md}"
    );
    for want in [
        "FAILED",
        "- signature: `alignment",
        "- minimized input: `",
        "Reproduce with:",
        "ALLOCSOAK_ALLOCATOR='zoo:small-underalign+short-realloc-copy'",
        "# <-- op",
    ] {
        assert!(md.contains(want), "markdown lacks {want:?}:\n{md}");
    }
    let xml = std::fs::read_to_string(dir.path().join("junit.xml")).unwrap();
    parse_xml(&xml);
    assert!(
        xml.contains("failures=\"1\"") && xml.contains("type=\"alignment\""),
        "{xml}"
    );
    assert!(
        xml.contains("signature: alignment") && xml.contains("Reproduce with:"),
        "{xml}"
    );
    assert_eq!(
        std::fs::read_to_string(run1.join("junit.xml")).unwrap(),
        xml,
        "the run folder keeps its own copy"
    );

    // 2. Declared known, the first bug is got past and the second fails
    // the gate. (The first pass may have filed the second bug too: a
    // slice goes on past a misaligned block; only the first is declared.)
    let known = dir.path().join("known.toml");
    known_file(&run1, &known);
    keep_only(&known, "alignment");
    let out = quick(
        &out_dir,
        TWO_BUGS,
        "60",
        &["--known", known.to_str().unwrap()],
    );
    let log = text(&out);
    assert_eq!(out.status.code(), Some(1), "{log}");
    assert!(log.contains("[new] realloc-prefix"), "{log}");
    assert!(log.contains("[known, hit in this pass] alignment"), "{log}");
    assert!(!log.contains("[new] alignment"), "{log}");

    // 3. Both bugs fixed, and one new: the same groups, now on an
    // allocator with only a panic in free(NULL). The two are reported
    // fixed; the panic fails the gate.
    let run2 = out_dir.join("latest").canonicalize().unwrap();
    known_file(&run2, &known);
    let file = std::fs::read_to_string(&known).unwrap();
    std::fs::write(&known, file.replace(TWO_BUGS, "zoo:free-null-panics")).unwrap();
    let out = quick(
        &out_dir,
        "zoo:free-null-panics",
        "15",
        &["--known", known.to_str().unwrap()],
    );
    let log = text(&out);
    assert_eq!(out.status.code(), Some(1), "{log}");
    assert!(log.contains("[new] panic"), "{log}");
    assert!(
        log.contains("[fixed: no longer reproduces] alignment"),
        "{log}"
    );
    assert!(
        log.contains("[fixed: no longer reproduces] realloc-prefix"),
        "{log}"
    );

    // 4. Known from the state dir that run left: the panic is got past,
    // the fixed ones stay fixed, and the gate passes.
    let run3 = out_dir.join("latest").canonicalize().unwrap();
    let out = quick(
        &out_dir,
        "zoo:free-null-panics",
        "15",
        &["--known", run3.to_str().unwrap()],
    );
    let log = text(&out);
    assert_eq!(out.status.code(), Some(0), "{log}");
    assert!(log.contains("allocsoak quick passed"), "{log}");
    assert!(log.contains("[known, hit in this pass] panic"), "{log}");
    assert!(log.contains("[fixed, still fixed] alignment"), "{log}");
}

#[test]
fn a_persistent_corpus_is_read_and_saved_back() {
    let _one = ONE_AT_A_TIME.lock().unwrap_or_else(|e| e.into_inner());
    let dir = tempfile::tempdir().unwrap();
    let corpus = dir.path().join("corpus");
    let mine = corpus.join("alloc_ops").join("kept-as-is");
    std::fs::create_dir_all(mine.parent().unwrap()).unwrap();
    std::fs::write(&mine, b"\x01\x02\x03").unwrap();
    let out = quick(
        &dir.path().join("out"),
        "system",
        "10",
        &["--corpus", corpus.to_str().unwrap(), "--save-corpus"],
    );
    let log = text(&out);
    assert_eq!(
        out.status.code(),
        Some(0),
        "a correct allocator fails the gate:\n{log}"
    );
    assert!(log.contains("quick: 1 corpus inputs from"), "{log}");
    assert!(log.contains("allocsoak quick passed"), "{log}");
    let saved = std::fs::read_dir(corpus.join("alloc_ops")).unwrap().count();
    assert!(
        saved > 10,
        "only {saved} inputs in the corpus after the pass\n{log}"
    );
    assert_eq!(std::fs::read(&mine).unwrap(), b"\x01\x02\x03");
    let leftovers: Vec<_> = std::fs::read_dir(corpus.join("alloc_ops"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with(".tmp-"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn bad_input_is_a_one_line_error() {
    let dir = tempfile::tempdir().unwrap();
    let out_dir = dir.path().join("out");
    for (args, want) in [
        (vec!["--save-corpus"], "--save-corpus needs --corpus DIR"),
        (
            vec!["--known", "/nonexistent/known.toml"],
            "is neither an allocsoak state dir nor a known-groups file",
        ),
        (
            vec!["--allocator", "no-such-allocator"],
            "no-such-allocator",
        ),
    ] {
        let out = allocsoak()
            .args(["quick", "--target", "alloc_ops", "--secs", "1", "--out"])
            .arg(&out_dir)
            .args(&args)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
        assert!(err.contains(want), "{args:?}: {err}");
        assert_eq!(err.trim().lines().count(), 1, "{args:?}: {err}");
    }
    // A known-groups file that is not one.
    let bad = dir.path().join("bad.toml");
    std::fs::write(&bad, "[[group]]\nid = 3\n").unwrap();
    let out = quick(&out_dir, "system", "1", &["--known", bad.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(err.contains("is not a known-groups file"), "{err}");
    assert_eq!(
        std::fs::read_to_string(&bad).unwrap(),
        "[[group]]\nid = 3\n"
    );
}
