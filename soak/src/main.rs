//! The `allocsoak` command line.

use std::path::PathBuf;
use std::process::ExitCode;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, Result};
use clap::{Parser, Subcommand};
use shadow::Target;
use soak::config::Config;
use soak::project::{Build, Project};
use soak::state::StateDir;
use soak::store::Store;
use soak::{bench, daemon, groups, instrumentation, pass, repro, status, zoo};

#[derive(Parser)]
#[command(
    name = "allocsoak",
    about = "Coverage-guided fuzzing and soak testing for memory allocators"
)]
struct Cli {
    /// The config: slots, limits and your own allocators (`[[allocator]]`).
    /// Default: soak.toml in the checkout.
    #[arg(long, global = true, env = "ALLOCSOAK_CONFIG")]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Command,
}

/// Which targets and allocators a command runs.
#[derive(clap::Args)]
struct Pairs {
    /// A target to run (repeatable). Default: all four.
    #[arg(long = "target")]
    targets: Vec<Target>,
    /// An allocator to run (repeatable).
    #[arg(long = "allocator")]
    allocators: Vec<String>,
}

#[derive(Subcommand)]
enum Command {
    /// Build the fuzz targets (ASan + coverage, C allocators instrumented) for these allocators.
    Build {
        /// Allocators to build for; the mimalloc flavors need builds of their own. Default: the default build.
        #[arg(long = "allocator")]
        allocators: Vec<String>,
    },
    /// A short fuzz pass over targets × allocators; prints every finding with its repro command.
    Fuzz {
        /// Seconds per (target, allocator).
        #[arg(long, default_value_t = 20)]
        secs: u64,
        /// Default allocators: every bundled one.
        #[command(flatten)]
        pairs: Pairs,
    },
    /// Run every planted bug through its target and the correct allocators as controls.
    Zoo {
        /// Seconds per case (a found bug ends its case early).
        #[arg(long, default_value_t = 60)]
        secs: u64,
        /// libFuzzer seed, for repeatable runs.
        #[arg(long, default_value_t = 1)]
        seed: u64,
        /// Cases run at once. Default: one per core.
        #[arg(long)]
        jobs: Option<usize>,
        /// Only these bugs (no controls). Default: every bug and every control.
        #[arg(long = "bug")]
        bugs: Vec<String>,
    },
    /// Measure exec/s with and without the shadow model, per target × allocator.
    Bench {
        /// Seconds per measurement.
        #[arg(long, default_value_t = 20)]
        secs: u64,
        /// Default allocators: system, mimalloc, jemalloc.
        #[command(flatten)]
        pairs: Pairs,
    },
    /// Check that the bundled C allocators carry coverage instrumentation.
    Instrumentation {
        /// Check this shared library (a `dylib:` allocator) instead (repeatable).
        #[arg(long = "dylib")]
        dylibs: Vec<PathBuf>,
    },
    /// Soak: rotate slots in time slices until the duration ends or SIGINT/SIGTERM;
    /// grow corpora, file deduplicated, minimized crash groups under <state>/crashes/.
    Soak(SoakArgs),
    /// Print a soak's progress from its state dir (while it runs, or after).
    Status {
        /// The state dir the soak runs with.
        #[arg(long, default_value = "soak-state")]
        state: PathBuf,
    },
    /// Crash groups newest first, with kind, slot, count, first and last seen and status;
    /// `verify` re-runs them on the current build, `export` bundles one for upstream.
    Triage {
        #[command(subcommand)]
        action: Option<TriageAction>,
        /// The state dir the soak ran with.
        #[arg(long, default_value = "soak-state", global = true)]
        state: PathBuf,
        /// Only this allocator's groups.
        #[arg(long)]
        allocator: Option<String>,
        /// Only this target's groups.
        #[arg(long)]
        target: Option<String>,
        /// Only groups of this kind (alignment, heap-use-after-free, ...).
        #[arg(long)]
        kind: Option<String>,
        /// Only groups with this status: new, known, fixed, flaky, regressed.
        #[arg(long)]
        status: Option<String>,
    },
    /// Replay a crash group (by id) or input files on the current build, without a
    /// fuzz loop; exits 1 while it reproduces.
    Repro {
        /// A group id (or a unique prefix), or input files, replayed in order in one process.
        #[arg(required = true)]
        what: Vec<String>,
        /// The state dir, for a group id.
        #[arg(long, default_value = "soak-state")]
        state: PathBuf,
        /// The target of an input file.
        #[arg(long)]
        target: Option<Target>,
        /// The allocator of an input file.
        #[arg(long, default_value = "system")]
        allocator: String,
        /// Also write the program as a standalone Rust #[test] to this file.
        #[arg(long)]
        emit_test: Option<PathBuf>,
        /// For an rss-drift group: ops to replay its culprits for (default: the
        /// config's `[drift]` narrow_ops; a slow leak needs millions).
        #[arg(long)]
        ops: Option<u64>,
    },
    /// Print every RSS drift series: readings, ops, RSS and retained memory now,
    /// the growth per 1,000 ops with its interval, and the verdict.
    Drift {
        /// The state dir the soak runs with.
        #[arg(long, default_value = "soak-state")]
        state: PathBuf,
    },
    /// Print the op program a fuzz input decodes to, one op per line.
    Print {
        target: Target,
        input: std::path::PathBuf,
    },
}

