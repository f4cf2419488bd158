//! `allocsoak repro`: replay a crash group or input files on the current
//! build, without a fuzz loop; an rss-drift group replays its culprits.

use std::path::{Path, PathBuf};

use anyhow::Result;
use shadow::Target;
use soak::engines::project::Project;
use soak::foundation::config::Config;
use soak::pipeline::{groups, repro};

#[derive(clap::Args)]
pub struct Args {
    /// A group id (or a unique prefix), or input files (libFuzzer's or honggfuzz's), replayed in order in one process.
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
    /// config's `[drift]` narrow_ops, in calls for a `workload` or trace
    /// series; a slow leak needs millions).
    #[arg(long)]
    ops: Option<u64>,
}

/// Fails (exit 1) while it reproduces.
pub fn run(args: Args, project: Project, config: Config) -> Result<bool> {
    if let [id] = args.what.as_slice() {
        if let Some(group) = drift_group(&args.state, id)? {
            let ops = args
                .ops
                .unwrap_or_else(|| config.drift.replay_ops(&group.slot.target));
            return Ok(!soak::rss::repro::replay(&project, &config, &group, ops)?);
        }
    }
    let case = repro::Case::find(
        &args.what,
        &args.state,
        args.target,
        &args.allocator,
        &config,
    )?;
    let binary = groups::binary(&project, case.target, &case.allocator)?;
    let shown = repro::replay(&case, &binary, &config)?;
    print!("{}", shown.text);
    if let Some(path) = args.emit_test {
        repro::emit_test(&case, &path, &config)?;
        println!("emitted test: {}", path.display());
    }
    Ok(!shown.reproduced)
}

/// The `rss-drift` group `id` names in `state`, if it names one.
fn drift_group(state: &Path, id: &str) -> Result<Option<groups::Group>> {
    if Path::new(id).exists() || !state.join("store.sqlite").is_file() {
        return Ok(None);
    }
    let (state, store) = super::common::open_state(state)?;
    if store.merged_into(id)?.is_some() {
        // A code-path group: never a drift one.
        return Ok(None);
    }
    Ok(groups::Group::find(&state, &store, id)
        .ok()
        .filter(|g| g.row.kind == "rss-drift"))
}
