//! `allocsoak compare`: peers on the same work. Each workload seed (the
//! committed classic shapes, or inputs given) and each recorded trace
//! runs once under each allocator, each in a drift replay process of its
//! own (`soak::tools::trace::run`): time, calls per second, the most
//! memory it added and the median while it ran, and each beside the
//! first allocator's.

use std::path::PathBuf;

use anyhow::Result;
use shadow::Target;
use soak::engines::project::Project;
use soak::foundation::config::Config;
use soak::tools::trace::{self, Work};

#[derive(clap::Args)]
pub struct Args {
    /// Allocators, the one to compare against first. Default: system,
    /// mimalloc, jemalloc.
    #[arg(long = "allocator")]
    allocators: Vec<String>,
    /// `workload` inputs to run. Default: corpus/workload/seeds.
    #[arg(long = "workload")]
    workloads: Vec<PathBuf>,
    /// Recorded traces (`allocsoak trace record`) to replay too.
    #[arg(long = "trace")]
    traces: Vec<PathBuf>,
}

pub fn run(args: Args, project: Project, _config: Config) -> Result<bool> {
    let allocators = match args.allocators.is_empty() {
        true => ["system", "mimalloc", "jemalloc"]
            .map(String::from)
            .to_vec(),
        false => args.allocators,
    };
    let workloads = match args.workloads.is_empty() {
        true => {
            let mut seeds: Vec<PathBuf> = std::fs::read_dir(project.seeds(Target::Workload))?
                .flatten()
                .map(|e| e.path())
                .collect();
            seeds.sort();
            seeds
        }
        false => args.workloads,
    };
    let work = workloads
        .into_iter()
        .map(Work::Workload)
        .chain(args.traces.into_iter().map(Work::Trace));
    let drift = trace::drift_binary(&project)?;
    println!(
        "{:<64} {:<14} {:>8} {:>12} {:>9} {:>10} {:>7} {:>7}  result",
        "work", "allocator", "secs", "calls/s", "peak MiB", "steady MiB", "time×", "peak×"
    );
    let mut clean = true;
    for w in work {
        let name = match &w {
            Work::Workload(path) => {
                let data = std::fs::read(path)?;
                let program = shadow::Program::from_input(Target::Workload, &data)
                    .map_err(anyhow::Error::msg)?;
                program
                    .ops
                    .first()
                    .map_or("an empty workload".into(), |op| op.to_string())
            }
            Work::Trace(path) => format!("trace {}", path.display()),
        };
        let mut first: Option<(f64, u64)> = None;
        for a in &allocators {
            let r = trace::run(&drift, &w, a)?;
            let (secs, peak) = *first.get_or_insert((r.secs, r.peak));
            println!(
                "{:<64} {:<14} {:>8.2} {:>12.0} {:>9.1} {:>10.1} {:>7.2} {:>7.2}  {}",
                name.strip_prefix("workload ").unwrap_or(&name),
                r.allocator,
                r.secs,
                r.calls as f64 / r.secs.max(1e-9),
                r.peak as f64 / f64::from(1 << 20),
                r.steady as f64 / f64::from(1 << 20),
                r.secs / secs.max(1e-9),
                r.peak as f64 / (peak as f64).max(1.0),
                r.failed.as_deref().unwrap_or("clean")
            );
            clean &= r.failed.is_none();
        }
    }
    Ok(clean)
}
