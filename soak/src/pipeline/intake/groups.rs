//! Which group a signed artifact belongs to, and what a repeat adds to
//! its group (a variant, alternative titles).

use anyhow::Result;
use report::Signature;

use super::source::Source;
use crate::foundation::state::StateDir;
use crate::foundation::store::{self, Store};

/// The group a replay's signature files into: the group of that
/// signature, the oldest code-path group of the same bug (one path
/// containing the other: [`Signature::same_path`]), the one group one of
/// whose crashes came by such a path, the one group whose own functions
/// it ran ([`Signature::own_functions_of`]), or the oldest group of its
/// allocator with one of its alternative titles ([`Signature::alt`]);
/// `None` for a new bug. A group merged into another
/// ([`merge_bridged`]) answers for it.
pub(super) fn group_of(store: &Store, sig: &Signature) -> Result<Option<String>> {
    let id = sig.id();
    if store.group(&id)?.is_some() {
        return Ok(Some(id));
    }
    if let Some(into) = store.merged_into(&id)? {
        return Ok(Some(into));
    }
    if !sig.path {
        return store.group_by_alt_title(&sig.allocator, &sig.alt);
    }
    if let Some(g) = store
        .path_groups()?
        .into_iter()
        .find(|g| g.signature().is_some_and(|s| s.same_path(sig)))
    {
        return Ok(Some(g.id));
    }
    if let Some((into, _)) = store
        .merged_paths()?
        .into_iter()
        .find(|(_, s)| s.same_path(sig))
    {
        return Ok(Some(into));
    }
    // A path inside or around a filed crash's (a realloc whose own free
    // wrote into the block it returns, after a plain free was filed that
    // wrote into a live block), of one group only: around two groups'
    // crashes, it may have run both bugs.
    let mut groups: Vec<String> = store
        .group_paths()?
        .into_iter()
        .filter(|(_, s)| s.same_path(sig))
        .map(|(g, _)| g)
        .collect();
    groups.dedup();
    if groups.len() == 1 {
        return Ok(groups.pop());
    }
    if groups.len() > 1 {
        return Ok(None);
    }
    // Neither inside nor around: the group whose own functions it ran.
    let (ids, sigs): (Vec<String>, Vec<Signature>) = store
        .path_groups()?
        .into_iter()
        .filter_map(|g| Some((g.id.clone(), g.signature()?)))
        .unzip();
    Ok(sig.own_functions_of(&sigs).map(|i| ids[i].clone()))
}

/// Merges into group `into` every other code-path group whose path
/// contains the path `sig` filed into it with, as `into`'s does: `sig`
/// shows code both groups' calls ran, one bug reached from two entry
/// points, which were found first and filed apart (ClusterFuzz's grouper
/// merges groups as later crashes show them one). A path that contains
/// two groups' paths merges nothing: it may have run both bugs. Each
/// merged group's folder stays, its `group.toml` renamed `merged.toml` (a
/// restart does not refill it). Returns the groups merged.
pub(super) fn merge_bridged(
    state: &StateDir,
    store: &mut Store,
    into: &str,
    sig: &Signature,
) -> Result<Vec<String>> {
    let Some(group) = store.group(into)? else {
        return Ok(Vec::new());
    };
    if !sig.path || !group.signature().is_some_and(|g| g.contains_path(sig)) {
        return Ok(Vec::new());
    }
    let bridged: Vec<String> = store
        .path_groups()?
        .into_iter()
        .filter(|g| g.id != into && g.signature().is_some_and(|s| s.contains_path(sig)))
        .map(|g| g.id)
        .collect();
    for from in &bridged {
        store.merge_group(from, into)?;
        let dir = state.crash_group(from);
        if dir.join("group.toml").is_file() {
            std::fs::rename(dir.join("group.toml"), dir.join("merged.toml"))?;
        }
    }
    Ok(bridged)
}

/// The group a saved finding's record already belongs to: the group of
/// its signature, or the group its key is a variant of ([`group_of_key`]).
pub(super) fn group_of_record(store: &Store, record: &report::Record) -> Result<Option<String>> {
    let id = Signature::from_record(record).id();
    if store.group(&id)?.is_some() {
        return Ok(Some(id));
    }
    group_of_key(store, record)
}

