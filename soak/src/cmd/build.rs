//! `allocsoak build`: the fuzz targets and the drift build.

use anyhow::Result;
use soak::config::Config;
use soak::project::{Build, Project};

#[derive(clap::Args)]
pub struct Args {
    /// Allocators to build for; the mimalloc flavors need builds of their own. Default: the default build.
    #[arg(long = "allocator")]
    allocators: Vec<String>,
}

pub fn run(args: Args, project: Project, config: Config) -> Result<bool> {
    let mut builds: Vec<Build> = super::allocators(&config, args.allocators, &["system".into()])?
        .iter()
        .map(|a| Build::for_allocator(a))
        .collect();
    builds.dedup();
    for build in builds {
        project.build(build)?;
    }
    project.build_drift()?;
    Ok(true)
}
