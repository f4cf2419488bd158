//! The project layout: where the fuzz package, seeds, dictionaries and
//! builds live, and how a build for an allocator is made.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{bail, Context, Result};
use shadow::Target;

use crate::foundation::cargo::TRIPLE;
use crate::foundation::config::Config;
use crate::foundation::declared::{Declared, Glue};

mod coverage;

/// A build of the fuzz targets. C allocators are compiled with clang's
/// coverage instrumentation in every build, so the fuzzer sees their
/// branches; ASan builds also instrument them with ASan and mimalloc's
/// ASan tracking, so ASan sees inside mimalloc blocks. Both sides use
/// ASan's recover mode, so a known report can be got past.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Build {
    /// ASan + coverage, plain mimalloc: the default.
    Asan,
    /// ASan + coverage with mimalloc's `secure` build.
    AsanMimallocSecure,
    /// ASan + coverage with mimalloc's `debug` build (in-block overflow checks).
    AsanMimallocDebug,
    /// ASan + coverage with mimalloc's v3 line instead of v2.
    AsanMimallocV3,
}

impl Build {
    /// The build that serves an allocator name: the mimalloc flavors are
    /// compile-time, everything else runs in the default build.
    pub fn for_allocator(allocator: &str) -> Build {
        match allocator {
            "mimalloc-secure" => Build::AsanMimallocSecure,
            "mimalloc-debug" => Build::AsanMimallocDebug,
            "mimalloc-v3" => Build::AsanMimallocV3,
            _ => Build::Asan,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Build::Asan => "asan",
            Build::AsanMimallocSecure => "asan-mimalloc-secure",
            Build::AsanMimallocDebug => "asan-mimalloc-debug",
            Build::AsanMimallocV3 => "asan-mimalloc-v3",
        }
    }

    /// The fuzz package's features (its defaults off): the engine, the
    /// one mimalloc this build links, and jemalloc.
    pub fn features(self) -> &'static str {
        match self {
            Build::Asan => "libfuzzer,mimalloc,jemalloc",
            Build::AsanMimallocSecure => "libfuzzer,mimalloc-secure,jemalloc",
            Build::AsanMimallocDebug => "libfuzzer,mimalloc-debug,jemalloc",
            Build::AsanMimallocV3 => "libfuzzer,mimalloc-v3,jemalloc",
        }
    }

    /// [`Build::features`] of the coverage twin: without jemalloc unless
    /// it is among the allocators covered, as its C build is the longest
    /// of a cold coverage build (minutes on two cores).
    pub fn coverage_features(self, jemalloc: bool) -> &'static str {
        match jemalloc {
            true => self.features(),
            false => self
                .features()
                .strip_suffix(",jemalloc")
                .expect("every build's features end in jemalloc"),
        }
    }
}

/// One thing a soak's slots run that a build makes: a target's fuzz
/// binary in one build, every target's honggfuzz binary, or the drift
/// replay binary.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Part {
    Fuzz(Build, Target),
    /// With the bundled jemalloc only when a slot's allocator may run it
    /// ([`runs_jemalloc`]): its C build is the longest of all.
    Honggfuzz {
        jemalloc: bool,
    },
    Drift,
}

/// Whether `allocator` runs the bundled jemalloc: jemalloc itself, or a
/// zoo on it (its base, given or its first bug's). What the builds that
/// leave jemalloc's C out unless needed (coverage, honggfuzz) ask.
pub fn runs_jemalloc(allocator: &str) -> bool {
    allocator
        .strip_prefix("zoo:")
        .map_or(allocator, |spec| ::zoo::split_spec(spec).1)
        == "jemalloc"
}

impl std::fmt::Display for Part {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Part::Fuzz(build, target) => write!(f, "{} {}", build.name(), target.name()),
            Part::Honggfuzz { .. } => f.write_str("honggfuzz"),
            Part::Drift => f.write_str("drift"),
        }
    }
}

/// The flags every C allocator of the fuzz builds is compiled with:
/// coverage, ASan in recover mode (a known report can be got past), and
/// mimalloc's ASan tracking of its blocks.
pub const C_FLAGS: &str =
    "-fsanitize=fuzzer-no-link,address -fsanitize-recover=address -DMI_TRACK_ASAN=1";

/// The C flags of the coverage build: clang's source-based coverage,
/// whose profiles the Rust side's `-C instrument-coverage` runtime writes.
pub const COVERAGE_C_FLAGS: &str = "-fprofile-instr-generate -fcoverage-mapping";