/// The group a replay signed `sig` files into ([`group_of`]), else the
/// group its violation's key is a variant of ([`group_of_key`]).
pub(super) fn known_group(
    store: &Store,
    sig: &Signature,
    record: Option<&report::Record>,
) -> Result<Option<String>> {
    match (group_of(store, sig)?, record) {
        (None, Some(r)) => group_of_key(store, r),
        (known, _) => Ok(known),
    }
}

/// The group of the record's allocator that its key is a variant (or
/// the tolerance key) of.
fn group_of_key(store: &Store, record: &report::Record) -> Result<Option<String>> {
    Ok(store
        .groups_of_variant(&record.key)?
        .into_iter()
        .find(|g| {
            g.signature()
                .is_some_and(|s| s.allocator == record.allocator)
        })
        .map(|g| g.id))
}

/// Counts the way a violation (its record) reached group `id`: its key,
/// site and target, and `input` when it is the first.
pub(super) fn add_variant(
    store: &Store,
    src: &Source,
    id: &str,
    record: Option<&report::Record>,
    input: &str,
) -> Result<()> {
    let Some(r) = record else {
        return Ok(());
    };
    store.add_variant(&store::VariantRow {
        group_id: id.to_string(),
        key: r.key.clone(),
        site: r.site.clone(),
        target: src.target.name().to_string(),
        count: 1,
        first_input: input.to_string(),
    })
}

