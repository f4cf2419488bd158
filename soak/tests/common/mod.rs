#![allow(dead_code)]
//! Helpers the end-to-end soak tests share: the real `allocsoak` binary on
//! a temporary state dir, and reads of its store.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use rusqlite::Connection;

/// Soaks run one at a time: two at once would share two cores.
pub static ONE_AT_A_TIME: Mutex<()> = Mutex::new(());

/// The `allocsoak` binary. Its fuzz passes grow a corpus of this test
/// binary's own, new at each run, not the checkout's shared one: what ran
/// there before would change what a test's pass runs.
pub fn allocsoak() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_allocsoak"));
    cmd.env("ALLOCSOAK_FUZZ_CORPUS", fuzz_corpus());
    cmd
}

/// `target/tmp/fuzz-corpus-<test binary>`, emptied when this process
/// first asks for it.
fn fuzz_corpus() -> &'static Path {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| {
        let exe = std::env::current_exe().unwrap();
        let name = exe.file_stem().unwrap().to_string_lossy();
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("fuzz-corpus-{name}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    })
}

/// `allocsoak --config <config> <args>`, run to its end: its output, and
/// its stdout then stderr as one text.
pub fn with_config(config: &Path, args: &[&str]) -> (Output, String) {
    let mut cmd = allocsoak();
    cmd.arg("--config").arg(config);
    run_allocsoak(cmd, args)
}

/// `allocsoak <args>` (`cmd`, with what precedes them) run to its end: its
/// output, and its stdout then stderr as one text.
pub fn run_allocsoak(mut cmd: Command, args: &[&str]) -> (Output, String) {
    let out = cmd.args(args).output().unwrap();
    let text = format!(
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out, text)
}

/// What `allocsoak fuzz` found per (target, allocator) line, sorted (its
/// pairs run two at a time, and print as they end).
pub fn found(text: &str) -> Vec<(String, String, String)> {
    let mut found: Vec<_> = text
        .lines()
        .filter_map(|l| {
            let mut words = l.strip_prefix("fuzz ")?.split_whitespace();
            let (target, allocator) = (words.next()?, words.next()?);
            let found = words.find_map(|w| w.strip_prefix("found="))?;
            Some((target.into(), allocator.into(), found.into()))
        })
        .collect();
    found.sort();
    found
}

/// A soak of `args` on `state`, which must succeed. Drift workers are off
/// unless the test asks for them (`--drift-share`, or a `--config` of its
/// own): soak.toml's would replay each test's zoo allocator beside its
/// fuzz slices and file what they find there too.
pub fn soak(state: &Path, args: &[&str]) -> Output {
    counted(
        state,
        succeeded(soak_command(state, args).output().unwrap()),
    )
}

/// [`soak`], stopped as a user stops it (SIGINT) as soon as `done` holds
/// of its store, which is asked every second: the soak's `--duration` is
/// then the most it may take to get there, not what every run costs.
/// `done` should ask for all the test then checks of what was filed.
pub fn soak_until(state: &Path, args: &[&str], done: impl Fn(&Path) -> bool) -> Output {
    soak_until_env(state, args, &[], done)
}

/// [`soak_until`], with `env` set for the soak (and so for its slices and
/// replays).
pub fn soak_until_env(
    state: &Path,
    args: &[&str],
    env: &[(&str, &str)],
    done: impl Fn(&Path) -> bool,
) -> Output {
    let logs = tempfile::tempdir().unwrap();
    let (stdout, stderr) = (logs.path().join("stdout"), logs.path().join("stderr"));
    let mut child = soak_command(state, args)
        .envs(env.iter().copied())
        .stdout(std::fs::File::create(&stdout).unwrap())
        .stderr(std::fs::File::create(&stderr).unwrap())
        .spawn()
        .unwrap();
    let start = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        std::thread::sleep(Duration::from_secs(1));
        if state.join("store.sqlite").exists() && done(state) {
            eprintln!("soak_until: done after {:?}", start.elapsed());
            // SAFETY: `kill` has no memory preconditions; our own child's
            // pid, not yet waited for, so not reused.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            break child.wait().unwrap();
        }
    };
    let out = succeeded(Output {
        status,
        stdout: std::fs::read(stdout).unwrap(),
        stderr: std::fs::read(stderr).unwrap(),
    });
    counted(state, out)
}

/// `allocsoak soak` on `state` with `args`. Drift workers are off unless
/// the test asks for them (see [`soak`]).
fn soak_command(state: &Path, args: &[&str]) -> Command {
    let own = args
        .iter()
        .any(|a| *a == "--drift-share" || *a == "--config");
    let mut command = allocsoak();
    command
        .arg("soak")
        .arg("--state")
        .arg(state)
        .args(["--progress-secs", "5"])
        .args(if own {
            &[][..]
        } else {
            &["--drift-share", "0"][..]
        })
        .args(args);
    command
}

