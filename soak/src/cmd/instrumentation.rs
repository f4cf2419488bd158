//! `allocsoak instrumentation`: the C allocators carry coverage.

use std::path::PathBuf;

use anyhow::Result;
use soak::config::Config;
use soak::instrumentation;
use soak::project::Project;

#[derive(clap::Args)]
pub struct Args {
    /// Check this shared library (a `dylib:` allocator) instead (repeatable).
    #[arg(long = "dylib")]
    dylibs: Vec<PathBuf>,
}

pub fn run(args: Args, project: Project, _config: Config) -> Result<bool> {
    instrumentation::check(&project, &args.dylibs)
}
