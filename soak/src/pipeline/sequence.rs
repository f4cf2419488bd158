//! Crashes that need their history. An allocator keeps state across the
//! inputs of one process, so a crash that does not reproduce from its
//! input alone may need what earlier inputs left behind: a corruption in
//! one that surfaces in a later one, elsewhere. The fuzz process kept the
//! inputs it ran ([`shadow::history`]); intake replays them, in order, in
//! one process, before the crash input, and shrinks them to the few that
//! still reproduce (ddmin, as syzkaller reproduces a crash from its
//! execution log). The group's repro is then that sequence.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::engines::libfuzzer::replay_error;
use anyhow::{Context, Result};
use report::Signature;
use triage::ddmin::ddmin;
use triage::replay::{Replay, Replayer};

/// Seconds shrinking one new group's history may take; past it the
/// sequence is kept as far as it got.
const SHRINK_SECS: u64 = 60;

/// Bytes of input paths one history replay passes: its inputs are
/// arguments, in order, and Linux refuses a command line past about
/// 2 MiB (`E2BIG`) with the environment, which left a finding made 70,000
/// small inputs into a process pending for good.
const ARGUMENT_BYTES: usize = 1 << 20;

/// Most inputs one history replay runs before the crash input: replaying
/// them takes seconds to a minute (a finding's state is most likely left
/// by its last inputs; shrinking then looks for the fewest).
const MAX_INPUTS: usize = 4096;

/// The inputs a crashed process ran before its crash input, oldest first,
/// as files.
pub struct History {
    pub inputs: Vec<PathBuf>,
}

/// What shrinking a history kept, and what it took.
pub struct Shrunk {
    /// The inputs the crash needs, in replay order.
    pub inputs: Vec<PathBuf>,
    /// Their replay before the crash input.
    pub replay: Replay,
    /// How many inputs the history had, replays and seconds it took.
    pub from: usize,
    pub replays: usize,
    pub secs: f64,
}

impl Shrunk {
    /// `41 inputs to 1 in 2.3 s (9 replays)`.
    pub fn summary(&self) -> String {
        format!(
            "{} inputs to {} in {:.1} s ({} replays)",
            self.from,
            self.inputs.len(),
            self.secs,
            self.replays
        )
    }
}

impl History {
    /// Unpacks the ring file `ring` into numbered files in `dir` (made
    /// afresh): its newest inputs, at most [`MAX_INPUTS`] and as many as
    /// one command line carries ([`ARGUMENT_BYTES`]). `None` when the ring
    /// holds nothing before the crash input.
    pub fn unpack(ring: &Path, artifact: &Path, dir: &Path) -> Result<Option<History>> {
        let mut inputs = shadow::history::read(ring).map_err(anyhow::Error::msg)?;
        let crash = std::fs::read(artifact)
            .with_context(|| format!("failed to read {}", artifact.display()))?;
        // The ring's newest input is the one that was running: the artifact.
        if inputs.last() == Some(&crash) {
            inputs.pop();
        }
        let path_bytes = dir.join(file_name(inputs.len())).as_os_str().len() + 1;
        let fit = (ARGUMENT_BYTES / path_bytes).min(MAX_INPUTS);
        if inputs.len() > fit {
            inputs.drain(..inputs.len() - fit);
        }
        if inputs.is_empty() {
            return Ok(None);
        }
        if dir.exists() {
            crate::foundation::state::remove_scratch(dir)?;
        }
        std::fs::create_dir_all(dir)
            .with_context(|| format!("failed to create {}", dir.display()))?;
        let mut files = Vec::with_capacity(inputs.len());
        for (i, input) in inputs.iter().enumerate() {
            let file = dir.join(file_name(i));
            crate::foundation::state::write_atomic(&file, input)?;
            files.push(file);
        }
        Ok(Some(History { inputs: files }))
    }

    /// Replays the whole history, then the crash input.
    pub fn replay(&self, replayer: &Replayer, artifact: &Path) -> Result<Replay> {
        replay(replayer, &self.inputs, artifact)
    }

    /// The fewest inputs of the history that, replayed before the crash
    /// input, still reproduce the group of `sig`: the shortest suffix that
    /// does (doubling its length), then ddmin within it.
    pub fn shrink(
        &self,
        replayer: &Replayer,
        artifact: &Path,
        slot: &str,
        sig: &Signature,
        budget: &triage::budget::Budget,
    ) -> Result<Shrunk> {
        let start = Instant::now();
        let deadline = start + Duration::from_secs(SHRINK_SECS);
        let mut failure = None;
        let mut replays = 0;
        let mut reproduces = |before: &[PathBuf]| -> bool {
            if failure.is_some() || Instant::now() > deadline || budget.over() {
                return false;
            }
            replays += 1;
            let inputs: Vec<&Path> = before
                .iter()
                .map(PathBuf::as_path)
                .chain([artifact])
                .collect();
            match replayer.fails_as(&inputs, sig, slot) {
                Ok(same) => same,
                Err(e) => {
                    failure = Some(replay_error(e, replayer.binary));
                    false
                }
            }
        };
        let n = self.inputs.len();
        let mut k = 1;
        while k < n && !reproduces(&self.inputs[n - k..]) {
            k *= 2;
        }
        let suffix = &self.inputs[n - k.min(n)..];
        let before = ddmin(suffix, &mut reproduces);
        if let Some(e) = failure {
            return Err(e);
        }
        let last = replay(replayer, &before, artifact)?;
        Ok(Shrunk {
            inputs: before,
            replay: last,
            from: n,
            replays: replays + 1,
            secs: start.elapsed().as_secs_f64(),
        })
    }
}

