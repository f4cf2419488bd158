//! Which group a signed artifact belongs to, and what a repeat adds to
//! its group (a variant, alternative titles).

use anyhow::Result;
use report::Signature;

use super::Source;
use crate::store::{self, Store};

/// The group a replay's signature files into: the group of that
/// signature, the oldest code-path group of the same bug (one path
/// containing the other: [`Signature::same_path`]), or the oldest group of
/// its allocator with one of its alternative titles ([`Signature::alt`]);
/// `None` for a new bug.
pub(super) fn group_of(store: &Store, sig: &Signature) -> Result<Option<String>> {
    let id = sig.id();
    if store.group(&id)?.is_some() {
        return Ok(Some(id));
    }
    if !sig.path {
        return store.group_by_alt_title(&sig.allocator, &sig.alt);
    }
    Ok(store
        .path_groups()?
        .into_iter()
        .find(|g| g.signature().is_some_and(|s| s.same_path(sig)))
        .map(|g| g.id))
}

/// The group a saved finding's record already belongs to: the group of
/// its signature, or the group its key is a variant of (for its
/// allocator).
pub(super) fn group_of_record(store: &Store, record: &report::Record) -> Result<Option<String>> {
    let id = Signature::from_record(record).id();
    if store.group(&id)?.is_some() {
        return Ok(Some(id));
    }
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
