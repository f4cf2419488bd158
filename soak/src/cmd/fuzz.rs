//! `allocsoak fuzz`: a short pass over targets × allocators.

use std::path::PathBuf;

use anyhow::Result;
use shadow::Target;
use soak::engines::project::Project;
use soak::foundation::config::Config;
use soak::tools::pass;

#[derive(clap::Args)]
pub struct Args {
    /// Seconds per (target, allocator).
    #[arg(long, default_value_t = 20)]
    secs: u64,
    /// Pairs run at once. Default: one per core.
    #[arg(long)]
    jobs: Option<usize>,
    /// The corpus the pass grows, a folder per target. Default:
    /// target/allocsoak/fuzz/corpus in the checkout, which every pass shares.
    #[arg(long, env = "ALLOCSOAK_FUZZ_CORPUS")]
    corpus: Option<PathBuf>,
    /// Default allocators: every bundled one.
    #[command(flatten)]
    pairs: super::common::Pairs,
}

/// Succeeds when nothing was found.
pub fn run(args: Args, project: Project, config: Config) -> Result<bool> {
    let corpus = args
        .corpus
        .unwrap_or_else(|| project.work_dir("fuzz").join("corpus"));
    let pass = pass::Pass {
        corpus: &corpus,
        targets: &super::common::or_all(args.pairs.targets, &Target::ALL),
        allocators: &super::common::allocators(
            &config,
            args.pairs.allocators,
            &config.allocators(),
        )?,
        secs: args.secs,
        jobs: args
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
    };
    let findings = pass::run(&project, &config, &pass)?;
    println!("fuzz: {findings} findings");
    Ok(findings == 0)
}
