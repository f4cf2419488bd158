//! A `save` line of the tolerate file, while fuzzing (a findings folder
//! set): a violation that leaves memory in doubt and matches it ends its
//! program quietly, not the process, and the input that showed each new
//! key is saved with its record for intake to judge. (One test: the
//! settings are put in place once per process.)

use shadow::settings::{AllocatorChoice, Settings};
use shadow::Target;

#[test]
fn a_kind_saved_past_ends_its_program_and_is_saved_once_per_key() {
    let dir = tempfile::tempdir().unwrap();
    let findings = dir.path().join("findings");
    std::fs::write(dir.path().join("tolerate"), "save realloc-prefix in *\n").unwrap();
    shadow::settings::install(Settings {
        allocator: AllocatorChoice::named("zoo:short-realloc-copy"),
        tolerate: Some(dir.path().join("tolerate")),
        findings: Some(findings.clone()),
        text_inputs: true,
        ..Settings::default()
    })
    .expect("nothing read the settings before");
    zoo::register();
    let short_copy = |size: usize| {
        format!("target alloc_ops\nalloc size={size} align=8\nrealloc slot=0 to=double\n")
    };
    // Two size tiers, two keys, each shown twice: the process goes on
    // past every one (an unwinding panic would fail this test).
    for size in [300, 300, 5000, 5000] {
        shadow::harness::fuzz(Target::AllocOps, short_copy(size).as_bytes());
    }
    let mut saved: Vec<String> = std::fs::read_dir(&findings)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".json") && !n.starts_with("counts-"))
        .collect();
    saved.sort();
    assert_eq!(saved.len(), 2, "{saved:?}");
    for name in &saved {
        let text = std::fs::read_to_string(findings.join(name)).unwrap();
        let record = report::Record::from_json(&text).unwrap();
        assert!(record.kind == "realloc-prefix" && !record.sound, "{text}");
        assert!(findings.join(name.strip_suffix(".json").unwrap()).is_file());
    }
}
