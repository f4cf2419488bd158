//! Crash inputs libFuzzer died of without writing them, taken from the
//! slice's input history: a process that died before libFuzzer's handler
//! ran ([`lost_input`]), or a `-fork` child's deadly signal
//! ([`lost_in_children`]). Each is written into `artifacts/`, to be filed
//! as any other.

use std::path::{Path, PathBuf};

use anyhow::Result;

/// The input a libFuzzer process died of when it wrote none: its log
/// reports a finding, but `artifacts/` is empty (the process died while
/// it loaded the corpus, of two threads' reports at once, or of a signal
/// libFuzzer's handler never saw). The input history's newest entry is
/// the input that was running; it is written into `artifacts/` as
/// `crash-history-<hash>`, to be filed as any other. None without a
/// report or a history, and then the slice's log, kept in `logs/`, is all
/// there is.
pub(super) fn lost_input(
    scratch: &Path,
    log: &str,
    history: Option<&Path>,
) -> Result<Option<PathBuf>> {
    let Some(kind) = report::kind(log) else {
        return Ok(None);
    };
    let why = match history.map(shadow::history::read) {
        None => "has no input history".to_string(),
        Some(Err(e)) => format!("its input history is unreadable ({e})"),
        Some(Ok(mut inputs)) => match inputs.pop() {
            Some(input) => return save_lost(scratch, &input).map(Some),
            None => "its input history is empty".to_string(),
        },
    };
    eprintln!(
        "allocsoak: a slice died of `{kind}` without writing its input, and {why}; its log is kept in logs/"
    );
    Ok(None)
}

/// The inputs libFuzzer's `-fork` children died of without writing them.
/// A child writes every finding but a deadly signal's, which ASan reports
/// (`==<pid>==ERROR: AddressSanitizer: SEGV ...`, a line the parent copies
/// into its log) and ends the child on; that child's ring,
/// `history-<pid>`, has the input last.
pub(super) fn lost_in_children(scratch: &Path, log: &str) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for (pid, kind) in log.lines().filter_map(deadly_report) {
        let ring = scratch.join(format!("history-{pid}"));
        match shadow::history::read(&ring).map(|mut inputs| inputs.pop()) {
            Ok(Some(input)) => found.push(save_lost(scratch, &input)?),
            Ok(None) => eprintln!("allocsoak: a fork child died of `{kind}` with an empty input history"),
            Err(e) => eprintln!("allocsoak: a fork child died of `{kind}`, and its input history is unreadable ({e})"),
        }
    }
    found.sort();
    found.dedup();
    Ok(found)
}

/// The process id and kind of an ASan report of a deadly signal
/// ([`report::DEADLY`]): `==4242==ERROR: AddressSanitizer: SEGV on ...`.
fn deadly_report(line: &str) -> Option<(u32, &str)> {
    let (pid, rest) = line
        .strip_prefix("==")?
        .split_once("==ERROR: AddressSanitizer: ")?;
    let kind = rest.split_whitespace().next()?;
    report::DEADLY
        .contains(&kind)
        .then_some((pid.parse().ok()?, kind))
}

/// Writes a lost input into `artifacts/` under a stable name
/// (`crash-history-<hash>`), so a retried finish finds the same file.
fn save_lost(scratch: &Path, input: &[u8]) -> Result<PathBuf> {
    let hash = crate::foundation::state::stable_hash(input);
    let path = scratch.join(format!("artifacts/crash-history-{hash:016x}"));
    crate::foundation::state::write_atomic(&path, input)?;
    Ok(path)
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_lost_input_is_the_history_s_newest_and_nothing_without_one() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("artifacts")).unwrap();
        let log = "==1==ERROR: AddressSanitizer: SEGV on unknown address 0x000000000018\n";
        let ring = dir.path().join("history");
        let mut history = shadow::history::Ring::create(&ring, 1024).unwrap();
        history.push(b"older");
        history.push(b"newest");
        drop(history);
        let filed = super::lost_input(dir.path(), log, Some(&ring)).unwrap();
        let filed = filed.expect("an input");
        assert_eq!(std::fs::read(&filed).unwrap(), b"newest");
        assert!(filed.starts_with(dir.path().join("artifacts")));
        // No history, an unreadable one, or no report: nothing.
        assert_eq!(super::lost_input(dir.path(), log, None).unwrap(), None);
        std::fs::write(&ring, b"not a ring").unwrap();
        assert_eq!(
            super::lost_input(dir.path(), log, Some(&ring)).unwrap(),
            None
        );
        assert_eq!(
            super::lost_input(dir.path(), "clean\n", Some(&ring)).unwrap(),
            None
        );
    }

    #[test]
    fn a_fork_child_s_deadly_signal_is_taken_from_its_own_history() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir(dir.path().join("artifacts")).unwrap();
        for (pid, input) in [(41, &b"segv"[..]), (42, b"violation")] {
            let ring = dir.path().join(format!("history-{pid}"));
            let mut history = shadow::history::Ring::create(&ring, 1024).unwrap();
            history.push(b"before");
            history.push(input);
        }
        // The parent's log: a child's SEGV (no input written), another
        // child's panic (libFuzzer wrote that one), and the same SEGV again.
        let log =
            "#1000: cov: 10 ft: 20 corp: 3 exec/s: 500 oom/timeout/crash: 0/0/0 time: 2s job: 1\n\
                   ==41==ERROR: AddressSanitizer: SEGV on unknown address 0x000000000018\n\
                   ==42== ERROR: libFuzzer: deadly signal\n\
                   ==41==ERROR: AddressSanitizer: SEGV on unknown address 0x000000000018\n\
                   ==43==ERROR: AddressSanitizer: heap-use-after-free on address 0x6020\n";
        let lost = super::lost_in_children(dir.path(), log).unwrap();
        assert_eq!(lost.len(), 1, "{lost:?}");
        assert_eq!(std::fs::read(&lost[0]).unwrap(), b"segv");
        assert_eq!(
            super::deadly_report("==7==ERROR: AddressSanitizer: stack-overflow on address 0x1"),
            Some((7, "stack-overflow"))
        );
        assert_eq!(
            super::deadly_report(
                "==7==ERROR: AddressSanitizer: heap-buffer-overflow on address 0x1"
            ),
            None
        );
    }
}
