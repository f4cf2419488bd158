//! `allocsoak compare`: peers on the same work. Each workload seed (the
//! committed classic shapes, or inputs given) and each recorded trace
//! runs once under each allocator, each in a drift replay process of its
//! own (`soak::tools::trace::run`): time, calls per second, the most
//! memory it added, the median while it ran and its shape over the run
//! (one scale per work, so peers' lines compare), and each beside the
//! first allocator's. `--curves` writes every point to a CSV file.

use std::path::PathBuf;

use anyhow::Result;
use shadow::Target;
use soak::engines::project::Project;
use soak::foundation::config::Config;
use soak::tools::trace::{self, Replayed, Work};

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
    /// Also write each run's memory over time here, as CSV: work,
    /// allocator, point, at (its place in the run, 0 to 1), bytes added.
    #[arg(long)]
    curves: Option<PathBuf>,
}

/// Characters of the memory-over-time column.
const WIDTH: usize = 16;

pub fn run(args: Args, project: Project, _config: Config) -> Result<bool> {
    let allocators = match args.allocators.is_empty() {
        true => ["system", "mimalloc", "jemalloc"]
            .map(String::from)
            .to_vec(),
        false => args.allocators,
    };
    let workloads = match args.workloads.is_empty() {
        true => seeds(&project)?,
        false => args.workloads,
    };
    let work = workloads
        .into_iter()
        .map(Work::Workload)
        .chain(args.traces.into_iter().map(Work::Trace));
    let drift = trace::drift_binary(&project)?;
    let aw = allocators
        .iter()
        .map(String::len)
        .max()
        .unwrap_or(0)
        .max(14);
    println!(
        "{:<64} {:<aw$} {:>8} {:>12} {:>9} {:>10} {:>7} {:>7}  {:<WIDTH$}  result",
        "work",
        "allocator",
        "secs",
        "calls/s",
        "peak MiB",
        "steady MiB",
        "time×",
        "peak×",
        "over time"
    );
    let mut clean = true;
    let mut csv = String::from("work,allocator,point,at,bytes\n");
    for w in work {
        let name = work_name(&w)?;
        let name = name.strip_prefix("workload ").unwrap_or(&name);
        let runs = allocators
            .iter()
            .map(|a| trace::run(&drift, &w, a))
            .collect::<Result<Vec<_>>>()?;
        clean &= print_runs(name, aw, &runs);
        csv += &curves(name, &runs);
    }
    if let Some(path) = args.curves {
        soak::foundation::state::write_atomic(&path, csv.as_bytes())?;
        println!("curves: {}", path.display());
    }
    Ok(clean)
}

/// The committed workload seeds, sorted.
fn seeds(project: &Project) -> Result<Vec<PathBuf>> {
    let mut seeds: Vec<PathBuf> = std::fs::read_dir(project.seeds(Target::Workload))?
        .flatten()
        .map(|e| e.path())
        .collect();
    seeds.sort();
    Ok(seeds)
}

/// What a row names `work` by: a workload's first op (its shape), or the
/// trace's path.
fn work_name(work: &Work) -> Result<String> {
    Ok(match work {
        Work::Workload(path) => {
            let data = std::fs::read(path)?;
            let program =
                shadow::Program::from_input(Target::Workload, &data).map_err(anyhow::Error::msg)?;
            program
                .ops
                .first()
                .map_or("an empty workload".into(), |op| op.to_string())
        }
        Work::Trace(path) => format!("trace {}", path.display()),
    })
}

/// Prints a row per run of the work `name`, the allocator column `aw`
/// wide, each beside the first run's time and peak and drawn on the
/// work's one scale; whether every run was clean.
fn print_runs(name: &str, aw: usize, runs: &[Replayed]) -> bool {
    let (secs, peak) = (runs[0].secs, runs[0].peak);
    let most = runs
        .iter()
        .flat_map(|r| r.curve.bytes.iter().copied())
        .max();
    let mut clean = true;
    for r in runs {
        println!(
            "{:<64} {:<aw$} {:>8.2} {:>12.0} {:>9.1} {:>10.1} {:>7.2} {:>7.2}  {:<WIDTH$}  {}",
            name,
            r.allocator,
            r.secs,
            r.calls as f64 / r.secs.max(1e-9),
            r.peak as f64 / f64::from(1 << 20),
            r.steady as f64 / f64::from(1 << 20),
            r.secs / secs.max(1e-9),
            r.peak as f64 / (peak as f64).max(1.0),
            sparkline(&r.curve.bytes, most.unwrap_or(0), WIDTH),
            r.failed.as_deref().unwrap_or("clean")
        );
        clean &= r.failed.is_none();
    }
    clean
}

/// The `--curves` CSV lines of the work `name`'s runs: every point of
/// each, at its place in the run (0 to 1).
fn curves(name: &str, runs: &[Replayed]) -> String {
    let mut csv = String::new();
    for r in runs {
        let last = r.curve.bytes.len().saturating_sub(1).max(1);
        for (i, b) in r.curve.bytes.iter().enumerate() {
            let at = i as f64 / last as f64;
            csv += &format!("\"{name}\",{},{i},{at:.3},{b}\n", r.allocator);
        }
    }
    csv
}

/// `bytes` as `width` bars, each its points' most, on a scale whose top
/// is `most` (a work's most over all its allocators).
fn sparkline(bytes: &[u64], most: u64, width: usize) -> String {
    const BARS: [char; 8] = ['▁', '▂', '▃', '▄', '▅', '▆', '▇', '█'];
    if bytes.is_empty() {
        return "-".into();
    }
    (0..width.min(bytes.len()))
        .map(|i| {
            let part = &bytes[i * bytes.len() / width.min(bytes.len())
                ..(i + 1) * bytes.len() / width.min(bytes.len())];
            let top = part.iter().copied().max().unwrap_or(0);
            let level = u128::from(top) * 7 / u128::from(most.max(1));
            BARS[(level as usize).min(7)]
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::sparkline;

    #[test]
    fn a_sparkline_draws_a_runs_shape_on_its_works_scale() {
        let rising: Vec<u64> = (0..48).map(|i| i * 100).collect();
        assert_eq!(sparkline(&rising, 4700, 8), "▁▂▃▄▅▆▇█");
        assert_eq!(sparkline(&rising, 9400, 8), "▁▁▂▂▃▃▄▄");
        assert_eq!(sparkline(&[5, 5], 5, 16), "██");
        assert_eq!(sparkline(&[], 5, 16), "-");
        assert_eq!(sparkline(&[0, 0, 0], 0, 16), "▁▁▁");
    }
}
