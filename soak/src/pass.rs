//! `allocsoak fuzz`: a short pass over targets × allocators; every finding
//! is printed with the command that reproduces it.

use std::path::PathBuf;

use anyhow::{bail, Result};
use shadow::Target;

use crate::config::Config;
use crate::libfuzzer::Run;
use crate::project::{Build, Project};

/// Runs each (target, allocator) for `secs`, growing a corpus per target
/// under the work dir, but the pairs `config` leaves out, with a line
/// saying why. Returns the number of findings.
pub fn run(
    project: &Project,
    config: &Config,
    targets: &[Target],
    allocators: &[String],
    secs: u64,
) -> Result<usize> {
    let mut findings = 0;
    for allocator in allocators {
        project.build(Build::for_allocator(allocator))?;
    }
    let corpus = project.work_dir("fuzz").join("corpus");
    for &target in targets {
        for allocator in allocators {
            if let Err(why) = config.runs_on(target, allocator) {
                println!("fuzz: {why}");
                continue;
            }
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
                // Not a clean run: the binary ended before its first input,
                // as when the allocator does not load.
                let log = std::fs::read_to_string(&o.log).unwrap_or_default();
                bail!(
                    "fuzz {target} {allocator} ran no input: {} (log: {})",
                    log.lines()
                        .rfind(|l| !l.trim().is_empty())
                        .unwrap_or("no output"),
                    o.log.display()
                );
            }
            println!(
                "fuzz {target} {allocator} execs={} execs_per_s={:.0} found={}",
                o.execs,
                o.execs_per_sec(),
                o.kind.as_deref().unwrap_or("none")
            );
            if o.kind.is_some() {
                findings += 1;
                if let Some(input) = newest_artifact(&out) {
                    println!(
                        "  Reproduce with: ALLOCSOAK_ALLOCATOR={allocator} {} {}",
                        run.binary.display(),
                        input.display()
                    );
                }
                println!("  log: {}", o.log.display());
            }
        }
    }
    Ok(findings)
}

/// The newest crash, leak, timeout or OOM input libFuzzer wrote to `dir`.
fn newest_artifact(dir: &std::path::Path) -> Option<PathBuf> {
    crate::libfuzzer::artifacts(dir)
        .ok()?
        .into_iter()
        .max_by_key(|p| p.metadata().and_then(|m| m.modified()).ok())
}
