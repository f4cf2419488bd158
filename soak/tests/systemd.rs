//! `systemd-analyze verify` passes the units in soak/systemd/ without a
//! warning about them. Without `systemd-analyze` the test fails: it cannot
//! check the units then, and `scripts/setup` installs it (apt `systemd`).

use std::path::Path;
use std::process::Command;

const SERVICE: &str = "allocsoak.service";
const TIMER: &str = "allocsoak-nightly.timer";
const INSTALLED: &str = "ExecStart=/usr/local/bin/allocsoak ";

#[test]
fn units_verify_cleanly() {
    if let Err(e) = Command::new("systemd-analyze").arg("--version").output() {
        panic!("systemd-analyze: {e}; run scripts/setup (or apt-get install systemd)");
    }
    let units = Path::new(env!("CARGO_MANIFEST_DIR")).join("systemd");
    let dir = tempfile::tempdir().unwrap();

    // verify checks that ExecStart's binary exists, and /usr/local/bin/allocsoak
    // is only there once installed: point it at the binary cargo built. The
    // rest is verified as written.
    let service = std::fs::read_to_string(units.join(SERVICE)).unwrap();
    assert_eq!(
        service.matches(INSTALLED).count(),
        1,
        "{SERVICE} should have one `{INSTALLED}…` line"
    );
    let built = env!("CARGO_BIN_EXE_allocsoak");
    assert!(
        !built.contains(char::is_whitespace),
        "{built}: ExecStart= would need quoting"
    );
    let service = service.replace(INSTALLED, &format!("ExecStart={built} "));
    std::fs::write(dir.path().join(SERVICE), service).unwrap();
    let timer = std::fs::read_to_string(units.join(TIMER)).unwrap();
    // verify accepts a Unit= that names no unit, so check it here.
    assert!(
        timer.lines().any(|l| l == format!("Unit={SERVICE}")),
        "{TIMER} should start {SERVICE}"
    );
    std::fs::write(dir.path().join(TIMER), timer).unwrap();

    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(dir.path().join(SERVICE))
        .arg(dir.path().join(TIMER))
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    // The host's own units may draw warnings too; only ours count.
    let ours: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains(SERVICE) || l.contains(TIMER))
        .collect();
    assert!(
        out.status.success() && ours.is_empty(),
        "systemd-analyze verify: {}\n{}",
        out.status,
        stderr
    );
}
