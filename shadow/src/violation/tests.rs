//! The violation keys' and kinds' tests.

use super::*;

#[test]
fn keys_hold_the_site_and_drop_numbers_and_the_allocator() {
    let line = |op: &str, site: Site, v: Violation| {
        let r = Report {
            op_index: 7,
            op: op.into(),
            site,
            path: Vec::new(),
            violation: v,
            by: By::Allocator("zoo:x".into()),
        };
        let line = format!("thread 'x' panicked: {r}");
        // The key built from the parts is the key read from the line.
        assert_eq!(key_of(&line), Some(r.key()), "{line}");
        line
    };
    let misaligned = |ptr| Violation::Alignment {
        ptr,
        size: 41,
        align: 64,
    };
    let a = line(
        "alloc size=41 align=64",
        Site::new("alloc", 41, 64),
        misaligned(0x10),
    );
    let b = line(
        "worker-alloc worker=2 size=50 align=64",
        Site::new("alloc", 50, 64),
        misaligned(0x20),
    );
    let want = "alignment in alloc size 0..64 align 32..: block N (size N) is not aligned to N";
    assert_eq!(key_of(&a).as_deref(), Some(want));
    assert_eq!(
        key_of(&b).as_deref(),
        Some(want),
        "one bug through two targets"
    );
    let other_tier = line(
        "alloc size=41 align=64",
        Site::new("alloc", 400, 64),
        misaligned(0x10),
    );
    let other_api = line(
        "alloc size=41 align=64",
        Site::new("heap-alloc", 41, 64),
        misaligned(0x10),
    );
    let other_align = line(
        "alloc size=41 align=64",
        Site::new("alloc", 41, 8),
        misaligned(0x10),
    );
    for other in [other_tier, other_api, other_align] {
        assert_ne!(key_of(&other).as_deref(), Some(want), "{other}");
    }
    let panic = |location: &str| {
        line(
            "alloc size=3000 align=8",
            Site::new("alloc", 3000, 8),
            Violation::Panic {
                message: "index 12 out of range".into(),
                location: location.into(),
            },
        )
    };
    assert_eq!(
        key_of(&panic("src/zoo.rs:120")).as_deref(),
        Some("panic: allocator panicked: index N out of range @ src/zoo.rs:120")
    );
    assert_ne!(
        key_of(&panic("src/zoo.rs:120")),
        key_of(&panic("src/zoo.rs:130"))
    );
}

#[test]
fn a_report_keys_and_records_as_its_line_reads() {
    let report = |by: By| Report {
        op_index: 3,
        op: "alloc size=2500 align=8".into(),
        site: Site::new("alloc", 2500, 8),
        path: Vec::new(),
        violation: Violation::Panic {
            message: "index 43 out of range".into(),
            location: "src/x.rs:12".into(),
        },
        by,
    };
    for by in [
        By::Allocator("zoo:x".into()),
        By::Reference("mimalloc".into()),
        By::Versus {
            allocator: "zoo:x".into(),
            reference: "mimalloc".into(),
        },
    ] {
        let r = report(by);
        let line = r.to_string();
        assert_eq!(key_of(&line), Some(r.key()), "{line}");
        let record = r.record();
        assert_eq!(record.line, line);
        assert_eq!(record.kind, "panic");
        assert!(!record.sound);
        assert_eq!(
            report::Signature::from_record(&record),
            report::Signature::from_log(&line, "alloc_ops/zoo:x").unwrap(),
            "{line}"
        );
    }
    let reference = report(By::Reference("mimalloc".into()));
    assert!(reference.key().ends_with(" [reference allocator mimalloc]"));
    assert_eq!(reference.record().allocator, "mimalloc");
}

#[test]
fn sound_violations_are_the_ones_that_leave_blocks_in_place() {
    let m = Mismatch {
        offset: 0,
        expected: 1,
        found: 2,
    };
    assert!(Violation::Zeroed {
        ptr: 1,
        size: 1,
        mismatch: m
    }
    .leaves_heap_sound());
    assert!(Violation::Alignment {
        ptr: 1,
        size: 1,
        align: 2
    }
    .leaves_heap_sound());
    assert!(!Violation::Contents {
        ptr: 1,
        size: 1,
        mismatch: m,
        when: "x",
        by_call: true,
    }
    .leaves_heap_sound());
    assert!(!Violation::Overlap {
        ptr: 1,
        len: 1,
        other: 1,
        other_len: 1
    }
    .leaves_heap_sound());
    assert!(!Violation::Panic {
        message: "x".into(),
        location: "y".into()
    }
    .leaves_heap_sound());
}
