//! `allocsoak oss-fuzz`: what OSS-Fuzz's and ClusterFuzzLite's build
//! (`oss-fuzz/build.sh`) builds for a config, so an author's declared
//! allocators are fuzzed there as they are here. It writes the glue crate
//! of the config's declared allocators (the build runs cargo-fuzz on it
//! with OSS-Fuzz's flags) and prints, one per line on stdout:
//!
//! ```text
//! package <folder>                     the fuzz package to build
//! limits <timeout secs> <rss MiB>      libFuzzer's per-input limits
//! uncovered <crate> <crate> ...        the harness's crates, built without
//!                                      coverage (fuzz_targets/rustc-wrapper)
//! fuzzer <target> <binary> <name>      $OUT/<name> is <binary> of the build
//! ```
//!
//! `<name>` is `<target>` for every target (on `system`), and
//! `<target>__<allocator>` for each of the config's slots in the default
//! build: the harness takes the allocator from the binary's name, as
//! ClusterFuzz sets no environment of ours. What is left out, and why,
//! goes to stderr with what each allocator runs.

use anyhow::Result;
use shadow::Target;
use soak::engines::project::{Build, Project};
use soak::foundation::config::Config;

#[derive(clap::Args)]
pub struct Args {}

pub fn run(_args: Args, project: Project, config: Config) -> Result<bool> {
    // cargo-fuzz's default features are the default build's.
    let build = Build::Asan;
    project.write_glue(build)?;
    println!("package {}", project.fuzz_dir().display());
    println!("limits {} {}", config.timeout_secs, config.rss_limit_mb);
    println!("uncovered {}", soak::engines::project::uncovered());
    for target in Target::ALL {
        let binary = project.binary_name(target);
        println!("fuzzer {} {binary} {}", target.name(), target.name());
    }
    for why in config.left_out() {
        eprintln!("allocsoak oss-fuzz: {why}");
    }
    let mut names: Vec<String> = Vec::new();
    let mut pairs: Vec<(Target, String)> = Vec::new();
    for slot in config.slots()? {
        // A slot per engine: ClusterFuzz runs its own.
        let pair = (slot.target, slot.allocator);
        if pair.1 == "system" || pairs.contains(&pair) {
            continue;
        }
        pairs.push(pair.clone());
        let (target, allocator) = pair;
        if let Err(why) = cluster_fuzz_name(&allocator) {
            eprintln!("allocsoak oss-fuzz: `{allocator}` left out: {why}");
            continue;
        }
        let binary = project.binary_name(target);
        let t = target.name();
        println!("fuzzer {t} {binary} {t}__{allocator}");
        names.push(allocator);
    }
    names.sort();
    names.dedup();
    for line in project.provenance(build, &names)? {
        eprintln!("allocsoak oss-fuzz: {}: {}", line.name, line.runs);
    }
    eprintln!("allocsoak oss-fuzz: C sources are compiled with OSS-Fuzz's $CC and $CFLAGS here, not the flags named above");
    Ok(true)
}

/// Whether `allocator` can be a ClusterFuzz fuzzer's suffix and runs in
/// the default build; `Err` says why not.
fn cluster_fuzz_name(allocator: &str) -> Result<(), &'static str> {
    if Build::for_allocator(allocator) != Build::Asan {
        return Err("a mimalloc flavor needs a build of its own");
    }
    let plain = allocator
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    match plain {
        true => Ok(()),
        false => Err("a fuzzer's name takes letters, digits, `-` and `_` only (a `dylib:` or `zoo:` name has more)"),
    }
}