#[derive(Subcommand)]
enum TriageAction {
    /// Re-run every group's minimized input on the current build: marks each known
    /// (still reproducing), fixed, flaky, or regressed (fixed, and back).
    Verify,
    /// Write a self-contained bundle of one group for an upstream bug report.
    Export {
        /// The group id (or a unique prefix).
        id: String,
        /// Where the bundle folder goes.
        #[arg(long, default_value = ".")]
        out: PathBuf,
    },
}

#[derive(clap::Args)]
struct SoakArgs {
    /// How long: seconds, or a number with s, m, h or d (`8h`).
    #[arg(long, value_parser = parse_duration)]
    duration: Duration,
    /// The state dir: corpora, crashes, logs and the store.
    #[arg(long, default_value = "soak-state")]
    state: PathBuf,
    /// Slices run at once. Default: one per core.
    #[arg(long)]
    jobs: Option<usize>,
    /// Replace the config's targets (repeatable).
    #[arg(long = "target")]
    targets: Vec<String>,
    /// Replace the config's allocators (repeatable).
    #[arg(long = "allocator")]
    allocators: Vec<String>,
    /// Replace the config's engine.
    #[arg(long)]
    engine: Option<String>,
    /// Seconds per slice. Default: the config's slice_minutes.
    #[arg(long)]
    slice_secs: Option<u64>,
    /// Seconds between progress prints. Default: 10 on a terminal, else 60.
    #[arg(long)]
    progress_secs: Option<u64>,
    /// Replace the config's `[drift]` cpu_share (0 runs no drift workers).
    #[arg(long)]
    drift_share: Option<f64>,
}

/// `28800`, `90s`, `30m`, `8h`, `2d`.
fn parse_duration(text: &str) -> Result<Duration, String> {
    let bad = || {
        format!("bad duration `{text}`: give seconds (28800) or a number with s, m, h or d (8h)")
    };
    let (num, unit) = match text.find(|c: char| !c.is_ascii_digit()) {
        Some(i) => text.split_at(i),
        None => (text, "s"),
    };
    let n: u64 = num.parse().map_err(|_| bad())?;
    let secs = match unit {
        "s" => n,
        "m" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => return Err(bad()),
    };
    if secs == 0 {
        return Err(format!(
            "bad duration `{text}`: a soak needs at least one second"
        ));
    }
    Ok(Duration::from_secs(secs))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match run(cli.config, cli.command) {
        Ok(true) => ExitCode::SUCCESS,
        Ok(false) => ExitCode::FAILURE,
        Err(e) => {
            eprintln!("allocsoak: {e:#}");
            ExitCode::from(2)
        }
    }
}

fn or_all<T: Clone>(given: Vec<T>, all: &[T]) -> Vec<T> {
    if given.is_empty() {
        all.to_vec()
    } else {
        given
    }
}

/// Checks allocator names before any build or run starts.
fn allocators(config: &Config, given: Vec<String>, default: &[String]) -> Result<Vec<String>> {
    let names = or_all(given, default);
    for name in &names {
        config.check_allocator(name)?;
    }
    Ok(names)
}

