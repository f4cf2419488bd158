//! `allocsoak soak`: rotate slots in time slices until the duration ends
//! or SIGINT/SIGTERM, then list the groups it filed.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::Result;
use soak::engines::project::Project;
use soak::foundation::config::Config;
use soak::running::daemon;

#[derive(clap::Args)]
pub struct Args {
    /// How long: seconds, or a number with s, m, h or d (`8h`).
    #[arg(long, value_parser = parse_duration)]
    duration: Duration,
    /// The state dir: corpora, crashes, logs and the store.
    #[arg(long, default_value = "soak-state")]
    state: PathBuf,
    /// Slices run at once. Default: one per core.
    #[arg(long)]
    jobs: Option<usize>,
    #[command(flatten)]
    slots: super::common::SlotArgs,
    /// Seconds per slice. Default: the config's slice_minutes.
    #[arg(long)]
    slice_secs: Option<u64>,
    /// Seconds between progress prints. Default: 10 on a terminal, else 60.
    #[arg(long)]
    progress_secs: Option<u64>,
    /// Replace the config's `[drift]` cpu_share (0 runs no drift workers).
    #[arg(long)]
    drift_share: Option<f64>,
    /// Build what the slots run first, as `allocsoak build` would, but
    /// start fuzzing as soon as the first target's binary links and build
    /// the rest beside the slices on one core (`just soak`).
    #[arg(long)]
    build: bool,
}

pub fn run(args: Args, project: Project, mut config: Config) -> Result<bool> {
    args.slots.apply(&mut config);
    if let Some(share) = args.drift_share {
        config.drift.cpu_share = share;
    }
    let slots = config.slots()?;
    for why in config.left_out() {
        eprintln!("allocsoak: {why}");
    }
    if args.build {
        let names = slots.iter().map(|s| s.allocator.clone()).collect();
        let (names, builds) = super::build::builds(&project, names)?;
        super::build::print_runs(&project, &builds, &names)?;
    }
    let stop = super::common::stop_flag()?;
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
        once: false,
        runs: None,
        build: args.build,
    };
    let summary = daemon::run(project, options, stop)?;
    let (state, store) = super::common::open_state(&args.state)?;
    // A group merged into another since it was filed is not listed.
    let mut new_groups = Vec::new();
    for id in &summary.new_groups {
        new_groups.extend(store.group(id)?);
    }
    println!("soak: {} new crash groups", new_groups.len());
    for g in new_groups {
        println!("  {} [{}] {}", g.id, g.kind, g.title);
        println!(
            "    report: {}",
            state.crash_group(&g.id).join("REPORT.md").display()
        );
        println!("    Reproduce with: {}", g.repro);
    }
    Ok(true)
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
