//! `allocsoak bench`: exec/s of each target × allocator with the shadow
//! model on, and what the model costs on the same inputs, in one run.
//!
//! The exec/s is a checked fuzzing run's from the seeds. The cost is
//! measured on the inputs that run kept (and the seeds), each run once by
//! the same binary checked and with `ALLOCSOAK_MODE=bare` in turn: two
//! fuzzing runs keep different inputs (libFuzzer's schedule follows each
//! input's time), so their exec/s moved ±25 % apart from run to run and
//! said little about the model.

use anyhow::Result;
use shadow::Target;

use crate::engines::libfuzzer::{Outcome, Run};
use crate::engines::project::{Build, Project};

/// Allocators the bench measures by default.
pub const ALLOCATORS: [&str; 3] = ["system", "mimalloc", "jemalloc"];

/// Checked and bare replays of the same inputs, taken in turn; the
/// medians are kept.
const REPLAYS: usize = 3;

/// One measured pair.
pub struct Row {
    pub target: Target,
    pub allocator: String,
    /// A checked fuzzing run's exec/s.
    pub execs_per_s: f64,
    /// Inputs each replay ran: the ones the fuzzing run kept, and the seeds.
    pub inputs: u64,
    /// Median seconds of a checked replay of them, process start included.
    pub checked_s: f64,
    /// The same, bare.
    pub bare_s: f64,
}

impl Row {
    /// Checked speed over bare speed on the same inputs.
    pub fn ratio(&self) -> f64 {
        self.bare_s / self.checked_s.max(1e-9)
    }
}

/// Measures every pair: a fuzzing run of `secs` seconds, then the replays,
/// one process at a time so runs don't compete for cores. Prints each line
/// as it is measured.
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
            let dir = project.run_dir("bench", &[target.name(), allocator]);
            let _ = std::fs::remove_dir_all(&dir); // scratch from an earlier bench
            let corpus = dir.join("corpus");
            let run = |bare: bool, args: &[&str], out: &str| -> Result<Outcome> {
                let run = Run {
                    bare,
                    secs,
                    args: args.iter().map(|a| a.to_string()).collect(),
                    ..Run::new(project, target, allocator, corpus.clone(), dir.join(out))
                };
                let outcome = run.run()?;
                if let Some(kind) = &outcome.kind {
                    anyhow::bail!(
                        "bench run {target} {allocator} found `{kind}`; see {}",
                        outcome.log.display()
                    );
                }
                Ok(outcome)
            };
            let fuzzed = run(false, &[], "fuzz")?;
            let (mut checked, mut bare, mut inputs) = (Vec::new(), Vec::new(), 0);
            for _ in 0..REPLAYS {
                let replay = run(false, &["-runs=0"], "checked")?;
                inputs = replay.execs;
                checked.push(replay.secs);
                bare.push(run(true, &["-runs=0"], "bare")?.secs);
            }
            let row = Row {
                target,
                allocator: allocator.clone(),
                execs_per_s: fuzzed.execs_per_sec(),
                inputs,
                checked_s: median(checked),
                bare_s: median(bare),
            };
            println!(
                "bench {} {} execs_per_s={:.0} replay_inputs={} checked_s={:.2} bare_s={:.2} ratio={:.2}",
                row.target,
                row.allocator,
                row.execs_per_s,
                row.inputs,
                row.checked_s,
                row.bare_s,
                row.ratio()
            );
            rows.push(row);
        }
    }
    Ok(rows)
}

fn median(mut secs: Vec<f64>) -> f64 {
    secs.sort_by(f64::total_cmp);
    secs[secs.len() / 2]
}