fn run(config_path: Option<PathBuf>, command: Command) -> Result<bool> {
    let project = Project::find()?;
    let config = Config::load(&config_path.unwrap_or_else(|| project.root().join("soak.toml")))?;
    let project = project.with_config(&config);
    match command {
        Command::Build { allocators: names } => {
            let mut builds: Vec<Build> = allocators(&config, names, &["system".into()])?
                .iter()
                .map(|a| Build::for_allocator(a))
                .collect();
            builds.dedup();
            for build in builds {
                project.build(build)?;
            }
            project.build_drift()?;
            Ok(true)
        }
        Command::Fuzz {
            secs,
            pairs: Pairs {
                targets,
                allocators: names,
            },
        } => {
            let findings = pass::run(
                &project,
                &or_all(targets, &Target::ALL),
                &allocators(&config, names, &config.allocators())?,
                secs,
            )?;
            println!("fuzz: {findings} findings");
            Ok(findings == 0)
        }
        Command::Zoo {
            secs,
            seed,
            jobs,
            bugs,
        } => {
            let mut cases = zoo::Case::all();
            if !bugs.is_empty() {
                for b in &bugs {
                    b.parse::<shadow::allocator::zoo::Bug>()
                        .map_err(anyhow::Error::msg)?;
                }
                cases.retain(|c| c.bug.is_some_and(|b| bugs.iter().any(|n| n == b.name())));
            }
            let jobs =
                jobs.unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get()));
            zoo::run(&project, &cases, &zoo::Budget { secs, seed, jobs })
        }
        Command::Bench {
            secs,
            pairs: Pairs {
                targets,
                allocators: names,
            },
        } => {
            let rows = bench::run(
                &project,
                &or_all(targets, &Target::ALL),
                &allocators(&config, names, &bench::ALLOCATORS.map(String::from))?,
                secs,
            )?;
            Ok(!rows.is_empty())
        }
        Command::Soak(args) => soak(project, config, args),
        Command::Status { state } => {
            let state = StateDir::open_to_read(&state)?;
            let store = Store::open(&state.store())?;
            print!(
                "{}",
                status::render(&state, &store, None, &config.drift.trend())?
            );
            Ok(true)
        }
        Command::Triage {
            action,
            state,
            allocator,
            target,
            kind,
            status,
        } => {
            let state = StateDir::open_to_read(&state)?;
            let store = Store::open(&state.store())?;
            match action {
                None => {
                    let filter = groups::Filter {
                        allocator,
                        target,
                        kind,
                        status,
                    };
                    print!("{}", groups::list(&state, &store, &filter)?);
                }
                Some(TriageAction::Verify) => {
                    for v in groups::verify(&project, &state, &store, &config)? {
                        println!(
                            "verify {} {} -> {} ({} of 3 replays reproduced)",
                            v.id, v.before, v.after, v.reproduced
                        );
                    }
                }
                Some(TriageAction::Export { id, out }) => {
                    let bundle = groups::export(&project, &state, &store, &config, &id, &out)?;
                    println!("export: {}", bundle.display());
                }
            }
            Ok(true)
        }
        Command::Repro {
            what,
            state,
            target,
            allocator,
            emit_test,
            ops,
        } => {
            if let [id] = what.as_slice() {
                if let Some(group) = drift_group(&state, id)? {
                    let ops = ops.unwrap_or(config.drift.narrow_ops);
                    return Ok(!soak::rss::repro::replay(&project, &config, &group, ops)?);
                }
            }
            let case = repro::Case::find(&what, &state, target, &allocator, &config)?;
            let binary = groups::binary(&project, case.target, &case.allocator)?;
            let shown = repro::replay(&case, &binary, &config)?;
            print!("{}", shown.text);
            if let Some(path) = emit_test {
                repro::emit_test(&case, &path, &config)?;
                println!("emitted test: {}", path.display());
            }
            Ok(!shown.reproduced)
        }
        Command::Drift { state } => {
            let state = StateDir::open_to_read(&state)?;
            let store = Store::open(&state.store())?;
            print!(
                "{}",
                soak::rss::table::render(&store, &config.drift.trend())?
            );
            Ok(true)
        }
        Command::Print { target, input } => {
            let data = std::fs::read(&input)
                .with_context(|| format!("failed to read {}", input.display()))?;
            print!("{}", shadow::Program::decode(target, &data));
            Ok(true)
        }
        Command::Instrumentation { dylibs } => instrumentation::check(&project, &dylibs),
    }
}

/// The `rss-drift` group `id` names in `state`, if it names one.
fn drift_group(state: &std::path::Path, id: &str) -> Result<Option<groups::Group>> {
    if std::path::Path::new(id).exists() || !state.join("store.sqlite").is_file() {
        return Ok(None);
    }
    let state = StateDir::open_to_read(state)?;
    let store = Store::open(&state.store())?;
    Ok(groups::Group::find(&state, &store, id)
        .ok()
        .filter(|g| g.row.kind == "rss-drift"))
}

fn soak(project: Project, mut config: Config, args: SoakArgs) -> Result<bool> {
    if !args.targets.is_empty() {
        config.targets = args.targets;
        config.slots.clear();
    }
    if !args.allocators.is_empty() {
        config.allocators = Some(args.allocators);
        config.slots.clear();
    }
    if let Some(engine) = args.engine {
        config.engine = engine;
    }
    if let Some(share) = args.drift_share {
        config.drift.cpu_share = share;
    }
    let slots = config.slots()?;
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        // A second signal ends the process at once.
        signal_hook::flag::register_conditional_shutdown(signal, 1, Arc::clone(&stop))?;
        signal_hook::flag::register(signal, Arc::clone(&stop))?;
    }
    let tty = std::io::IsTerminal::is_terminal(&std::io::stdout());
    let options = daemon::Options {
        state: args.state.clone(),
        duration: args.duration,
        jobs: args
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        slots,
        config,
        slice_secs: args.slice_secs,
        progress_secs: args.progress_secs.unwrap_or(if tty { 10 } else { 60 }),
    };
    let summary = daemon::run(project, options, stop)?;
    let state = StateDir::open_to_read(&args.state)?;
    let store = Store::open(&state.store())?;
    println!("soak: {} new crash groups", summary.new_groups.len());
    for id in &summary.new_groups {
        if let Some(g) = store.group(id)? {
            println!("  {} [{}] {}", g.id, g.kind, g.title);
            println!(
                "    report: {}",
                state.crash_group(id).join("REPORT.md").display()
            );
            println!("    Reproduce with: {}", g.repro);
        }
    }
    Ok(true)
}
