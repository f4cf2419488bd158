//! `allocsoak repro`: replay a crash group or input files on the current
//! build, without a fuzz loop; an rss-drift group replays its culprits,
//! a Miri group its input under Miri.

use std::path::{Path, PathBuf};

use anyhow::Result;
use report::miri::Miri;
use shadow::Target;
use soak::engines::miri::{self, Outcome};
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
        if let Some(group) = group_of_its_own(&args.state, id)? {
            if group.slot.engine == "miri" {
                return miri_replay(&project, &group, config.miri.borrows);
            }
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

/// Replays a Miri group's input under Miri, under the config's aliasing
/// model: it reproduces when Miri stops at the group's signature again.
fn miri_replay(project: &Project, group: &groups::Group, borrows: miri::Borrows) -> Result<bool> {
    // Absolute: the replay runs in the fuzz package's folder.
    let input = std::path::absolute(group.dir.join("original"))?;
    let target: Target = group.target()?;
    let replay = miri::Replay {
        allocator: &group.slot.allocator,
        target,
        borrows,
    };
    let outcomes = miri::run(
        project,
        replay,
        &[input],
        &triage::budget::Budget::default(), // no end
    )?;
    let shown = match outcomes.into_iter().next() {
        Some((_, Outcome::Stopped { miri, log })) => {
            print!("{log}");
            match miri {
                Miri::Finding(sig) => Some(sig),
                Miri::Unsupported(head) => {
                    println!("miri: stopped where Miri cannot follow: {head}");
                    None
                }
            }
        }
        _ => None,
    };
    let reproduced = shown.as_ref().is_some_and(|s| group.row.shown_by(s));
    println!(
        "{} under Miri: {}",
        group.row.id,
        match (&shown, reproduced) {
            (_, true) => "reproduced".to_string(),
            (Some(s), false) => format!("stopped at another finding: {}", s.title()),
            (None, false) => "ran clean".to_string(),
        }
    );
    Ok(!reproduced)
}

/// The group `id` names in `state` if its replay is not the fuzz
/// binary's: an `rss-drift` group, or a Miri pass's.
fn group_of_its_own(state: &Path, id: &str) -> Result<Option<groups::Group>> {
    if Path::new(id).exists() || !state.join("store.sqlite").is_file() {
        return Ok(None);
    }
    let (state, store) = super::common::open_state(state)?;
    if store.merged_into(id)?.is_some() {
        // A code-path group: never a drift or Miri one.
        return Ok(None);
    }
    Ok(groups::Group::find(&state, &store, id)
        .ok()
        .filter(|g| g.row.kind == "rss-drift" || g.slot.engine == "miri"))
}
