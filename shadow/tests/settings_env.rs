//! The settings as a fuzz binary gets them: from its environment (the
//! `ALLOCSOAK_*` variables the soak, triage and a user's shell set), read
//! once per process; a bad value ends the process with status 2 and its
//! `allocsoak: …` line. Each case runs this test binary again, one
//! ignored test selected, with only the variables it gives set, so no test
//! changes this process's environment. (The parsing itself is
//! `Settings::from_vars`' unit tests.)

use std::process::{Command, Output};

use shadow::settings::{AllocatorChoice, Settings};
use shadow::Mode;

/// What the child tests print their settings after.
const PRINTED: &str = "allocsoak-test settings: ";

#[test]
#[ignore = "a child of the tests below, with the variables they set"]
fn child_prints_its_settings() {
    println!("{PRINTED}{:?}", shadow::settings::get());
}

#[test]
#[ignore = "a child of the tests below, with the variables they set"]
fn child_loads_the_harness() {
    shadow::harness::load();
    println!("{PRINTED}{:?}", shadow::settings::get());
}

/// Runs the ignored test `name` in a child with `vars` as its only
/// `ALLOCSOAK_*` and `MIMALLOC_*` variables.
fn child(name: &str, vars: &[(&str, &str)]) -> Output {
    let mut cmd = Command::new(std::env::current_exe().unwrap());
    cmd.args(["--ignored", "--exact", name, "--nocapture"]);
    for (var, _) in std::env::vars_os() {
        let var_name = var.to_string_lossy();
        if var_name.starts_with("ALLOCSOAK_") || var_name.starts_with("MIMALLOC_") {
            cmd.env_remove(var);
        }
    }
    cmd.envs(vars.iter().copied()).output().unwrap()
}

/// The settings the child printed.
fn printed(out: &Output) -> Option<String> {
    let stdout = String::from_utf8_lossy(&out.stdout);
    let line = stdout.lines().find_map(|l| l.strip_prefix(PRINTED))?;
    Some(line.to_string())
}

#[test]
fn the_environment_gives_the_settings() {
    let out = child(
        "child_prints_its_settings",
        &[
            ("ALLOCSOAK_ALLOCATOR", "jemalloc"),
            ("ALLOCSOAK_MODE", "bare"),
            ("ALLOCSOAK_TEXT_INPUTS", "1"),
            ("ALLOCSOAK_FINDINGS", "/nonexistent/findings"),
            ("ALLOCSOAK_RECORD", ""),
        ],
    );
    let expected = Settings {
        allocator: AllocatorChoice::named("jemalloc"),
        mode: Mode::Bare,
        text_inputs: true,
        findings: Some("/nonexistent/findings".into()),
        ..Settings::default()
    };
    assert!(out.status.success(), "{out:?}");
    assert_eq!(printed(&out), Some(format!("{expected:?}")), "{out:?}");

    let out = child("child_prints_its_settings", &[]);
    assert_eq!(
        printed(&out),
        Some(format!("{:?}", Settings::default())),
        "{out:?}"
    );
}

#[test]
fn a_bad_value_ends_the_process_with_its_line() {
    let cases = [
        (
            "ALLOCSOAK_MODE",
            "fast",
            "allocsoak: ALLOCSOAK_MODE: unknown mode `fast`; use `checked` or `bare`\n",
        ),
        (
            "ALLOCSOAK_TEXT_INPUTS",
            "yes",
            "allocsoak: ALLOCSOAK_TEXT_INPUTS: `yes` is not 0 or 1\n",
        ),
        (
            "ALLOCSOAK_SERIAL_RACES",
            "true",
            "allocsoak: ALLOCSOAK_SERIAL_RACES: `true` is not 0 or 1\n",
        ),
    ];
    for (var, value, line) in cases {
        let out = child("child_prints_its_settings", &[(var, value)]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{var}={value}: {out:?}");
        assert!(stderr.contains(line), "{var}={value}: {stderr}");
        assert_eq!(printed(&out), None, "{var}={value}: {out:?}");
    }
}

#[test]
fn a_bad_allocator_ends_the_process_as_the_harness_loads() {
    let out = child(
        "child_loads_the_harness",
        &[("ALLOCSOAK_ALLOCATOR", "nosuch")],
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{out:?}");
    assert!(
        stderr.contains("allocsoak: ALLOCSOAK_ALLOCATOR: unknown allocator `nosuch`"),
        "{stderr}"
    );
    let out = child(
        "child_loads_the_harness",
        &[("ALLOCSOAK_ALLOCATOR", "system")],
    );
    assert!(out.status.success(), "{out:?}");
}

#[test]
fn settings_read_are_not_replaced() {
    shadow::settings::get();
    assert!(shadow::settings::install(Settings::default()).is_err());
}

/// `mi_option_purge_delay` in mimalloc's option enum.
const PURGE_DELAY: std::ffi::c_int = 15;

extern "C" {
    /// mimalloc's own, linked through `shadow`'s libmimalloc-sys.
    fn mi_option_get(option: std::ffi::c_int) -> std::ffi::c_long;
}

#[test]
#[ignore = "a child of the test below, with the variables it sets"]
fn child_prints_mimallocs_purge_delay() {
    shadow::harness::load();
    // SAFETY: no pointer involved; `mi_option_get` range-checks the option.
    let delay = unsafe { mi_option_get(PURGE_DELAY) };
    println!("{PRINTED}purge_delay={delay}");
}

/// A fuzzing process's mimalloc purges when a program asks or the process
/// has grown, not on its 10-ms timer (a replay would otherwise take the
/// path the clock gave it): its delay is an hour, unless the user's
/// `MIMALLOC_PURGE_DELAY` says otherwise.
#[test]
fn a_fuzzing_process_purges_when_a_program_asks() {
    let vars = [("ALLOCSOAK_ALLOCATOR", "mimalloc")];
    let out = child("child_prints_mimallocs_purge_delay", &vars);
    assert_eq!(
        printed(&out).as_deref(),
        Some("purge_delay=3600000"),
        "{out:?}"
    );
    let mut cmd_vars = vars.to_vec();
    cmd_vars.push(("MIMALLOC_PURGE_DELAY", "25"));
    let out = child("child_prints_mimallocs_purge_delay", &cmd_vars);
    assert_eq!(printed(&out).as_deref(), Some("purge_delay=25"), "{out:?}");
}
