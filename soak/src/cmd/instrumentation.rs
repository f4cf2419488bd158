//! `allocsoak instrumentation`: the C allocators carry coverage.

use std::path::PathBuf;

use anyhow::Result;
use soak::engines::instrumentation;
use soak::engines::project::Project;
use soak::foundation::config::Config;

#[derive(clap::Args)]
pub struct Args {
    /// Check this shared library (a `dylib:` allocator) instead (repeatable).
    #[arg(long = "dylib")]
    dylibs: Vec<PathBuf>,
}

pub fn run(args: Args, project: Project, _config: Config) -> Result<bool> {
    instrumentation::check(&project, &args.dylibs)
}
