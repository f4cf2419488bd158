//! `allocsoak bench`: exec/s with and without the shadow model.

use anyhow::Result;
use shadow::Target;
use soak::engines::project::Project;
use soak::foundation::config::Config;
use soak::tools::bench;

#[derive(clap::Args)]
pub struct Args {
    /// Seconds per measurement.
    #[arg(long, default_value_t = 20)]
    secs: u64,
    /// Default allocators: system, mimalloc, jemalloc.
    #[command(flatten)]
    pairs: super::common::Pairs,
}

pub fn run(args: Args, project: Project, config: Config) -> Result<bool> {
    let rows = bench::run(
        &project,
        &super::common::or_all(args.pairs.targets, &Target::ALL),
        &super::common::allocators(
            &config,
            args.pairs.allocators,
            &bench::ALLOCATORS.map(String::from),
        )?,
        args.secs,
    )?;
    Ok(!rows.is_empty())
}
