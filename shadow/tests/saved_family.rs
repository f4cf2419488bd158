//! While fuzzing (a findings folder set), a process saves one finding per
//! family of a sound violation (its key without the size tiers): the
//! first key met; the family's other keys are counted, and saved by the
//! processes after it. (One test: the settings are put in place once per
//! process.)

use shadow::settings::{AllocatorChoice, Settings};
use shadow::Target;

#[test]
fn a_process_saves_one_key_per_family_of_a_sound_violation() {
    let dir = tempfile::tempdir().unwrap();
    let findings = dir.path().join("findings");
    shadow::settings::install(Settings {
        allocator: AllocatorChoice::named("zoo:align-ignored"),
        findings: Some(findings.clone()),
        text_inputs: true,
        ..Settings::default()
    })
    .expect("nothing read the settings before");
    zoo::register();
    // Every block aligned to 32 or more comes back 16 bytes off: two size
    // tiers of `alloc` (one family), and a zeroed alloc (another).
    for op in [
        "alloc size=100 align=64",
        "alloc size=5000 align=64",
        "alloc size=100 align=64 zeroed",
    ] {
        let program = format!("target alloc_ops\n{op}\n");
        shadow::harness::fuzz(Target::AllocOps, program.as_bytes());
    }
    let records: Vec<report::Record> = std::fs::read_dir(&findings)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            let name = p.file_name().unwrap().to_string_lossy();
            name.ends_with(".json") && !name.starts_with("counts-")
        })
        .map(|p| report::Record::from_json(&std::fs::read_to_string(p).unwrap()).unwrap())
        .collect();
    let mut families: Vec<&str> = records.iter().map(|r| r.family.as_str()).collect();
    families.sort();
    assert_eq!(families.len(), 2, "{records:#?}");
    assert!(
        families[0].starts_with("alignment in alloc-zeroed:")
            && families[1].starts_with("alignment in alloc:"),
        "{families:?}"
    );
    // Every key was counted, the unsaved one too.
    let counts: std::collections::HashMap<String, u64> = std::fs::read_dir(&findings)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| {
            p.file_name()
                .unwrap()
                .to_string_lossy()
                .starts_with("counts-")
        })
        .flat_map(|p| {
            serde_json::from_str::<std::collections::HashMap<String, u64>>(
                &std::fs::read_to_string(p).unwrap(),
            )
            .unwrap()
        })
        .collect();
    assert_eq!(counts.len(), 3, "{counts:?}");
}
