use super::*;
use crate::foundation::store::VariantRow;

#[test]
fn migrates_once_and_keeps_rows_across_opens() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.sqlite");
    let slot = Store::open(&path)
        .unwrap()
        .slot("alloc_ops", "system", "libfuzzer", 1.0)
        .unwrap();
    let store = Store::open(&path).unwrap();
    assert_eq!(store.slots().unwrap(), vec![slot.clone()]);
    let mode: String = store
        .conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(mode, "wal");
    // The weight on file wins over the configured one.
    store.set_weight(slot.id, 0.25).unwrap();
    assert_eq!(
        store
            .slot("alloc_ops", "system", "libfuzzer", 1.0)
            .unwrap()
            .weight,
        0.25
    );
}

#[test]
fn a_reference_allocators_bug_is_tolerated_in_every_slot_and_no_other_is() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("store.sqlite")).unwrap();
    let found_in = store
        .slot("diff_mimalloc", "zoo:x", "libfuzzer", 1.0)
        .unwrap();
    store
        .slot("diff_mimalloc", "system", "libfuzzer", 1.0)
        .unwrap();
    let group = |id: &str, key: &str| GroupRow {
        id: id.into(),
        signature: key.into(),
        kind: "overlap".into(),
        title: key.into(),
        tolerance_key: Some(key.into()),
        slot_id: found_in.id,
        first_seen: 0,
        last_seen: 0,
        count: 1,
        status: "new".into(),
        minimized: None,
        repro: String::new(),
        path: false,
        alt_titles: Vec::new(),
    };
    let own = "overlap in alloc size 0..64 align ..16: block N+N overlaps live block N+N";
    let reference = format!("{own} [reference allocator mimalloc]");
    store.insert_group(&group("a", own)).unwrap();
    store.insert_group(&group("b", &reference)).unwrap();
    let keys = |allocator| -> Vec<String> {
        store
            .tolerated_keys(allocator)
            .unwrap()
            .into_iter()
            .map(|(_, k)| k)
            .collect()
    };
    assert_eq!(keys("zoo:x"), vec![own.to_string(), reference.clone()]);
    assert_eq!(keys("system"), vec![reference]);
}

#[test]
fn a_groups_variants_are_counted_and_each_key_is_tolerated() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("store.sqlite")).unwrap();
    let slot = store.slot("alloc_ops", "port", "libfuzzer", 1.0).unwrap();
    let first = "alignment in alloc size 0..64 align 32..: block N (size N) is not aligned to N";
    let second =
        "alignment in alloc-zeroed size 4K..256K align 32..: block N (size N) is not aligned to N";
    store
        .insert_group(&GroupRow {
            id: "g".into(),
            signature:
                "alignment\nport\nalignment: block N (size N) is not aligned to N\nport::aligned"
                    .into(),
            kind: "alignment".into(),
            title: String::new(),
            tolerance_key: Some(first.into()),
            slot_id: slot.id,
            first_seen: 0,
            last_seen: 0,
            count: 1,
            status: "new".into(),
            minimized: None,
            repro: String::new(),
            path: true,
            alt_titles: Vec::new(),
        })
        .unwrap();
    let variant = |key: &str, site: &str, input: &str| VariantRow {
        group_id: "g".into(),
        key: key.into(),
        site: site.into(),
        target: "alloc_ops".into(),
        count: 1,
        first_input: input.into(),
    };
    store
        .add_variant(&variant(first, "alloc size 0..64 align 32..", "a"))
        .unwrap();
    store
        .add_variant(&variant(first, "alloc size 0..64 align 32..", "b"))
        .unwrap();
    store
        .add_variant(&variant(
            second,
            "alloc-zeroed size 4K..256K align 32..",
            "c",
        ))
        .unwrap();
    let rows = store.variants("g").unwrap();
    assert_eq!(rows.len(), 2);
    assert_eq!((rows[0].count, rows[0].first_input.as_str()), (2, "a"));
    let keys: Vec<String> = store
        .tolerated_keys("port")
        .unwrap()
        .into_iter()
        .map(|(_, k)| k)
        .collect();
    assert_eq!(keys, vec![first.to_string(), second.to_string()]);
    assert_eq!(store.groups_of_variant(second).unwrap()[0].id, "g");
    let g = store.path_groups().unwrap().remove(0);
    let sig = g.signature().unwrap();
    assert!(sig.path && sig.frames == ["port::aligned"], "{sig:?}");
}

#[test]
fn a_file_that_is_not_a_store_is_refused_and_kept() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("store.sqlite");
    std::fs::write(&path, b"this is not sqlite, it is someone's notes").unwrap();
    let err = Store::open(&path).err().unwrap().to_string();
    assert!(err.contains("move it aside"), "{err}");
    assert!(std::fs::read(&path)
        .unwrap()
        .starts_with(b"this is not sqlite"));
}

#[test]
fn a_group_is_found_by_an_alternative_title_of_its_own_allocator_only() {
    let dir = tempfile::tempdir().unwrap();
    let store = Store::open(&dir.path().join("store.sqlite")).unwrap();
    let group = |id: &str, allocator: &str, first_seen: i64| {
        let slot = store.slot("mt_ops", allocator, "libfuzzer", 1.0).unwrap();
        store
            .insert_group(&GroupRow {
                id: id.into(),
                signature: format!("heap-use-after-free\n{allocator}\n{id}"),
                kind: "heap-use-after-free".into(),
                title: id.into(),
                tolerance_key: None,
                slot_id: slot.id,
                first_seen,
                last_seen: first_seen,
                count: 1,
                status: "new".into(),
                minimized: None,
                repro: String::new(),
                path: false,
                alt_titles: Vec::new(),
            })
            .unwrap();
    };
    group("older", "zoo:a", 1);
    group("newer", "zoo:a", 2);
    group("other", "zoo:b", 0);
    let live = vec!["bad-free in wrong_free".to_string()];
    for id in ["newer", "older", "other"] {
        store.add_alt_titles(id, &live).unwrap();
    }
    store.add_alt_titles("older", &live).unwrap();
    let row = store.group("older").unwrap().unwrap();
    assert_eq!(row.alt_titles, live);
    assert_eq!(row.signature().unwrap().alt, live);
    let found =
        |allocator: &str, titles: &[String]| store.group_by_alt_title(allocator, titles).unwrap();
    assert_eq!(found("zoo:a", &live).as_deref(), Some("older"));
    assert_eq!(found("zoo:b", &live).as_deref(), Some("other"));
    assert_eq!(found("zoo:c", &live), None);
    assert_eq!(found("zoo:a", &["bad-access in f".to_string()]), None);
}

#[test]
fn utc_dates() {
    assert_eq!(utc(0), "1970-01-01 00:00:00 UTC");
    assert_eq!(utc(1_795_392_000), "2026-11-23 00:00:00 UTC");
    assert_eq!(utc(951_782_400 + 3661), "2000-02-29 01:01:01 UTC");
}
