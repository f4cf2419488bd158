//! The `allocsoak` command line: parses, then dispatches to `cmd/`, a
//! file per subcommand.

mod cmd;

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Result;
use clap::{Parser, Subcommand};
use soak::engines::project::Project;
use soak::foundation::config::Config;

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

#[derive(Subcommand)]
enum Command {
    /// Build the fuzz targets (ASan + coverage, C allocators instrumented) for these allocators.
    Build(cmd::build::Args),
    /// A short fuzz pass over targets × allocators; prints every finding with its repro command.
    Fuzz(cmd::fuzz::Args),
    /// The CI gate: every slot one short slice through the soak's pipeline; exits 1 on a
    /// new finding (known groups from --known are got past), writes markdown and JUnit.
    Quick(cmd::quick::Args),
    /// Run every planted bug through its target and the correct allocators as controls.
    Zoo(cmd::zoo::Args),
    /// Measure exec/s with and without the shadow model, per target × allocator.
    Bench(cmd::bench::Args),
    /// Check that the bundled C allocators carry coverage instrumentation.
    Instrumentation(cmd::instrumentation::Args),
    /// What OSS-Fuzz's build.sh builds for the config: writes the glue of its declared
    /// allocators, prints the fuzz package, the limits and each fuzzer's binary and name.
    OssFuzz(cmd::oss_fuzz::Args),
    /// Soak: rotate slots in time slices until the duration ends or SIGINT/SIGTERM;
    /// grow corpora, file deduplicated, minimized crash groups under <state>/crashes/.
    Soak(cmd::soak::Args),
    /// Print a soak's progress from its state dir (while it runs, or after).
    Status(cmd::status::Args),
    /// Crash groups newest first, with kind, slot, count, first and last seen and status;
    /// `verify` re-runs them on the current build, `export` bundles one for upstream.
    Triage(cmd::triage::Args),
    /// Replay a crash group (by id) or input files on the current build, without a
    /// fuzz loop; exits 1 while it reproduces.
    Repro(cmd::repro::Args),
    /// The commit of a declared allocator's repository that made a crash group
    /// reproduce (or, with --fixed, stopped it), building the allocator at each revision.
    Bisect(cmd::bisect::Args),
    /// Which of each allocator's own code the state dir's corpora ran: runs them in a
    /// coverage build, writes llvm-cov's HTML and a summary to <state>/coverage/.
    Coverage(cmd::coverage::Args),
    /// Print every RSS drift series: readings, ops, RSS and retained memory now,
    /// the growth per 1,000 ops with its interval, and the verdict.
    Drift(cmd::drift::Args),
    /// Print the op program a fuzz input decodes to, one op per line.
    Print(cmd::print::Args),
    /// Peers on the same work: each workload seed and each trace once under each
    /// allocator: time, calls per second, the memory it added, beside the first's.
    Compare(cmd::compare::Args),
    /// Record a program's own allocations (`record -- CMD`), and replay them under
    /// allocators side by side with every block checked (`replay FILE`).
    Trace(cmd::trace::Args),
    /// Replay a Rust allocator's programs under Miri (provenance, aliasing,
    /// uninitialized reads native runs cannot see); exits 1 on a finding.
    Miri(cmd::miri::Args),
    /// Serve the soak's dashboard (read-only, loopback by default), or export it as files.
    Dash(cmd::dash::Args),
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

/// Ok(false) is exit 1: something was found, or still reproduces.
fn run(config_path: Option<PathBuf>, command: Command) -> Result<bool> {
    let project = Project::find()?;
    let config = Config::load(&config_path.unwrap_or_else(|| project.root().join("soak.toml")))?;
    let project = project.with_config(&config);
    match command {
        Command::Build(args) => cmd::build::run(args, project, config),
        Command::Fuzz(args) => cmd::fuzz::run(args, project, config),
        Command::Quick(args) => cmd::quick::run(args, project, config),
        Command::Zoo(args) => cmd::zoo::run(args, project, config),
        Command::Bench(args) => cmd::bench::run(args, project, config),
        Command::Instrumentation(args) => cmd::instrumentation::run(args, project, config),
        Command::OssFuzz(args) => cmd::oss_fuzz::run(args, project, config),
        Command::Soak(args) => cmd::soak::run(args, project, config),
        Command::Status(args) => cmd::status::run(args, project, config),
        Command::Triage(args) => cmd::triage::run(args, project, config),
        Command::Repro(args) => cmd::repro::run(args, project, config),
        Command::Bisect(args) => cmd::bisect::run(args, project, config),
        Command::Coverage(args) => cmd::coverage::run(args, project, config),
        Command::Drift(args) => cmd::drift::run(args, project, config),
        Command::Print(args) => cmd::print::run(args, project, config),
        Command::Trace(args) => cmd::trace::run(args, project, config),
        Command::Compare(args) => cmd::compare::run(args, project, config),
        Command::Miri(args) => cmd::miri::run(args, project, config),
        Command::Dash(args) => cmd::dash::run(args, project, config),
    }
}