/// A soak's output, once every slice of it that fuzzed for seconds counted
/// executions (a `-fork` slice's parent counts none of a child that died;
/// a Miri pass the soak's stop cut short ran none).
fn counted(state: &Path, out: Output) -> Output {
    if state.join("store.sqlite").exists() {
        let idle = count(
            state,
            "SELECT COUNT(*) FROM slice WHERE fuzz_secs > 10 AND COALESCE(execs, 0) = 0
             AND COALESCE(outcome, '') != 'miri'",
        );
        assert_eq!(
            idle,
            0,
            "slices fuzzed with no execution counted\n{}",
            String::from_utf8_lossy(&out.stdout)
        );
    }
    out
}

/// A soak's output, which must say it succeeded.
fn succeeded(out: Output) -> Output {
    assert!(
        out.status.success(),
        "soak failed: {}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

pub fn db(state: &Path) -> Connection {
    Connection::open(state.join("store.sqlite")).unwrap()
}

pub fn count(state: &Path, sql: &str) -> i64 {
    db(state).query_row(sql, [], |r| r.get(0)).unwrap()
}

/// (id, kind, raw crashes, repro command, title) of every group.
pub fn groups(state: &Path) -> Vec<(String, String, i64, String, String)> {
    let db = db(state);
    let mut stmt = db
        .prepare("SELECT id, kind, count, repro, title FROM crash_group ORDER BY kind, title")
        .unwrap();
    let rows = stmt
        .query_map([], |r| {
            Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
        })
        .unwrap();
    rows.map(Result::unwrap).collect()
}

/// Whether one `rss-drift` group is filed, with its culprits (what a
/// drift test's soak waits for, see [`soak_until`]).
pub fn drift_filed_with_culprits(state: &Path) -> bool {
    let drift = strings(state, "SELECT id FROM crash_group WHERE kind = 'rss-drift'");
    drift.len() == 1
        && std::fs::read_dir(state.join("crashes").join(&drift[0]).join("culprits"))
            .is_ok_and(|mut culprits| culprits.next().is_some())
}

/// The rows of a query of one text column.
pub fn strings(state: &Path, sql: &str) -> Vec<String> {
    let conn = db(state);
    let mut stmt = conn.prepare(sql).unwrap();
    let rows = stmt.query_map([], |r| r.get(0)).unwrap();
    rows.map(Result::unwrap).collect()
}

/// Each group's signature key (kind, allocator, message, then its frames
/// or code path, a line each), by group id.
pub fn signatures(state: &Path) -> Vec<String> {
    strings(state, "SELECT signature FROM crash_group ORDER BY id")
}

/// The distinct kinds of the groups filed.
pub fn kinds(state: &Path) -> Vec<String> {
    let mut kinds: Vec<String> = groups(state).into_iter().map(|g| g.1).collect();
    kinds.dedup();
    kinds
}

/// Runs a repro command as a user would paste it.
pub fn repro(command: &str) -> Output {
    Command::new("sh").arg("-c").arg(command).output().unwrap()
}

/// `allocsoak repro <group> --emit-test <test_file>` on the state dir: it
/// must exit 1 (the group reproduces); returns what it printed.
pub fn repro_group(state: &Path, group: &str, test_file: &Path) -> String {
    let out = allocsoak()
        .args(["repro", group, "--state"])
        .arg(state)
        .arg("--emit-test")
        .arg(test_file)
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(
        out.status.code(),
        Some(1),
        "repro must fail while it reproduces: {text}"
    );
    text
}

/// Compiles the emitted test in a crate of its own, with `shadow` as its
/// only dependency, and runs it on the zoo allocator it names (it fails
/// with a `kind` violation) and on `system` (it passes). `shadow` comes
/// without the bundled C allocators, which neither run needs: building
/// jemalloc from source was most of this test's first run.
pub fn emitted_test_fails_on_the_zoo_and_passes_on_system(test_file: &Path, kind: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap();
    let krate = tempfile::tempdir().unwrap();
    std::fs::write(
        krate.path().join("Cargo.toml"),
        format!(
            "[package]\nname = \"emitted\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n\
             [dev-dependencies]\nshadow = {{ path = {:?}, default-features = false }}\nzoo = {{ path = {:?} }}\n\n[workspace]\n",
            root.join("shadow"),
            root.join("zoo")
        ),
    )
    .unwrap();
    std::fs::copy(root.join("Cargo.lock"), krate.path().join("Cargo.lock")).unwrap();
    std::fs::create_dir_all(krate.path().join("src")).unwrap();
    std::fs::write(krate.path().join("src/lib.rs"), "").unwrap();
    std::fs::create_dir_all(krate.path().join("tests")).unwrap();
    std::fs::copy(test_file, krate.path().join("tests/emitted.rs")).unwrap();
    let cargo = |allocator: Option<&str>| {
        let mut cmd = Command::new(env!("CARGO"));
        cmd.args(["test", "--offline", "--test", "emitted"])
            .current_dir(krate.path())
            .env("CARGO_TARGET_DIR", root.join("target/emitted-test"))
            .env_remove("ALLOCSOAK_ALLOCATOR");
        if let Some(a) = allocator {
            cmd.env("ALLOCSOAK_ALLOCATOR", a);
        }
        cmd.output().unwrap()
    };
    let on_zoo = cargo(None);
    let text = String::from_utf8_lossy(&on_zoo.stdout);
    assert!(
        !on_zoo.status.success(),
        "the emitted test passed on the buggy zoo: {text}"
    );
    assert!(
        text.contains(&format!("allocsoak violation: {kind}")),
        "{text}{}",
        String::from_utf8_lossy(&on_zoo.stderr)
    );
    let on_system = cargo(Some("system"));
    assert!(
        on_system.status.success(),
        "{}",
        String::from_utf8_lossy(&on_system.stdout)
    );
}

/// Copies the tree `from` to `to`, files and folders.
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        let dest = to.join(path.file_name().unwrap());
        if path.is_dir() {
            copy_dir(&path, &dest);
        } else {
            std::fs::copy(&path, &dest).unwrap();
        }
    }
}