/// `history/000000`, `history/000001`, …: names that sort in replay order.
pub fn file_name(i: usize) -> String {
    format!("{i:06}")
}

/// `inputs` as a shell command's arguments: a group's history, past a few
/// files and when they are the whole of its folder, as the glob
/// `<group>/history/*` (the shell sorts its names in replay order, and
/// leaves out the `.tmp` files a copy may have left), then the crash input.
pub fn shell_args(inputs: &[PathBuf]) -> String {
    let (before, last) = match inputs.split_last() {
        Some((last, before)) => (before, last),
        None => return String::new(),
    };
    // The folder's files, in the order `files` (and the shell) sort them,
    // are exactly `before`.
    let history = before
        .first()
        .and_then(|f| f.parent())
        .filter(|h| before.len() > 3 && h.ends_with("history"))
        .filter(|h| h.parent().and_then(|group| files(group).ok()).as_deref() == Some(before));
    let mut words: Vec<String> = match history {
        Some(h) => vec![h.join("*").display().to_string()],
        None => before.iter().map(|f| f.display().to_string()).collect(),
    };
    words.push(last.display().to_string());
    words.join(" ")
}

/// The history files of a group folder, in replay order (none for a
/// crash that reproduces alone).
pub fn files(dir: &Path) -> Result<Vec<PathBuf>> {
    let dir = dir.join("history");
    if !dir.is_dir() {
        return Ok(Vec::new());
    }
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&dir)? {
        let path = entry?.path();
        if !path
            .file_name()
            .is_some_and(|n| n.to_string_lossy().starts_with(".tmp"))
        {
            files.push(path);
        }
    }
    files.sort();
    Ok(files)
}

fn replay(replayer: &Replayer, before: &[PathBuf], artifact: &Path) -> Result<Replay> {
    let inputs: Vec<&Path> = before
        .iter()
        .map(PathBuf::as_path)
        .chain([artifact])
        .collect();
    replayer
        .replay(&inputs, true)
        .map_err(|e| replay_error(e, replayer.binary))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Past three history files, the command names the folder's glob, and
    /// the shell expands it to the same files in the same order.
    #[test]
    fn a_long_history_is_a_glob_the_shell_expands_in_replay_order() {
        let tmp = tempfile::tempdir().unwrap();
        let history = tmp.path().join("history");
        std::fs::create_dir(&history).unwrap();
        let mut inputs: Vec<PathBuf> = (0..12).map(|i| history.join(file_name(i))).collect();
        for f in &inputs {
            std::fs::write(f, "").unwrap();
        }
        std::fs::write(history.join(".tmp-000012"), "").unwrap();
        inputs.push(tmp.path().join("original"));
        let args = shell_args(&inputs);
        assert!(args.contains("/history/* "), "{args}");
        let out = std::process::Command::new("sh")
            .arg("-c")
            .arg(format!("printf '%s\\n' {args}"))
            .output()
            .unwrap();
        let expanded: Vec<PathBuf> = String::from_utf8(out.stdout)
            .unwrap()
            .lines()
            .map(PathBuf::from)
            .collect();
        assert_eq!(expanded, inputs);
        // A part of the folder is named file by file.
        let part: Vec<PathBuf> = inputs[1..].to_vec();
        assert!(!shell_args(&part).contains('*'), "{}", shell_args(&part));
        let short = shell_args(&inputs[9..]);
        assert!(
            short.contains("history/000009 ") && !short.contains('*'),
            "{short}"
        );
    }

    /// A history of 100,000 small inputs (a finding made that far into a
    /// process) is replayed from its newest inputs, as many as one command
    /// line carries (the folder's long name makes that fewer than
    /// [`MAX_INPUTS`]).
    #[test]
    fn a_long_history_keeps_its_newest_inputs_a_command_line_carries() {
        let tmp = tempfile::tempdir().unwrap();
        let ring_path = tmp.path().join("history");
        let mut ring =
            shadow::history::Ring::create(&ring_path, shadow::history::CAPACITY).unwrap();
        let n = 100_000u32;
        for i in 0..n {
            ring.push(&i.to_le_bytes());
        }
        let crash = tmp.path().join("crash");
        std::fs::write(&crash, b"crash").unwrap();
        // A long folder name: fewer inputs fit, so the test writes fewer.
        let dir = tmp.path().join("inputs-".repeat(35));
        let history = History::unpack(&ring_path, &crash, &dir).unwrap().unwrap();
        let bytes: usize = history.inputs.iter().map(|p| p.as_os_str().len() + 1).sum();
        assert!(bytes <= ARGUMENT_BYTES, "{bytes} bytes of paths");
        assert!(
            history.inputs.len() > 2_000,
            "{} inputs",
            history.inputs.len()
        );
        let newest = std::fs::read(history.inputs.last().unwrap()).unwrap();
        assert_eq!(newest, (n - 1).to_le_bytes());
    }
}
