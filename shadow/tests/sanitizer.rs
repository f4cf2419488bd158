//! A sanitizer report whose key is tolerated ends its program quietly at
//! the executor's next check; the key is the one triage files the report
//! under. (One test: the settings, and the tolerated keys, are put in
//! place once per process. The
//! abort of an untolerated report is proved by the zoo, whose ASan bugs
//! are still found with their kinds.)

use shadow::settings::Settings;
use shadow::tolerance::tolerate;

const REPORT: &str = "==9==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x7b at pc 0x55\n\
    WRITE of size 8 at 0x7b thread T0\n\
    \x20   #0 0x55 in shadow::pattern::fill_range /work/shadow/src/pattern.rs:60:9\n\
    \x20   #1 0x55 in <shadow::executor::Executor>::probe_usable /work/shadow/src/executor.rs:500:13\n\
    \x20   #2 0x55 in <shadow::executor::Executor>::step /work/shadow/src/executor.rs:200:9\n\
    SUMMARY: AddressSanitizer: heap-buffer-overflow /work/shadow/src/pattern.rs:60:9 in shadow::pattern::fill_range\n";

#[test]
fn a_tolerated_report_ends_its_program_quietly() {
    let key = report::Signature::from_log(REPORT, "alloc_ops/zoo:usable-oversize")
        .unwrap()
        .tolerance_key()
        .unwrap();
    assert_eq!(
        key,
        "asan: heap-buffer-overflow WRITE in shadow::executor::Executor::probe_usable"
    );
    let dir = std::env::temp_dir().join(format!("allocsoak-sanitizer-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(dir.join("tolerate"), format!("{key}\n")).unwrap();
    shadow::settings::install(Settings {
        tolerate: Some(dir.join("tolerate")),
        ..Settings::default()
    })
    .expect("nothing read the settings before");

    let mut went_on = false;
    tolerate(|| {
        shadow::sanitizer::on_report(REPORT);
        shadow::sanitizer::check();
        went_on = true;
    });
    assert!(!went_on, "the program went on past a tolerated report");

    // A report from a released program does not end the next one.
    shadow::sanitizer::on_report(REPORT);
    let program: shadow::Program = "target alloc_ops\nalloc size=8 align=8\n".parse().unwrap();
    let mut ran = false;
    tolerate(|| {
        shadow::run(&program, shadow::allocator::by_name("system").unwrap());
        ran = true;
    });
    assert!(ran);
    std::fs::remove_dir_all(dir).unwrap();
}
