//! Runs a libFuzzer binary on one allocator and reads back what happened.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use shadow::Target;

use crate::engines::harness::HarnessFiles;
use crate::engines::project::{Build, Project};

/// One libFuzzer run. New inputs go to `corpus[0]`; the other folders are
/// read only (committed seeds are passed there, so they never change).
pub struct Run {
    pub binary: PathBuf,
    pub allocator: String,
    /// Run without the shadow model (the cost floor).
    pub bare: bool,
    pub corpus: Vec<PathBuf>,
    pub dict: Option<PathBuf>,
    pub seed: u64,
    pub secs: u64,
    /// Where crash inputs and the log are written.
    pub out: PathBuf,
    /// The harness's files: keys to get past, the input history, saved
    /// findings, claims and the race tally.
    pub files: HarnessFiles,
    /// Past a violation that leaves memory in doubt, a process ends at
    /// once (`ALLOCSOAK_END_IN_DOUBT`): for `-fork` runs that go on past
    /// crashes, whose parent starts a fresh child with a fresh allocator.
    pub end_in_doubt: bool,
    /// libFuzzer's leak pass: an input after which mallocs outnumber
    /// frees runs again, then LeakSanitizer looks. Off for `mt_ops`,
    /// whose binaries run without LeakSanitizer
    /// ([`shadow::sanitizer::asan_defaults`]): the second run would be
    /// wasted.
    pub leaks: bool,
    /// More libFuzzer flags.
    pub args: Vec<String>,
}

/// What a run did.
pub struct Outcome {
    pub execs: u64,
    pub secs: f64,
    pub kind: Option<String>,
    pub log: PathBuf,
}

impl Outcome {
    pub fn execs_per_sec(&self) -> f64 {
        self.execs as f64 / self.secs.max(1e-3)
    }
}

impl Run {
    /// A checked run of `target` on `allocator` in the build that serves it,
    /// growing `corpus` from the committed seeds, with the target's
    /// dictionary; seed 1, 60 seconds. Callers override what differs.
    pub fn new(
        project: &Project,
        target: Target,
        allocator: &str,
        corpus: PathBuf,
        out: PathBuf,
    ) -> Run {
        Run {
            binary: project.binary(Build::for_allocator(allocator), target),
            allocator: allocator.to_string(),
            bare: false,
            corpus: vec![corpus, project.seeds(target)],
            dict: Some(project.dict(target)),
            seed: 1,
            secs: 60,
            out,
            files: HarnessFiles::default(),
            end_in_doubt: false,
            leaks: !matches!(target, Target::MtOps | Target::Workload),
            args: Vec::new(),
        }
    }

    /// The command line, as a user would type it to repeat the run.
    pub fn command(&self) -> Command {
        let mut cmd = triage::replay::engine_command(&self.binary);
        cmd.env("ALLOCSOAK_ALLOCATOR", &self.allocator)
            .env("ALLOCSOAK_MODE", if self.bare { "bare" } else { "checked" })
            .args(&self.corpus)
            .arg(format!("-seed={}", self.seed))
            .arg(format!("-max_total_time={}", self.secs))
            .arg("-use_value_profile=1")
            // Fewer mutations for slow inputs: big-block programs must not eat the run.
            .arg("-entropic_scale_per_exec_time=1")
            .arg("-print_final_stats=1")
            .arg(format!("-artifact_prefix={}/", self.out.display()));
        if let Some(dict) = &self.dict {
            cmd.arg(format!("-dict={}", dict.display()));
        }
        if !self.leaks {
            cmd.arg("-detect_leaks=0");
        }
        self.files.set(&mut cmd);
        if self.end_in_doubt {
            cmd.env("ALLOCSOAK_END_IN_DOUBT", "1");
        }
        cmd.args(&self.args);
        cmd
    }

    pub fn run(&self) -> Result<Outcome> {
        for dir in self.corpus.iter().chain([&self.out]) {
            std::fs::create_dir_all(dir)
                .with_context(|| format!("failed to create {}", dir.display()))?;
        }
        let log = self.out.join("fuzz.log");
        let file = std::fs::File::create(&log)
            .with_context(|| format!("failed to create {}", log.display()))?;
        let start = Instant::now();
        let status = self
            .command()
            .stdout(Stdio::null())
            .stderr(file)
            .status()
            .with_context(|| {
                format!("failed to run {}; run `just build`", self.binary.display())
            })?;
        let secs = start.elapsed().as_secs_f64();
        let text = std::fs::read_to_string(&log)
            .with_context(|| format!("failed to read {}", log.display()))?;
        if status.code() == Some(shadow::sanitizer::EXIT_STARTUP) {
            bail!("{}", startup_error(&self.allocator, &text));
        }
        Ok(Outcome {
            execs: final_stat(&text, "stat::number_of_executed_units"),
            secs,
            kind: report::kind(&text),
            log,
        })
    }
}

