//! `allocsoak bench`: exec/s of each target × allocator with the shadow
//! model on, and what the model costs on the same inputs, in one run.
//!
//! The exec/s is a checked fuzzing run's from the seeds, alone and beside
//! busy cores (every other core spinning, as a soak's other slices keep
//! them: `mt_ops`' race sections need more than one). The cost is
//! measured on the inputs that run kept (and the seeds), each run once by
//! the same binary checked and with `ALLOCSOAK_MODE=bare` in turn: two
//! fuzzing runs keep different inputs (libFuzzer's schedule follows each
//! input's time), so their exec/s moved ±25 % apart from run to run and
//! said little about the model.

use anyhow::Result;
use shadow::tally::Tally;
use shadow::Target;

use crate::engines::harness::HarnessFiles;
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
    /// The same from the same seeds, with every other core busy.
    pub busy_execs_per_s: f64,
    /// The race sections of each of those two runs (`mt_ops`', `heap_api`').
    pub races: Tally,
    pub busy_races: Tally,
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

    /// Exec/s beside busy cores over exec/s alone.
    pub fn busy_ratio(&self) -> f64 {
        self.busy_execs_per_s / self.execs_per_s.max(1e-9)
    }
}

/// Keeps every core but one busy (a spinning thread each, at least one)
/// until dropped.
struct BusyCores {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
}

impl BusyCores {
    fn start() -> BusyCores {
        use std::sync::atomic::{AtomicBool, Ordering};
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        let stop = std::sync::Arc::new(AtomicBool::new(false));
        let threads = (1..cores.max(2))
            .map(|_| {
                let stop = stop.clone();
                std::thread::spawn(move || {
                    while !stop.load(Ordering::Relaxed) {
                        std::hint::spin_loop();
                    }
                })
            })
            .collect();
        BusyCores { stop, threads }
    }
}

impl Drop for BusyCores {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Relaxed);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
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
            let row = measure(project, target, allocator, secs)?;
            print_row(&row);
            rows.push(row);
        }
    }
    Ok(rows)
}

/// Measures one pair: its fuzzing runs of `secs` seconds, alone and beside
/// busy cores, then the checked and bare replays of what they kept.
fn measure(project: &Project, target: Target, allocator: &str, secs: u64) -> Result<Row> {
    let dir = project.run_dir("bench", &[target.name(), allocator]);
    let _ = std::fs::remove_dir_all(&dir); // scratch from an earlier bench
    let run_in = |corpus: &str, bare: bool, args: &[&str], out: &str| -> Result<Outcome> {
        let run = Run {
            bare,
            secs,
            files: HarnessFiles {
                tally: Some(dir.join(out).join("tally")),
                ..Default::default()
            },
            args: args.iter().map(|a| a.to_string()).collect(),
            ..Run::new(project, target, allocator, dir.join(corpus), dir.join(out))
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
    let run = |bare: bool, args: &[&str], out: &str| run_in("corpus", bare, args, out);
    let fuzzed = run(false, &[], "fuzz")?;
    let busy = {
        let _busy = BusyCores::start();
        run_in("busy-corpus", false, &[], "busy")?
    };
    let (mut checked, mut bare, mut inputs) = (Vec::new(), Vec::new(), 0);
    for _ in 0..REPLAYS {
        let replay = run(false, &["-runs=0"], "checked")?;
        inputs = replay.execs;
        checked.push(replay.secs);
        bare.push(run(true, &["-runs=0"], "bare")?.secs);
    }
    Ok(Row {
        target,
        allocator: allocator.to_string(),
        execs_per_s: fuzzed.execs_per_sec(),
        busy_execs_per_s: busy.execs_per_sec(),
        races: Tally::read(&dir.join("fuzz/tally")),
        busy_races: Tally::read(&dir.join("busy/tally")),
        inputs,
        checked_s: median(checked),
        bare_s: median(bare),
    })
}

/// Prints a measured pair's line, and its race sections' line when both
/// of its runs had some.
fn print_row(row: &Row) {
    println!(
        "bench {} {} execs_per_s={:.0} busy_execs_per_s={:.0} busy_ratio={:.2} replay_inputs={} checked_s={:.2} bare_s={:.2} ratio={:.2}",
        row.target,
        row.allocator,
        row.execs_per_s,
        row.busy_execs_per_s,
        row.busy_ratio(),
        row.inputs,
        row.checked_s,
        row.bare_s,
        row.ratio()
    );
    // Race sections with two or more workers inside the allocator
    // at once, alone and beside busy cores; the most inside.
    if let (Some(alone), Some(busy)) = (row.races.share(), row.busy_races.share()) {
        println!(
            "bench {} {} race_share={alone:.2} most_inside={} busy_race_share={busy:.2} busy_most_inside={}",
            row.target, row.allocator, row.races.most_inside, row.busy_races.most_inside
        );
    }
}

fn median(mut secs: Vec<f64>) -> f64 {
    secs.sort_by(f64::total_cmp);
    secs[secs.len() / 2]
}
