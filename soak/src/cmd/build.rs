//! `allocsoak build`: the fuzz targets, the drift build, and the honggfuzz
//! build when a slot runs honggfuzz; from the glue crate when the config
//! declares allocators, and plain as well.

use anyhow::Result;
use soak::config::Config;
use soak::engine::Engine;
use soak::project::{Build, Project};

#[derive(clap::Args)]
pub struct Args {
    /// Allocators to build for; the mimalloc flavors need builds of their own. Default: the default build.
    #[arg(long = "allocator")]
    allocators: Vec<String>,
    /// Build for this engine too (`honggfuzz`), even when no slot of the config runs it.
    /// Default: the engines the config's slots run (libFuzzer's build is always made:
    /// every finding is replayed on it).
    #[arg(long = "engine")]
    engines: Vec<String>,
}

pub fn run(args: Args, project: Project, config: Config) -> Result<bool> {
    let mut engines = Vec::new();
    for name in &args.engines {
        engines.push(Engine::parse(name)?);
    }
    for slot in config.slots()? {
        engines.push(Engine::parse(&slot.engine)?);
    }
    let mut builds: Vec<Build> = super::allocators(&config, args.allocators, &["system".into()])?
        .iter()
        .map(|a| Build::for_allocator(a))
        .collect();
    builds.dedup();
    // With declared allocators the plain targets are built first (the glue
    // build reuses what they compiled): a config that declares none, such
    // as a test's or a `--config` of one slot, runs them.
    let projects = match project.has_declared() {
        true => vec![project.plain(), project],
        false => vec![project],
    };
    for project in projects {
        for &build in &builds {
            project.build(build)?;
        }
        if engines.contains(&Engine::Honggfuzz) {
            project.build_honggfuzz()?;
        }
        project.build_drift()?;
    }
    Ok(true)
}
