//! `allocsoak fuzz`: a short pass over targets × allocators; every finding
//! is printed with the command that reproduces it.

use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use shadow::Target;

use crate::engines::libfuzzer::Run;
use crate::engines::project::{Build, Project};
use crate::foundation::config::Config;

/// One pass: each (target, allocator) for `secs`, `jobs` pairs at a
/// time, growing a corpus per target in `corpus`.
pub struct Pass<'a> {
    pub corpus: &'a Path,
    pub targets: &'a [Target],
    pub allocators: &'a [String],
    pub secs: u64,
    pub jobs: usize,
}

/// Runs `pass`, but the pairs `config` leaves out, with a line saying
/// why. Each pair's lines are printed as it ends. Returns the number of
/// findings.
pub fn run(project: &Project, config: &Config, pass: &Pass) -> Result<usize> {
    let Pass {
        corpus,
        targets,
        allocators,
        secs,
        jobs,
    } = *pass;
    for allocator in allocators {
        project.build(Build::for_allocator(allocator))?;
    }
    let mut pairs = Vec::new();
    for &target in targets {
        for allocator in allocators {
            match config.runs_on(target, allocator) {
                Ok(()) => pairs.push((target, allocator.as_str())),
                Err(why) => println!("fuzz: {why}"),
            }
        }
    }
    let results: Vec<Result<bool>> =
        crate::running::scheduler::in_parallel(&pairs, jobs, |&(target, allocator)| {
            let found = fuzz_pair(project, corpus, target, allocator, secs)?;
            // Each pair's lines together, whichever pair ends first.
            print!("{}", found.text);
            Ok(found.found)
        });
    let mut findings = 0;
    for result in results {
        findings += usize::from(result?);
    }
    Ok(findings)
}

/// What one pair's run printed, and whether it found something.
struct PairResult {
    text: String,
    found: bool,
}

/// Fuzzes `target` on `allocator` for `secs` from the shared corpus.
fn fuzz_pair(
    project: &Project,
    corpus: &Path,
    target: Target,
    allocator: &str,
    secs: u64,
) -> Result<PairResult> {
    let out = project.run_dir("fuzz", &[target.name(), allocator]);
    let run = Run {
        seed: 0,
        secs,
        ..Run::new(
            project,
            target,
            allocator,
            corpus.join(target.name()),
            out.clone(),
        )
    };
    let o = run.run()?;
    if o.execs == 0 && o.kind.is_none() {
        // Not a clean run: the binary ended before its first input, as
        // when the allocator does not load.
        let log = std::fs::read_to_string(&o.log).unwrap_or_default();
        bail!(
            "fuzz {target} {allocator} ran no input: {} (log: {})",
            log.lines()
                .rfind(|l| !l.trim().is_empty())
                .unwrap_or("no output"),
            o.log.display()
        );
    }
    let mut text = format!(
        "fuzz {target} {allocator} execs={} execs_per_s={:.0} found={}\n",
        o.execs,
        o.execs_per_sec(),
        o.kind.as_deref().unwrap_or("none")
    );
    if o.kind.is_some() {
        if let Some(input) = newest_artifact(&out) {
            text.push_str(&format!(
                "  Reproduce with: ALLOCSOAK_ALLOCATOR={allocator} {} {}\n",
                run.binary.display(),
                input.display()
            ));
        }
        text.push_str(&format!("  log: {}\n", o.log.display()));
    }
    Ok(PairResult {
        text,
        found: o.kind.is_some(),
    })
}

/// The newest crash, leak, timeout or OOM input libFuzzer wrote to `dir`.
fn newest_artifact(dir: &Path) -> Option<PathBuf> {
    crate::engines::libfuzzer::artifacts(dir)
        .ok()?
        .into_iter()
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
}
