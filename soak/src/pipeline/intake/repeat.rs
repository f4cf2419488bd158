//! A saved or replayed artifact of a group already filed: kept beside
//! the group's first input and counted there.

use std::path::Path;

use anyhow::Result;
use report::{Record, Signature};

use super::groups::{add_other_signature, add_variant, merge_bridged};
use super::{lock, move_file, refill, Filed, Source};
use crate::foundation::state::StateDir;
use crate::foundation::store::Store;

/// What an artifact of a known group is: the group `id`, whether it
/// `reproduced` (or was shown by a replay), the `record` of what it
/// showed, and the signature `sig` it signed with when one was made.
pub(super) struct Repeat<'a> {
    pub(super) id: &'a str,
    pub(super) reproduced: bool,
    pub(super) record: Option<&'a Record>,
    pub(super) sig: Option<&'a Signature>,
}

impl<'a> Repeat<'a> {
    /// A saved finding whose record alone names its group.
    pub(super) fn saved(id: &'a str, record: &'a Record) -> Repeat<'a> {
        Repeat {
            id,
            reproduced: true,
            record: Some(record),
            sig: None,
        }
    }

    /// A saved finding a batch replay showed again as `record`, signed
    /// `sig` ([`super::show_saved`]).
    pub(super) fn shown(id: &'a str, record: &'a Record, sig: &'a Signature) -> Repeat<'a> {
        Repeat {
            sig: Some(sig),
            ..Repeat::saved(id, record)
        }
    }
}

/// Files `artifact` into a known group ([`Repeat`]): kept in its
/// `inputs/`, counted (as a variant, when its record says how it was
/// reached, or its signature differs from the group's), a fixed group
/// marked regressed and a new one flaky when this one did not reproduce.
pub(super) fn file_repeat(
    state: &StateDir,
    store: &std::sync::Mutex<Store>,
    src: &Source,
    artifact: &Path,
    repeat: Repeat,
) -> Result<Filed> {
    let Repeat {
        id,
        reproduced,
        record,
        sig,
    } = repeat;
    let dest = state.crash_group(id).join("inputs");
    std::fs::create_dir_all(&dest)?;
    let name = format!(
        "{}-{}",
        src.slice_id
            .map_or_else(|| "x".to_string(), |s| s.to_string()),
        artifact
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned())
    );
    let kept = dest.join(name);
    move_file(artifact, &kept)?;
    let mut store = lock(store);
    // Merged into another since `group_of` named it (another intake
    // worker's filing): that one.
    let merged = store.merged_into(id)?;
    let id = merged.as_deref().unwrap_or(id);
    refill(state, &store, id)?;
    store.add_crash(
        id,
        src.slot_id,
        src.slice_id,
        &kept.to_string_lossy(),
        reproduced,
    )?;
    add_variant(&store, src, id, record, &kept.to_string_lossy())?;
    if let Some(sig) = sig {
        store.add_group_path(id, sig)?;
        add_other_signature(&store, src, id, sig, &kept.to_string_lossy())?;
        for from in merge_bridged(state, &mut store, id, sig)? {
            eprintln!("allocsoak: group {from} merged into {id}: one bug, its code reached from two entry points");
        }
    }
    super::met_again(state, &store, id, reproduced)?;
    Ok(Filed {
        group_id: id.to_string(),
        new: false,
    })
}
