//! Runs a honggfuzz binary (persistent mode, no sanitizer: `allocsoak
//! build` makes it when a slot uses honggfuzz) on one allocator for a
//! slice, and reads back what happened: its status from its log and its
//! `--statsfile`, its crashes (`SIG*.fuzz`).
//!
//! A run's folder is the slice's scratch. honggfuzz takes one input
//! folder and may write into it, so the persistent corpus and the seeds
//! are linked into `input/` and never handed over themselves; the inputs
//! that gave new coverage after its dry run land in `new/`
//! (`--covdir_new`), which the slice merges like libFuzzer's; crashes in
//! `artifacts/` (`--crashdir`), and the first one ends the run, as under
//! libFuzzer, so the history ring holds the inputs before it.

use std::path::{Path, PathBuf};
use std::process::Command;

use anyhow::{Context, Result};

use crate::engines::harness::HarnessFiles;
use crate::engines::libfuzzer::Progress;

/// One honggfuzz run in a slice's scratch folder.
pub struct Run {
    /// The `honggfuzz` driver `cargo hfuzz build` leaves next to its builds.
    pub driver: PathBuf,
    pub binary: PathBuf,
    pub allocator: String,
    /// Folders whose inputs start the run (the persistent corpus, the
    /// committed seeds); read only, through links in `input/`.
    pub corpus: Vec<PathBuf>,
    /// The slice's scratch: `input/`, `out/`, `new/`, `artifacts/`, `ws/`.
    pub scratch: PathBuf,
    pub dict: Option<PathBuf>,
    pub secs: u64,
    /// Per-input limits, as libFuzzer's `-timeout` and `-rss_limit_mb`.
    pub timeout_secs: u64,
    pub rss_limit_mb: u64,
    /// Inputs to run at most (`--iterations`, libFuzzer's `-runs`), else
    /// `secs` alone ends the run.
    pub runs: Option<u64>,
    /// Fuzzing threads, each with a persistent process of its own.
    pub threads: usize,
    /// The harness's files: keys to get past, the input history, saved
    /// findings, claims and the race tally.
    pub files: HarnessFiles,
}

/// The `--statsfile` of a run in `scratch`.
pub fn stats_file(scratch: &Path) -> PathBuf {
    scratch.join("hfuzz.stats")
}

impl Run {
    /// Makes the run's folders and links every input of `corpus` into
    /// `input/` (a hard link, or a copy across file systems; a name seen
    /// twice is linked once).
    pub fn prepare(&self) -> Result<()> {
        for sub in ["input", "out", "new", "artifacts", "ws"] {
            let dir = self.scratch.join(sub);
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("failed to create {}", dir.display()))?;
        }
        let input = self.scratch.join("input");
        for dir in &self.corpus {
            let entries = match std::fs::read_dir(dir) {
                Ok(e) => e,
                // A target's corpus before its first merge.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                Err(e) => {
                    return Err(e).with_context(|| format!("failed to read {}", dir.display()))
                }
            };
            for entry in entries {
                let from = entry?.path();
                let to = input.join(from.file_name().expect("a file in a folder"));
                if !from.is_file() || to.exists() {
                    continue;
                }
                if std::fs::hard_link(&from, &to).is_err() {
                    std::fs::copy(&from, &to).with_context(|| {
                        format!("failed to copy {} to {}", from.display(), to.display())
                    })?;
                }
            }
        }
        Ok(())
    }

    /// The command line, as a user would type it to repeat the run.
    pub fn command(&self) -> Command {
        let dir = |sub: &str| self.scratch.join(sub);
        let mut cmd = Command::new(&self.driver);
        cmd.env("ALLOCSOAK_ALLOCATOR", &self.allocator)
            .env("ALLOCSOAK_MODE", "checked")
            // honggfuzz sets MALLOC_PERTURB_=85 for its target unless it is
            // set: glibc then fills every block it serves, and a huge
            // request served by `system` (4 GiB, which the build without
            // ASan makes) costs seconds, the corpus's dry run minutes
            // (35 exec/s on alloc_ops/system instead of 1,000).
            .env("MALLOC_PERTURB_", "0")
            .arg("--threads")
            .arg(self.threads.to_string())
            // The target's stderr (violations, tolerated counts) into the log.
            .arg("--keep_output")
            .arg("--exit_upon_crash")
            // A timeout is saved as a crash (SIGVTALRM.*), a finding as under libFuzzer.
            .arg("--tmout_sigvtalrm")
            .arg("--run_time")
            .arg(self.secs.to_string())
            .arg("--timeout")
            .arg(self.timeout_secs.to_string())
            .arg("--rlimit_rss")
            .arg(self.rss_limit_mb.to_string())
            .arg("--input")
            .arg(dir("input"))
            .arg("--output")
            .arg(dir("out"))
            .arg("--covdir_new")
            .arg(dir("new"))
            .arg("--crashdir")
            .arg(dir("artifacts"))
            .arg("--workspace")
            .arg(dir("ws"))
            .arg("--statsfile")
            .arg(stats_file(&self.scratch));
        if let Some(dict) = &self.dict {
            cmd.arg("--dict").arg(dict);
        }
        if let Some(n) = self.runs {
            cmd.arg("--iterations").arg(n.to_string());
        }
        self.files.set(&mut cmd);
        cmd.arg("--").arg(&self.binary);
        cmd
    }
}

