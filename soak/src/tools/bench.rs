//! `allocsoak bench`: exec/s of each target × allocator with the shadow
//! model on, and of the same binary with it off (the cost floor), in one run.

use anyhow::Result;
use shadow::Target;

use crate::engines::libfuzzer::Run;
use crate::engines::project::{Build, Project};

/// Allocators the bench measures by default.
pub const ALLOCATORS: [&str; 3] = ["system", "mimalloc", "jemalloc"];

/// One measured pair.
pub struct Row {
    pub target: Target,
    pub allocator: String,
    pub execs_per_s: f64,
    pub bare_per_s: f64,
}

impl Row {
    pub fn ratio(&self) -> f64 {
        self.execs_per_s / self.bare_per_s.max(1e-9)
    }
}

/// Measures every pair for `secs` seconds per mode, one run at a time so
/// runs don't compete for cores. Prints each line as it is measured.
pub fn run(
    project: &Project,
    targets: &[Target],
    allocators: &[String],
    secs: u64,
) -> Result<Vec<Row>> {
    for allocator in allocators {
        project.build(Build::for_allocator(allocator))?;
    }
    let mut rows = Vec::new();
    for &target in targets {
        for allocator in allocators {
            let rate = |bare: bool| -> Result<f64> {
                let mode = if bare { "bare" } else { "checked" };
                let dir = project.run_dir("bench", &[target.name(), allocator, mode]);
                let _ = std::fs::remove_dir_all(&dir); // scratch from an earlier bench
                let run = Run {
                    bare,
                    secs,
                    ..Run::new(project, target, allocator, dir.join("corpus"), dir)
                };
                let outcome = run.run()?;
                if let Some(kind) = &outcome.kind {
                    anyhow::bail!(
                        "bench run {target} {allocator} found `{kind}`; see {}",
                        outcome.log.display()
                    );
                }
                Ok(outcome.execs_per_sec())
            };
            let row = Row {
                target,
                allocator: allocator.clone(),
                execs_per_s: rate(false)?,
                bare_per_s: rate(true)?,
            };
            println!(
                "bench {} {} execs_per_s={:.0} bare_per_s={:.0} ratio={:.2}",
                row.target,
                row.allocator,
                row.execs_per_s,
                row.bare_per_s,
                row.ratio()
            );
            rows.push(row);
        }
    }
    Ok(rows)
}
