//! `allocsoak zoo`: every planted bug through its target, and the
//! correct allocators as controls.

use anyhow::Result;
use soak::engines::project::Project;
use soak::foundation::config::Config;
use soak::tools::zoo;

#[derive(clap::Args)]
pub struct Args {
    /// Seconds each control must run clean.
    #[arg(long, default_value_t = 60)]
    secs: u64,
    /// The longest a planted bug may take to be found (a found bug ends
    /// its case early; most take seconds, a few a minute on a loaded
    /// machine).
    #[arg(long, default_value_t = 300)]
    bug_secs: u64,
    /// libFuzzer seed, for repeatable runs.
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// The longest each found bug's program is minimized (intake's 10 s by
    /// default; `just test` gives it 3).
    #[arg(long, default_value_t = 10)]
    minimize_secs: u64,
    /// Cases run at once. Default: one per core.
    #[arg(long)]
    jobs: Option<usize>,
    /// Only these bugs (no controls). Default: every bug and every control.
    #[arg(long = "bug")]
    bugs: Vec<String>,
    /// Not these bugs: for a gate with no minutes to spare, a bug whose
    /// programs are slow to run or slow to find (`just test` skips
    /// `large-reuse-dirty`, found in 2 to 5 minutes, and the workload's
    /// `crowded-reissue`, in 17 s to 3 minutes; BENCHMARKS.md).
    #[arg(long = "skip", value_name = "BUG")]
    skips: Vec<String>,
    /// Run each bug through a whole soak of this many seconds instead (its
    /// own state dir, one core), and count the crash groups it files: one
    /// per planted bug. Controls are not run.
    #[arg(long, value_name = "SECS")]
    soak: Option<u64>,
}

pub fn run(args: Args, project: Project, _config: Config) -> Result<bool> {
    let mut cases = zoo::Case::all();
    for b in args.bugs.iter().chain(&args.skips) {
        b.parse::<::zoo::Bug>().map_err(anyhow::Error::msg)?;
    }
    if !args.bugs.is_empty() {
        cases.retain(|c| {
            c.bug
                .is_some_and(|b| args.bugs.iter().any(|n| n == b.name()))
        });
    }
    cases.retain(|c| {
        let skipped = c.bug.filter(|b| args.skips.iter().any(|n| n == b.name()));
        if let Some(b) = skipped {
            println!("zoo {} skipped (--skip)", b.name());
        }
        skipped.is_none()
    });
    let jobs = args
        .jobs
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
    if let Some(secs) = args.soak {
        return zoo::soak_each(&project, &cases, secs, jobs);
    }
    let budget = zoo::Budget {
        secs: args.secs,
        bug_secs: args.bug_secs,
        seed: args.seed,
        jobs,
        minimize_secs: args.minimize_secs,
    };
    zoo::run(&project, &cases, &budget)
}