/// What a run has done so far, from its log and its stats file, in
/// libFuzzer's terms: `execs` and `execs_per_sec` from the final
/// `Summary` line (else the stats file's last row, written at each new
/// coverage), `cov` honggfuzz's edges, `ft` its comparison progress (the
/// nearest to libFuzzer's value-profile features), `corpus` its queue,
/// `rss_mb` its children's peak. None before either says anything.
pub fn progress(log: &str, stats: &str) -> Option<Progress> {
    let row = stats
        .lines()
        .rev()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| {
            let v: Vec<u64> = l
                .split(',')
                .map(|f| f.trim().parse().ok())
                .collect::<Option<_>>()?;
            (v.len() >= 10).then_some(v)
        });
    let summary = log.lines().rev().find_map(|l| {
        let rest = &l[l.find("Summary iterations:")? + "Summary ".len()..];
        let field = |name: &str| {
            rest.split_whitespace()
                .find_map(|w| w.strip_prefix(name)?.strip_prefix(':')?.parse::<u64>().ok())
                .unwrap_or(0)
        };
        Some((field("iterations"), field("speed"), field("peak_rss_mb")))
    });
    // `... New:0/0/0/147/3/12444, Cur:0/0/0/1929/101/106981`: instructions,
    // branches, blocks, edges, PCs, comparisons so far.
    let cur: Option<Vec<u64>> = log.lines().rev().find_map(|l| {
        let counts = l.split_once(", Cur:")?.1.trim();
        counts.split('/').map(|n| n.parse().ok()).collect()
    });
    if row.is_none() && summary.is_none() && cur.is_none() {
        return None;
    }
    let cur = cur.filter(|c| c.len() == 6).unwrap_or_else(|| vec![0; 6]);
    let mut p = Progress {
        cov: cur[3],
        ft: cur[5],
        ..Progress::default()
    };
    if let Some(v) = &row {
        p.execs = v[2];
        p.execs_per_sec = v[3];
        p.cov = p.cov.max(v[7]);
        p.corpus = v[9];
    }
    if let Some((execs, speed, rss)) = summary {
        p.execs = execs.max(p.execs);
        p.execs_per_sec = speed;
        p.rss_mb = rss;
    }
    Some(p)
}

/// The crashes honggfuzz saved: `SIGABRT.PC.….fuzz`, `SIGVTALRM.…` for a
/// timeout (the files in its crash folder).
pub fn artifacts(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in
        std::fs::read_dir(dir).with_context(|| format!("failed to read {}", dir.display()))?
    {
        let path = entry?.path();
        let name = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        if name.starts_with("SIG") && name.ends_with(".fuzz") {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_is_read_from_the_log_and_the_stats_file() {
        let stats = "# unix_time, last_cov_update, total_exec, exec_per_sec, crashes, unique_crashes, hangs, edge_cov, block_cov, corpus_count\n\
                     1795619208, 1795619206, 525, 30, 0, 0, 0, 1781, 98, 273\n\
                     1795619208, 1795619208, 530, 31, 0, 0, 0, 1782, 98, 274\n";
        let log = "Entering phase 1/3: Dry Run\n\
                   Sz:64 Tm:651us (i/b/h/e/p/c) New:0/0/0/1/0/12, Cur:0/0/0/1782/98/94537\n";
        let live = Progress {
            execs: 530,
            cov: 1782,
            ft: 94537,
            corpus: 274,
            execs_per_sec: 31,
            rss_mb: 0,
        };
        assert_eq!(progress(log, stats), Some(live));
        let done = format!(
            "{log}Summary iterations:6021 time:60 speed:100 crashes_count:0 timeout_count:0 \
             new_units_added:12 slowest_unit_ms:88 guard_nb:39400 branch_coverage_percent:4 peak_rss_mb:95\n"
        );
        assert_eq!(
            progress(&done, stats),
            Some(Progress {
                execs: 6021,
                execs_per_sec: 100,
                rss_mb: 95,
                ..live
            })
        );
        assert_eq!(progress("Start time:'2026'\n", ""), None);
    }
}