/// Keeps what a repeat of group `id` signed `sig` adds to it: its
/// alternative titles and, when it joined by one of those (its key is not
/// the group's), a variant keyed by what gets a harness past it, so that
/// the group's slices tolerate both symptoms of its bug.
pub(super) fn add_other_signature(
    store: &Store,
    src: &Source,
    id: &str,
    sig: &Signature,
    input: &str,
) -> Result<()> {
    store.add_alt_titles(id, &sig.alt)?;
    let Some(key) = sig.tolerance_key().filter(|_| sig.id() != id && !sig.path) else {
        return Ok(());
    };
    store.add_variant(&store::VariantRow {
        group_id: id.to_string(),
        key,
        site: sig.title(),
        target: src.target.name().to_string(),
        count: 1,
        first_input: input.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::foundation::store::GroupRow;

    /// An `impossible-success` signature of `zoo:a` whose call ran `frames`.
    fn path(frames: &[&str]) -> Signature {
        let key = format!(
            "impossible-success\nzoo:a\nsize N must fail\n{}",
            frames.join("\n")
        );
        Signature::from_key(&key, true).unwrap()
    }

    fn insert(store: &Store, sig: &Signature, first_seen: i64, count: i64) -> String {
        let slot = store.slot("alloc_ops", "zoo:a", "libfuzzer", 1.0).unwrap();
        let id = sig.id();
        store
            .insert_group(&GroupRow {
                id: id.clone(),
                signature: sig.key(),
                kind: sig.kind.clone(),
                title: sig.title(),
                tolerance_key: None,
                slot_id: slot.id,
                first_seen,
                last_seen: first_seen,
                count,
                status: "new".into(),
                minimized: None,
                repro: String::new(),
                path: true,
                alt_titles: Vec::new(),
            })
            .unwrap();
        id
    }

    #[test]
    fn a_path_inside_two_groups_paths_merges_them_and_one_around_both_does_not() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open_for_soak(&dir.path().join("state")).unwrap();
        let mut store = Store::open(&state.store()).unwrap();
        // One bug in alloc, found first through realloc and realloc_null.
        let realloc = path(&["alloc", "class_of", "is_shifted", "realloc"]);
        let realloc_null = path(&["alloc", "class_of", "realloc_null"]);
        let g = insert(&store, &realloc, 1, 2);
        let h = insert(&store, &realloc_null, 2, 3);
        std::fs::create_dir_all(state.crash_group(&h)).unwrap();
        std::fs::write(state.crash_group(&h).join("group.toml"), "").unwrap();
        // A path around both merges nothing: it may have run two bugs.
        let around = path(&["alloc", "class_of", "is_shifted", "realloc", "realloc_null"]);
        assert_eq!(group_of(&store, &around).unwrap(), Some(g.clone()));
        assert!(merge_bridged(&state, &mut store, &g, &around)
            .unwrap()
            .is_empty());
        // alloc's own path is inside both.
        let alloc = path(&["alloc", "class_of"]);
        assert_eq!(group_of(&store, &alloc).unwrap(), Some(g.clone()));
        assert_eq!(
            merge_bridged(&state, &mut store, &g, &alloc).unwrap(),
            vec![h.clone()]
        );
        let merged = store.group(&g).unwrap().unwrap();
        assert_eq!((merged.count, merged.first_seen), (5, 1));
        assert!(store.group(&h).unwrap().is_none());
        assert!(state.crash_group(&h).join("merged.toml").is_file());
        // The merged group's signature, and paths beside it, file into g.
        assert_eq!(group_of(&store, &realloc_null).unwrap(), Some(g.clone()));
        let beside = path(&["alloc", "class_of", "realloc_null", "track_owner"]);
        assert_eq!(group_of(&store, &beside).unwrap(), Some(g.clone()));
        // Another bug's path (another kind) is untouched.
        let other =
            Signature::from_key("usable-size\nzoo:a\nwrong\nalloc\nclass_of", true).unwrap();
        assert_eq!(group_of(&store, &other).unwrap(), None);
    }

    #[test]
    fn a_path_around_one_groups_crash_files_into_it_and_around_two_groups_crashes_not() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open_for_soak(&dir.path().join("state")).unwrap();
        let store = Store::open(&state.store()).unwrap();
        let sig = |kind: &str, frames: &[&str]| {
            let key = format!("{kind}\nzoo:a\nchanged\n{}", frames.join("\n"));
            Signature::from_key(&key, true).unwrap()
        };
        // A free-list push into a live block: filed from a zeroed realloc,
        // then met after a plain free (a path inside the group's).
        let zeroed = sig(
            "realloc-prefix",
            &["alloc", "free", "realloc", "realloc_zeroed"],
        );
        let g = insert(&store, &zeroed, 1, 1);
        store.add_group_path(&g, &zeroed).unwrap();
        let free = sig("contents", &["free"]);
        assert_eq!(group_of(&store, &free).unwrap(), Some(g.clone()));
        // A plain realloc's path is around neither the group's signature
        // nor any crash of it, until the free's crash is filed into it.
        let plain = sig("realloc-prefix", &["alloc", "free", "realloc_plain"]);
        assert_eq!(group_of(&store, &plain).unwrap(), None);
        store.add_group_path(&g, &free).unwrap();
        assert_eq!(group_of(&store, &plain).unwrap(), Some(g.clone()));
        // Around two groups' crashes: it may have run both bugs.
        let other = sig("contents", &["alloc", "grow", "split"]);
        let h = insert(&store, &other, 2, 1);
        store
            .add_group_path(&h, &sig("contents", &["split"]))
            .unwrap();
        let both = sig("contents", &["free", "realloc_plain", "split"]);
        assert_eq!(group_of(&store, &both).unwrap(), None);
    }

    /// Two realloc copies short in two functions, then a realloc of a
    /// block a tolerated alignment bug misaligned: its free of the old
    /// block takes another branch (no `is_stale_block`) and its new block
    /// comes by the misaligning code, so its path is neither inside nor
    /// around either group's. It runs one group's own function only.
    #[test]
    fn a_path_beside_a_group_files_into_the_one_whose_own_functions_it_ran() {
        let dir = tempfile::tempdir().unwrap();
        let state = StateDir::open_for_soak(&dir.path().join("state")).unwrap();
        let store = Store::open(&state.store()).unwrap();
        let common = ["alloc", "free", "is_stale_block", "realloc"];
        let with = |f: &str| path(&[&common[..], &[f]].concat());
        let short = insert(&store, &with("short_copy"), 1, 1);
        let tiny = insert(&store, &with("tiny_copy"), 2, 1);
        let beside = |f: &str| path(&["alloc", "free", "realloc", "shifted", f]);
        assert_eq!(
            group_of(&store, &beside("short_copy")).unwrap(),
            Some(short)
        );
        assert_eq!(group_of(&store, &beside("tiny_copy")).unwrap(), Some(tiny));
        // Running neither group's own code, or both groups', is a new bug.
        assert_eq!(group_of(&store, &beside("zeroed_copy")).unwrap(), None);
        let both = path(&["alloc", "realloc", "short_copy", "tiny_copy"]);
        assert_eq!(group_of(&store, &both).unwrap(), None);
    }
}
