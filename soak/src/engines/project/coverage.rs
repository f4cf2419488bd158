//! The coverage twin of a fuzz build (`allocsoak coverage`): the same
//! fuzz targets with the toolchains' source-based coverage and no
//! sanitizer, in a target dir of their own.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};
use shadow::Target;

use super::{clang, rustflags, Build, Project, COVERAGE_C_FLAGS};
use crate::foundation::cargo::TRIPLE;

impl Project {
    /// Where `build`'s coverage twin is made (`allocsoak coverage`):
    /// `fuzz_targets/target/coverage`, or `coverage-<flavor>` for a
    /// mimalloc flavor's.
    fn coverage_dir(&self, build: Build) -> PathBuf {
        let flavor = build.name().strip_prefix("asan").unwrap_or_default();
        self.root
            .join("fuzz_targets/target")
            .join(format!("coverage{flavor}"))
    }

    /// The binary of `target` in `build`'s coverage twin.
    pub fn coverage_binary(&self, build: Build, target: Target) -> PathBuf {
        self.coverage_dir(build)
            .join(TRIPLE)
            .join("release")
            .join(self.binary_name(target))
    }

    /// Builds every fuzz target of `build` (its mimalloc, the config's
    /// own allocators, jemalloc when `jemalloc`) once more with the
    /// toolchains' source-based coverage and no sanitizer (a no-op when
    /// cargo finds it fresh).
    pub fn build_coverage(&self, build: Build, jemalloc: bool) -> Result<()> {
        let clang = clang()?;
        self.write_glue(build)?;
        let status = Command::new("cargo")
            .current_dir(&self.root)
            .args(["+nightly", "fuzz", "build", "--fuzz-dir"])
            .arg(self.fuzz_dir())
            .args(["-O", "--sanitizer", "none", "--target-dir"])
            .arg(self.coverage_dir(build))
            .args(["--no-default-features", "--features"])
            .arg(build.coverage_features(jemalloc))
            .env("CC", &clang)
            .env(
                format!("CFLAGS_{}", TRIPLE.replace('-', "_")),
                COVERAGE_C_FLAGS,
            )
            // Branches too, as clang counts them for C.
            .env(
                "RUSTFLAGS",
                rustflags("-Cinstrument-coverage -Zcoverage-options=branch"),
            )
            .envs(prebuilt_libfuzzer(&clang))
            .status()
            .context("failed to run `cargo +nightly fuzz`; run `just setup`")?;
        if !status.success() {
            bail!(
                "building the coverage fuzz targets failed ({status}); see the cargo output above"
            );
        }
        Ok(())
    }
}

/// What makes libfuzzer-sys link clang's own libFuzzer (as OSS-Fuzz
/// links it) instead of compiling its sources again, a minute of a cold
/// build: for the coverage twin, which only replays inputs. Nothing when
/// clang has none (it is then compiled).
fn prebuilt_libfuzzer(clang: &str) -> Vec<(&'static str, String)> {
    let library = ["libclang_rt.fuzzer-x86_64.a", "libclang_rt.fuzzer.a"]
        .into_iter()
        .filter_map(|name| {
            let out = Command::new(clang)
                .arg(format!("-print-file-name={name}"))
                .output()
                .ok()?;
            let path = PathBuf::from(String::from_utf8_lossy(&out.stdout).trim());
            path.is_file().then_some(path)
        })
        .next();
    match library {
        // Built against libstdc++ (apt's clang), as OSS-Fuzz's check says.
        Some(path) => vec![
            ("CUSTOM_LIBFUZZER_PATH", path.display().to_string()),
            ("CUSTOM_LIBFUZZER_STD_CXX", "stdc++".into()),
        ],
        None => Vec::new(),
    }
}