/// Knows every path in the project.
pub struct Project {
    root: PathBuf,
    /// The glue crate of a config's declared allocators, which the fuzz
    /// targets are built from instead of `fuzz_targets/` when there is one.
    declared: Option<DeclaredGlue>,
}

/// A config's declared allocators and where their glue goes.
struct DeclaredGlue {
    glue: Glue,
    base: PathBuf,
    list: Vec<Declared>,
}

impl Project {
    /// The project the `allocsoak` binary was built from, or `ALLOCSOAK_ROOT`.
    pub fn find() -> Result<Project> {
        let root = match std::env::var_os("ALLOCSOAK_ROOT") {
            Some(r) => PathBuf::from(r),
            None => Path::new(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .expect("soak/ has a parent")
                .to_path_buf(),
        };
        if !root.join("fuzz_targets/Cargo.toml").is_file() {
            bail!(
                "{} is not an allocsoak checkout (no fuzz_targets/Cargo.toml); set ALLOCSOAK_ROOT",
                root.display()
            );
        }
        Ok(Project {
            root,
            declared: None,
        })
    }

    /// The project as `config` sees it: with the config's declared
    /// allocators, the fuzz targets are built from their glue crate.
    pub fn with_config(mut self, config: &Config) -> Project {
        self.declared = (!config.declared.is_empty()).then(|| DeclaredGlue {
            glue: Glue::at(&self.root, &config.path),
            base: config.base().to_path_buf(),
            list: config.declared.clone(),
        });
        self
    }

    /// The config's declared allocators (none without a config's).
    pub fn declared(&self) -> &[Declared] {
        self.declared.as_ref().map_or(&[], |d| &d.list)
    }

    /// The config's lock file, whose versions the glue builds with
    /// (`<config>.lock` beside the config).
    pub fn pinned(&self) -> Option<&Path> {
        self.declared.as_ref()?.glue.pinned()
    }

    /// The folder the declared allocators' paths are relative to.
    pub fn declared_base(&self) -> &Path {
        self.declared.as_ref().map_or(&self.root, |d| &d.base)
    }

    /// The same checkout without the config's declared allocators: the
    /// plain `fuzz_targets/` build, which a config that declares none runs.
    pub fn plain(&self) -> Project {
        Project {
            root: self.root.clone(),
            declared: None,
        }
    }

    /// Whether the fuzz targets are built from a glue crate.
    pub fn has_declared(&self) -> bool {
        self.declared.is_some()
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Has a fuzz build compile the harness's crates without sanitizer
    /// coverage: `fuzz_targets/rustc-wrapper` as `RUSTC_WRAPPER`, the
    /// crates in `ALLOCSOAK_UNCOVERED`. Returns a `--cfg` for `RUSTFLAGS`
    /// that names both: cargo rebuilds when `RUSTFLAGS` changes, not when
    /// the wrapper's script or environment does.
    fn uncover_harness(&self, cmd: &mut Command) -> Result<String> {
        use std::hash::{Hash, Hasher};
        let wrapper = self.root.join("fuzz_targets/rustc-wrapper");
        let script = std::fs::read(&wrapper)
            .with_context(|| format!("failed to read {}", wrapper.display()))?;
        let crates = uncovered();
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        (script, &crates).hash(&mut hasher);
        cmd.env("RUSTC_WRAPPER", &wrapper)
            .env("ALLOCSOAK_UNCOVERED", crates);
        Ok(format!(
            "--cfg=allocsoak_uncovered=\"{:016x}\"",
            hasher.finish()
        ))
    }

    /// The fuzz package the binaries are built from: `fuzz_targets/`, or
    /// the glue crate of the config's declared allocators.
    pub fn fuzz_dir(&self) -> PathBuf {
        match &self.declared {
            Some(d) => d.glue.dir.clone(),
            None => self.root.join("fuzz_targets"),
        }
    }

    /// Committed seed inputs of a target.
    pub fn seeds(&self, target: Target) -> PathBuf {
        self.root.join("corpus").join(target.name()).join("seeds")
    }

    /// The libFuzzer dictionary of a target.
    pub fn dict(&self, target: Target) -> PathBuf {
        self.root.join("corpus").join(target.name()).join("dict")
    }

    /// Scratch space for runs of `what` (zoo, bench, fuzz), kept for reading.
    pub fn work_dir(&self, what: &str) -> PathBuf {
        self.root.join("target/allocsoak").join(what)
    }

    /// The folder of one run under `work_dir(what)`, named after its parts
    /// (target, allocator, ...) with path characters made safe.
    pub fn run_dir(&self, what: &str, parts: &[&str]) -> PathBuf {
        let name: String = parts
            .join("-")
            .chars()
            .map(|c| if c == '/' || c == ':' { '_' } else { c })
            .collect();
        self.work_dir(what).join(name)
    }

    /// One build folder for `fuzz_targets/` and every glue crate: a glue
    /// build reuses what the plain build compiled (shadow, the bundled C
    /// allocators, libFuzzer) and adds the declared allocators; its binaries
    /// carry the glue's name ([`Glue::binary_name`]).
    fn build_dir(&self, build: Build) -> PathBuf {
        self.root.join("fuzz_targets/target").join(build.name())
    }

    /// The fuzz binary of `target` in `build`.
    pub fn binary(&self, build: Build, target: Target) -> PathBuf {
        self.build_dir(build)
            .join(TRIPLE)
            .join("release")
            .join(self.binary_name(target))
    }

    /// A target's binary name: its own, or the glue's for declared allocators.
    pub fn binary_name(&self, target: Target) -> String {
        match &self.declared {
            Some(d) => d.glue.binary_name(target),
            None => target.name().to_string(),
        }
    }

    /// honggfuzz's build folder, shared like [`Project::build_dir`] by
    /// `fuzz_targets/` and every glue crate.
    fn hfuzz_dir(&self) -> PathBuf {
        self.root.join("fuzz_targets/hfuzz_target")
    }

    /// The honggfuzz binary of `target`: persistent mode, no sanitizer,
    /// plain mimalloc (the mimalloc flavors have no honggfuzz build).
    pub fn honggfuzz_binary(&self, target: Target) -> PathBuf {
        self.hfuzz_dir()
            .join(TRIPLE)
            .join("release")
            .join(self.binary_name(target))
    }

    /// The `honggfuzz` driver, which `cargo hfuzz build` leaves in its folder.
    pub fn honggfuzz_driver(&self) -> PathBuf {
        self.hfuzz_dir().join("honggfuzz")
    }

    /// Builds every target for honggfuzz with `cargo hfuzz` (a no-op when
    /// cargo finds it fresh), the C allocators compiled by nightly's clang
    /// with coverage in the form honggfuzz reads.
    pub fn build_honggfuzz(&self, jemalloc: bool) -> Result<()> {
        let status = self
            .honggfuzz_command(jemalloc)?
            .status()
            .context("failed to run `cargo +nightly hfuzz`; run `just setup`")?;
        if !status.success() {
            bail!(
                "building the honggfuzz fuzz targets failed ({status}); see the cargo output above"
            );
        }
        Ok(())
    }

    /// `cargo hfuzz build` of every target, the glue written; with the
    /// bundled jemalloc when `jemalloc`.
    fn honggfuzz_command(&self, jemalloc: bool) -> Result<Command> {
        let clang = clang()?;
        if let Some(d) = &self.declared {
            d.glue.write(&self.root, &d.base, &d.list)?;
        }
        let mut cmd = Command::new("cargo");
        let uncovered = self.uncover_harness(&mut cmd)?;
        cmd.env("RUSTFLAGS", rustflags(&uncovered))
            .current_dir(self.fuzz_dir())
            .args(["+nightly", "hfuzz", "build", "--no-default-features"])
            .args(["--features", honggfuzz_features(jemalloc)])
            .env("CARGO_TARGET_DIR", self.hfuzz_dir())
            .env("CXX", clang.replace("clang", "clang++"))
            .env("CC", &clang)
            .env(
                format!("CFLAGS_{}", TRIPLE.replace('-', "_")),
                "-fsanitize-coverage=trace-pc-guard,trace-cmp",
            );
        Ok(cmd)
    }

    /// The RSS drift replay binary: a plain release build (no sanitizer,
    /// no fuzzer) of `fuzz_targets`' `drift` bin, or of the glue's with
    /// the config's declared allocators, in a folder of its own.
    pub fn drift_binary(&self) -> PathBuf {
        let name = match &self.declared {
            Some(d) => d.glue.drift_binary_name(),
            None => "drift".to_string(),
        };
        self.root
            .join("fuzz_targets/target/drift/release")
            .join(name)
    }

    /// Builds [`Project::drift_binary`] (a no-op when cargo finds it fresh).
    pub fn build_drift(&self) -> Result<()> {
        let status = self
            .drift_command()?
            .status()
            .context("failed to run `cargo +nightly build`; run `just setup`")?;
        if !status.success() {
            bail!("building the drift replay binary failed ({status}); see the cargo output above");
        }
        Ok(())
    }

    /// `cargo build` of the drift replay binary, the glue written.
    fn drift_command(&self) -> Result<Command> {
        if let Some(d) = &self.declared {
            d.glue.write(&self.root, &d.base, &d.list)?;
        }
        let mut cmd = Command::new("cargo");
        cmd.current_dir(self.fuzz_dir())
            .args(["+nightly", "build", "--release", "--no-default-features"])
            .args(["--features", "drift,mimalloc,jemalloc", "--bin"])
            .arg(self.drift_binary().file_name().expect("a binary's name"))
            .arg("--target-dir")
            .arg(self.root.join("fuzz_targets/target/drift"))
            .env_remove("RUSTFLAGS")
            .env_remove("CFLAGS");
        Ok(cmd)
    }

    /// `cargo +nightly miri run` of the fuzz package's Miri replay binary
    /// (`fuzz_targets/`'s `miri`, or the glue's), the glue written, over
    /// `inputs` of `target` on `allocator` (`engines::miri` runs it).
    pub fn miri_command(
        &self,
        allocator: &str,
        target: Target,
        inputs: &[PathBuf],
    ) -> Result<Command> {
        let bin = match &self.declared {
            Some(d) => {
                d.glue.write(&self.root, &d.base, &d.list)?;
                d.glue.miri_binary_name()
            }
            None => "miri".to_string(),
        };
        let mut cmd = Command::new("cargo");
        cmd.current_dir(self.fuzz_dir())
            .args(["+nightly", "miri", "run", "-q", "--no-default-features"])
            .args(["--features", "miri", "--bin", &bin, "--target-dir"])
            .arg(self.root.join("fuzz_targets/target/miri"))
            .args(["--", allocator, target.name()])
            .args(inputs)
            .env_remove("RUSTFLAGS")
            .env_remove("CFLAGS");
        Ok(cmd)
    }

    /// The static archives of the bundled C allocators in `build`
    /// (mimalloc, jemalloc), for the instrumentation check.
    pub fn c_archives(&self, build: Build) -> Result<Vec<PathBuf>> {
        let out = self.build_dir(build).join(TRIPLE).join("release/build");
        let mut found = Vec::new();
        let entries = std::fs::read_dir(&out)
            .with_context(|| format!("no build at {}; run `just build` first", out.display()))?;
        for entry in entries {
            let dir = entry?.path();
            for archive in ["out/libmimalloc.a", "out/lib/libjemalloc.a"] {
                if dir.join(archive).is_file() {
                    found.push(dir.join(archive));
                }
            }
        }
        found.sort();
        Ok(found)
    }

    /// Fails in one line when the declared crates would change, or run
    /// unasked, a native library allocsoak's own allocators are built from
    /// in `build` (`declared::natives`). Nothing is built.
    pub fn check_declared(&self, build: Build) -> Result<()> {
        match &self.declared {
            Some(d) => d.glue.check_natives(
                &self.root.join("fuzz_targets"),
                &d.base,
                &d.list,
                build.features(),
            ),
            None => Ok(()),
        }
    }

    /// Writes the glue crate of the config's declared allocators for
    /// `build`, after [`Project::check_declared`]; nothing to do without
    /// any. Nothing is built: [`Project::build`] builds it here, and
    /// OSS-Fuzz's build.sh with its own flags.
    pub fn write_glue(&self, build: Build) -> Result<()> {
        if let Some(d) = &self.declared {
            self.check_declared(build)?;
            d.glue.write(&self.root, &d.base, &d.list)?;
        }
        Ok(())
    }

    /// Builds every fuzz target for `build` with cargo-fuzz (a no-op when
    /// cargo finds it fresh).
    pub fn build(&self, build: Build) -> Result<()> {
        let status = self
            .cargo_fuzz_build(build)?
            .status()
            .context("failed to run `cargo +nightly fuzz`; run `just setup`")?;
        if !status.success() {
            bail!(
                "building the `{}` fuzz targets failed ({status}); see the cargo output above",
                build.name()
            );
        }
        Ok(())
    }

    /// Builds one [`Part`], cargo's output written to `log` (else shown);
    /// `Ok(false)` when it does not build.
    pub fn build_part(&self, part: Part, log: Option<&Path>) -> Result<bool> {
        let mut cmd = self.part_command(part)?;
        let Some(log) = log else {
            let status = cmd
                .status()
                .context("failed to run cargo; run `just setup`")?;
            return Ok(status.success());
        };
        let out = cmd
            .output()
            .context("failed to run cargo; run `just setup`")?;
        crate::foundation::state::write_atomic(log, &[out.stdout, out.stderr].concat())?;
        Ok(out.status.success())
    }

    /// The cargo command that builds `part` (a no-op when cargo finds it
    /// fresh), the glue written.
    pub fn part_command(&self, part: Part) -> Result<Command> {
        Ok(match part {
            Part::Fuzz(build, target) => {
                let mut cmd = self.cargo_fuzz_build(build)?;
                cmd.arg(self.binary_name(target));
                cmd
            }
            Part::Honggfuzz { jemalloc } => self.honggfuzz_command(jemalloc)?,
            Part::Drift => self.drift_command()?,
        })
    }

    /// `cargo fuzz build` of `build`'s fuzz targets, the glue written.
    fn cargo_fuzz_build(&self, build: Build) -> Result<Command> {
        let clang = clang()?;
        self.write_glue(build)?;
        let mut cmd = Command::new("cargo");
        cmd.current_dir(&self.root)
            .args(["+nightly", "fuzz", "build", "--fuzz-dir"])
            .arg(self.fuzz_dir())
            .args(["-O", "--target-dir"])
            .arg(self.build_dir(build))
            .env("CC", &clang)
            // ASan's recover mode on both sides: a report returns to the
            // harness, which gets past the ones already filed
            // (shadow/src/sanitizer.rs).
            .env(format!("CFLAGS_{}", TRIPLE.replace('-', "_")), C_FLAGS)
            .args(["--no-default-features", "--features", build.features()]);
        let uncovered = self.uncover_harness(&mut cmd)?;
        cmd.env(
            "RUSTFLAGS",
            rustflags(&format!("-Zsanitizer-recover=address {uncovered}")),
        );
        Ok(cmd)
    }
}

/// The features of honggfuzz's build (its mimalloc is the plain one: the
/// flavors have no honggfuzz build).
fn honggfuzz_features(jemalloc: bool) -> &'static str {
    match jemalloc {
        true => "honggfuzz,mimalloc,jemalloc",
        false => "honggfuzz,mimalloc",
    }
}

/// The harness's crates, space-separated: `ALLOCSOAK_UNCOVERED`.
pub fn uncovered() -> String {
    shadow::coverage::uncovered_crates()
        .collect::<Vec<_>>()
        .join(" ")
}

/// `RUSTFLAGS` from the environment with `ours` after them (cargo-fuzz
/// appends them to its own).
fn rustflags(ours: &str) -> String {
    match std::env::var("RUSTFLAGS") {
        Ok(theirs) if !theirs.trim().is_empty() => format!("{theirs} {ours}"),
        _ => ours.to_string(),
    }
}

/// The major version of the LLVM the nightly rustc uses.
pub fn llvm_major() -> Result<String> {
    let out = Command::new("rustc")
        .args(["+nightly", "-vV"])
        .output()
        .context(
            "failed to run `rustc +nightly -vV`; install a nightly toolchain (`just setup`)",
        )?;
    let text = String::from_utf8_lossy(&out.stdout);
    let major = text
        .lines()
        .find_map(|l| l.strip_prefix("LLVM version: "))
        .and_then(|v| v.split('.').next())
        .context("`rustc +nightly -vV` printed no LLVM version")?;
    Ok(major.to_string())
}

/// The clang whose LLVM matches the nightly rustc's, so the C side's
/// coverage and ASan instrumentation agree with the Rust side's runtime.
pub fn clang() -> Result<String> {
    let major = llvm_major()?;
    let clang = format!("clang-{major}");
    match Command::new(&clang).arg("--version").output() {
        Ok(o) if o.status.success() => Ok(clang),
        _ => bail!("{clang} not found: nightly rustc uses LLVM {major}; install it with `just setup` (apt-get install {clang})"),
    }
}