/// The one-line error of a run whose harness did not start
/// ([`shadow::sanitizer::EXIT_STARTUP`]): the harness's own line from the
/// log, which says why. Such a run fuzzed nothing and found nothing.
pub fn startup_error(allocator: &str, log: &str) -> String {
    let why = log
        .lines()
        .find_map(|l| l.strip_prefix("allocsoak: "))
        .unwrap_or("the harness exited before fuzzing");
    format!("allocator `{allocator}` did not start: {why}")
}

/// A libFuzzer status line (`#4096 pulse cov: 812 ft: 2301 corp: 310/12Kb
/// ... exec/s: 2048 rss: 61Mb`, or in fork mode `#4769: cov: 2088 ft:
/// 15591 corp: 979 exec/s: 281 ...`), the last one of a log.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    pub execs: u64,
    pub cov: u64,
    pub ft: u64,
    pub corpus: u64,
    pub execs_per_sec: u64,
    pub rss_mb: u64,
}

/// The last status line of a log, if any.
pub fn progress(log: &str) -> Option<Progress> {
    log.lines().rev().find_map(|line| {
        let rest = line.strip_prefix('#')?;
        let mut words = rest.split_whitespace();
        let execs = words.next()?.trim_end_matches(':').parse().ok()?;
        let mut p = Progress {
            execs,
            ..Progress::default()
        };
        let words: Vec<&str> = words.collect();
        let mut seen_cov = false;
        for pair in words.windows(2) {
            let num = |s: &str| {
                s.trim_end_matches("Mb")
                    .split('/')
                    .next()
                    .and_then(|n| n.parse().ok())
                    .unwrap_or(0)
            };
            match pair[0] {
                "cov:" => {
                    p.cov = num(pair[1]);
                    seen_cov = true;
                }
                "ft:" => p.ft = num(pair[1]),
                "corp:" => p.corpus = num(pair[1]),
                "exec/s:" => p.execs_per_sec = num(pair[1]),
                "rss:" => p.rss_mb = num(pair[1]),
                _ => {}
            }
        }
        seen_cov.then_some(p)
    })
}

/// A `-print_final_stats` value, or 0 when the run ended before printing it.
pub fn final_stat(log: &str, name: &str) -> u64 {
    log.lines()
        .filter_map(|l| {
            l.strip_prefix(name)?
                .trim_start_matches(':')
                .trim()
                .parse()
                .ok()
        })
        .next_back()
        .unwrap_or(0)
}

/// The findings libFuzzer wrote: crash, leak, timeout and OOM inputs.
/// (Slow-unit reports are not findings and stay in the scratch.)
pub fn artifacts(dir: &Path) -> Result<Vec<PathBuf>> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path
            .file_name()
            .map_or_else(String::new, |n| n.to_string_lossy().into_owned());
        if ["crash-", "leak-", "timeout-", "oom-"]
            .iter()
            .any(|p| name.starts_with(p))
        {
            found.push(path);
        }
    }
    found.sort();
    Ok(found)
}

/// Why a replay on `binary` did not run: the soak's filing time was over
/// (the run was stopped), or the binary would not start.
pub fn replay_error(e: std::io::Error, binary: &Path) -> anyhow::Error {
    match e.kind() {
        std::io::ErrorKind::Interrupted => e.into(),
        _ => anyhow::Error::new(e).context(format!(
            "failed to run {}; run `just build`",
            binary.display()
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_lines_are_read() {
        let log = "INFO: seed corpus: files: 310\n\
                   #2\tINITED cov: 700 ft: 1900 corp: 300/11Kb exec/s: 0 rss: 40Mb\n\
                   #4096\tpulse  cov: 812 ft: 2301 corp: 310/12Kb lim: 64 exec/s: 2048 rss: 61Mb\n\
                   Done 5000 runs in 2 second(s)\n";
        assert_eq!(
            progress(log),
            Some(Progress {
                execs: 4096,
                cov: 812,
                ft: 2301,
                corpus: 310,
                execs_per_sec: 2048,
                rss_mb: 61
            })
        );
        assert_eq!(progress("#1 no coverage here\n"), None);
        let fork = "#4769: cov: 2088 ft: 15591 corp: 979 exec/s: 281 oom/timeout/crash: 0/0/0 time: 15s job: 5 dft_time: 0\n";
        assert_eq!(
            progress(fork),
            Some(Progress {
                execs: 4769,
                cov: 2088,
                ft: 15591,
                corpus: 979,
                execs_per_sec: 281,
                rss_mb: 0
            })
        );
    }
}
