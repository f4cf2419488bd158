//! `allocsoak coverage`: which of each allocator's own code a soak's
//! corpora ran, as llvm-cov reports it.

use std::path::PathBuf;

use ::soak::coverage::{self, Request};
use ::soak::engines::project::Project;
use ::soak::foundation::config::Config;
use anyhow::Result;

use super::common::Pairs;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    pairs: Pairs,
    /// The state dir whose corpora run; the report goes to <state>/coverage/.
    #[arg(long, default_value = "soak-state")]
    state: PathBuf,
}

pub fn run(args: Args, project: Project, _config: Config) -> Result<bool> {
    let req = Request {
        state: &args.state,
        allocators: args.pairs.allocators,
        targets: args.pairs.targets,
    };
    let report = coverage::run(&project, &req)?;
    println!(
        "{:<24} {:>22} {:>22} {:>22} {:>8}",
        "allocator", "functions", "lines", "regions", "inputs"
    );
    for a in &report.allocators {
        let t = a.coverage.totals;
        println!(
            "{:<24} {:>22} {:>22} {:>22} {:>8}",
            a.allocator,
            t.functions.to_string(),
            t.lines.to_string(),
            t.regions.to_string(),
            a.inputs
        );
    }
    for a in &report.allocators {
        if a.failed > 0 {
            println!(
                "coverage: {}: {} of {} inputs failed in the coverage build; their coverage is not counted",
                a.allocator, a.failed, a.inputs
            );
        }
        let files = a.coverage.never_run.len();
        println!(
            "coverage: {}: {} functions never run, in {files} files; HTML {}",
            a.allocator,
            a.coverage.never_run_count(),
            a.html.display()
        );
    }
    for (allocator, why) in &report.skipped {
        println!("coverage: {allocator}: not covered: {why}");
    }
    println!(
        "coverage: the functions never run, by file: {}",
        report.dir.join("COVERAGE.md").display()
    );
    Ok(true)
}