/// `git status` of the checkout, untracked files included: what a test that
/// must leave the checkout as it was compares before and after.
pub fn checkout_status() -> String {
    let out = Command::new("git")
        .args(["status", "--porcelain", "--untracked-files=all"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .expect("run git");
    assert!(out.status.success(), "git status failed");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// The unpacked source of crate `name` at exactly `version`, fetched from
/// the package registry as cargo fetches a dependency (a scratch manifest
/// depending on it, then `cargo metadata`): real third-party code, never
/// a vendored copy. The registry must be reachable (it is from CI).
pub fn registry_crate(name: &str, version: &str) -> std::path::PathBuf {
    let dir = std::env::temp_dir().join(format!("allocsoak-fetch-{name}-{version}"));
    std::fs::create_dir_all(dir.join("src")).unwrap();
    std::fs::write(
        dir.join("Cargo.toml"),
        format!(
            "[package]\nname = \"fetch\"\nversion = \"0.0.0\"\nedition = \"2021\"\n\n\
             [dependencies]\n{name} = \"={version}\"\n\n[workspace]\n"
        ),
    )
    .unwrap();
    std::fs::write(dir.join("src/lib.rs"), "").unwrap();
    let metadata = cargo_metadata::MetadataCommand::new()
        .manifest_path(dir.join("Cargo.toml"))
        .exec()
        .unwrap_or_else(|e| panic!("fetching {name} {version} from the registry: {e}"));
    let package = metadata
        .packages
        .iter()
        .find(|p| p.name.as_str() == name && p.version.to_string() == version)
        .unwrap_or_else(|| panic!("{name} {version} is not in the fetched graph"));
    package
        .manifest_path
        .parent()
        .expect("a manifest sits in its crate's folder")
        .into()
}

/// Compiles `sources` into the shared library `out` as docs/allocators.md
/// builds a `dylib:` allocator: the project's clang (nightly's LLVM),
/// `-O2 -g`, the fuzzer's coverage and ASan; `more` comes last (a later
/// `-O` wins).
pub fn instrumented_dylib(out: &Path, sources: &[&Path], more: &[&str]) {
    let clang =
        soak::engines::project::clang().expect("clang matching nightly's LLVM (just setup)");
    let status = Command::new(clang)
        .args(["-O2", "-g", "-fPIC", "-shared"])
        .args([
            "-fsanitize=fuzzer-no-link,address",
            "-fsanitize-recover=address",
        ])
        .arg("-o")
        .arg(out)
        .args(sources)
        .args(more)
        .status()
        .unwrap();
    assert!(status.success(), "compiling {} failed", out.display());
}

/// Runs the program text in `program` on a fuzz binary (as written:
/// `ALLOCSOAK_TEXT_INPUTS=1`) against `allocator`, with `env` too:
/// whether it ran clean, and its stderr.
pub fn run_text(
    binary: &Path,
    allocator: &str,
    program: &Path,
    env: &[(&str, &str)],
) -> (bool, String) {
    let out = Command::new(binary)
        .env("ALLOCSOAK_TEXT_INPUTS", "1")
        .env("ALLOCSOAK_ALLOCATOR", allocator)
        .envs(env.iter().copied())
        .arg(program)
        .output()
        .unwrap();
    let log = String::from_utf8_lossy(&out.stderr).into_owned();
    (out.status.success(), log)
}

/// A mimalloc release's C sources in its libmimalloc-sys crate: the
/// `static.c` that includes the rest, and the include folder.
pub fn mimalloc_sources(sys_version: &str) -> (PathBuf, PathBuf) {
    let c = registry_crate("libmimalloc-sys", sys_version).join("c_src/mimalloc");
    // From 0.1.44 the crate carries both lines, v2 in its own folder.
    let c = match c.join("v2/src/static.c").exists() {
        true => c.join("v2"),
        false => c,
    };
    (c.join("src/static.c"), c.join("include"))
}

/// Every `.rs` file under `dir`, sorted.
pub fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let mut entries: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    entries.sort();
    for path in entries {
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}
