//! Known groups verified against the current build, when a soak boots and
//! by `allocsoak triage verify`: every filed group replayed and marked by
//! what its replays showed; an `rss-drift` group's culprits are measured
//! again instead; a Miri group is left to the soak's Miri passes (only
//! Miri shows it: `running::miri`). It stands above the pipeline and the RSS drift room,
//! whose groups it verifies alike.

use std::path::{Path, PathBuf};

use anyhow::Result;

use crate::engines::project::Project;
use crate::foundation::config::Config;
use crate::foundation::state::StateDir;
use crate::foundation::store::Store;
use crate::pipeline::groups::{self, Group, TRIES};
use crate::pipeline::page;
use crate::rss;

/// One group's verdict.
pub struct Verdict {
    pub id: String,
    pub before: String,
    pub after: String,
    pub reproduced: usize,
}

/// Replays every group's input [`TRIES`] times on the current build and
/// marks it: `known` when each replay reproduces the group's signature,
/// `fixed` when none does, `flaky` in between; a `fixed` group that
/// reproduces again is `regressed`.
pub fn verify(
    project: &Project,
    state: &StateDir,
    store: &Store,
    config: &Config,
) -> Result<Vec<Verdict>> {
    let mut verdicts = Vec::new();
    for row in store.groups()? {
        let g = Group::load(state, store, row)?;
        let target = g.target()?;
        if g.row.kind == "rss-drift" {
            // One measured replay of its culprits (they run for a while).
            let drifts = rss::repro::drifts(project, config, &g)?;
            let reproduced = if drifts { TRIES } else { 0 };
            verdicts.push(mark(state, store, &g, reproduced)?);
            continue;
        }
        if g.slot.engine == "miri" {
            // What Miri saw no native replay shows: the next Miri pass
            // replays it (`running::miri`).
            continue;
        }
        let binary = match groups::binary(project, target, &g.slot.allocator) {
            Ok(b) => b,
            Err(e) => {
                eprintln!("verify: skipped {}: {e}", g.row.id);
                continue;
            }
        };
        let tolerate = g.tolerate();
        let replayer = groups::replayer(&binary, &g, tolerate.as_deref(), config);
        let slot = format!("{}/{}", g.slot.target, g.slot.allocator);
        let inputs = g.inputs()?;
        let inputs: Vec<&Path> = inputs.iter().map(PathBuf::as_path).collect();
        let mut reproduced = 0;
        for _ in 0..TRIES {
            let replay = replayer.replay(&inputs, true)?;
            if replay.signature(&slot).is_some_and(|s| g.row.shown_by(&s)) {
                reproduced += 1;
            }
        }
        verdicts.push(mark(state, store, &g, reproduced)?);
    }
    Ok(verdicts)
}

/// Marks a group by how many of [`TRIES`] replays reproduced it.
fn mark(state: &StateDir, store: &Store, g: &Group, reproduced: usize) -> Result<Verdict> {
    let before = g.row.status.clone();
    let after = match (reproduced, before.as_str()) {
        (0, _) => "fixed",
        (n, "fixed" | "regressed") if n > 0 => "regressed",
        (n, _) if n == TRIES => "known",
        _ => "flaky",
    };
    store.set_status(&g.row.id, after)?;
    if let Some(row) = store.group(&g.row.id)? {
        page::write_report(state, store, &row)?;
    }
    Ok(Verdict {
        id: g.row.id.clone(),
        before,
        after: after.to_string(),
        reproduced,
    })
}
