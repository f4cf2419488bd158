//! Building beside the slices (`allocsoak soak --build`, what `just soak`
//! runs). A soak that builds what its slots run starts fuzzing as soon
//! as the first target's binary links: the daemon builds that one on
//! every core before its workers start, and the rest one [`Part`] at a
//! time on one core it holds as a slice would. The duty cycle counts
//! that core as not fuzzing. A slot is drawn only once every part it
//! runs is built; a part that does not build keeps its slots out of this
//! soak and says where its cargo log is.

use std::os::unix::process::CommandExt;
use std::process::Stdio;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use shadow::Target;

use crate::engines::project::{runs_jemalloc, Build, Part, Project};
use crate::engines::Engine;
use crate::foundation::config::{Series, Slot};
use crate::running::slice::signal_group;
use crate::running::soak::Soak;
use crate::running::unbuilt::fuzz_part;

/// What `slots` and the `drift` series run, in the order a soak builds
/// it: the fuzz binary most slots run first, then the other fuzz binaries
/// (the most slots first), then those only drift series file their
/// violations on (a trace's is `workload`'s), then the drift replay
/// binary, then honggfuzz's (a build of everything again, and a few
/// slots' worth).
pub fn parts(slots: &[Slot], drift: &[Series]) -> Vec<Part> {
    let mut fuzz: Vec<(Part, usize)> = Vec::new();
    for slot in slots {
        let part = fuzz_part(slot);
        match fuzz.iter_mut().find(|(p, _)| *p == part) {
            Some((_, n)) => *n += 1,
            None => fuzz.push((part, 1)),
        }
    }
    // Stable: equal counts keep the order of the build, then the target.
    fuzz.sort_by_key(|&(part, n)| {
        let Part::Fuzz(build, target) = part else {
            unreachable!("fuzz parts only")
        };
        let at = Target::ALL.iter().position(|t| *t == target);
        (std::cmp::Reverse(n), build.name(), at)
    });
    let mut parts: Vec<Part> = fuzz.into_iter().map(|(p, _)| p).collect();
    for series in drift {
        let files_on = Part::Fuzz(Build::for_allocator(&series.allocator), series.target);
        if !parts.contains(&files_on) {
            parts.push(files_on);
        }
    }
    if !drift.is_empty() {
        parts.push(Part::Drift);
    }
    let mut honggfuzz = slots
        .iter()
        .filter(|s| s.engine == Engine::Honggfuzz.name())
        .peekable();
    if honggfuzz.peek().is_some() {
        parts.push(Part::Honggfuzz {
            jemalloc: honggfuzz.any(|s| runs_jemalloc(&s.allocator)),
        });
    }
    parts
}

/// Builds `parts` in order, shown, on every core, before the soak's
/// workers start.
pub fn now(project: &Project, parts: &[Part]) -> Result<()> {
    for &part in parts {
        println!("allocsoak: building {part}");
        if !project.build_part(part, None)? {
            anyhow::bail!("building {part} failed; see the cargo output above");
        }
    }
    Ok(())
}

/// Builds what [`Soak::unbuilt`] holds, in `order`, on the one core
/// `cores` the daemon took for it (given back at the end), each part's
/// cargo output in the state's `logs/build-<part>.log`. Stops, killing
/// cargo, when the soak does.
pub fn beside(soak: &Soak, order: &[Part], cores: usize) {
    for &part in order {
        if soak.stop.load(Ordering::Relaxed) || soak.past_deadline(Duration::ZERO) {
            break;
        }
        let log = soak
            .state
            .logs()
            .join(format!("build-{}.log", part.to_string().replace(' ', "-")));
        let started = Instant::now();
        match build_one(soak, part, cores, &log) {
            Ok(Some(true)) => match check_loads(soak, part) {
                Ok(()) => {
                    soak.unbuilt.built(part);
                    println!(
                        "allocsoak: built {part} beside the slices in {} s",
                        started.elapsed().as_secs()
                    );
                }
                Err(e) => eprintln!("allocsoak: {e:#}; its slots do not run this soak"),
            },
            Ok(Some(false)) => eprintln!(
                "allocsoak: building {part} failed (see {}); its slots do not run this soak",
                log.display()
            ),
            Ok(None) => break,
            Err(e) => {
                eprintln!("allocsoak: building {part}: {e:#}; its slots do not run this soak")
            }
        }
    }
    soak.unbuilt.ended();
    soak.cores.give(cores);
}

/// Runs `part`'s cargo on `cores` jobs in its own process group;
/// `None` when the soak stopped or ended first (cargo and the compilers
/// it started are killed).
fn build_one(soak: &Soak, part: Part, cores: usize, log: &std::path::Path) -> Result<Option<bool>> {
    let file = std::fs::File::create(log)
        .with_context(|| format!("failed to create {}", log.display()))?;
    let mut child = soak
        .project
        .part_command(part)?
        .env("CARGO_BUILD_JOBS", cores.to_string())
        .stdin(Stdio::null())
        .stdout(file.try_clone()?)
        .stderr(file)
        .process_group(0)
        .spawn()
        .context("failed to run cargo; run `just setup`")?;
    loop {
        if let Some(status) = child.try_wait()? {
            return Ok(Some(status.success()));
        }
        if soak.stop.load(Ordering::Relaxed) || soak.past_deadline(Duration::ZERO) {
            signal_group(&child, libc::SIGKILL);
            child.wait()?;
            return Ok(None);
        }
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// A library allocator must load in the fuzz binary `part` is (the same
/// check the daemon makes at boot for what was built before it).
fn check_loads(soak: &Soak, part: Part) -> Result<()> {
    for (slot, _) in &soak.slots {
        if fuzz_part(slot) == part {
            loads(&soak.project, slot)?;
        }
    }
    Ok(())
}

/// A library allocator must load in its slot's fuzz binary, else every
/// slice would "crash" at its first input and file that as a finding.
pub(crate) fn loads(project: &Project, slot: &Slot) -> Result<()> {
    if !crate::foundation::declared::is_library(project.declared(), &slot.allocator) {
        return Ok(());
    }
    let binary = project.binary(Build::for_allocator(&slot.allocator), slot.target);
    let empty = std::env::temp_dir().join(format!(
        "allocsoak-empty-{}-{}",
        std::process::id(),
        slot.target
    ));
    std::fs::write(&empty, b"")?;
    let out = triage::replay::engine_command(&binary)
        .env("ALLOCSOAK_ALLOCATOR", &slot.allocator)
        .arg(&empty)
        .output()
        .with_context(|| format!("failed to run {}", binary.display()));
    let _ = std::fs::remove_file(&empty);
    let out = out?;
    let log = String::from_utf8_lossy(&out.stderr);
    let error = log.lines().find(|l| {
        l.starts_with("allocsoak: ALLOCSOAK_ALLOCATOR") || l.contains("symbol lookup error")
    });
    if let Some(line) = error {
        bail!(
            "allocator {} does not load in {}: {}",
            slot.allocator,
            binary.display(),
            line.trim()
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::running::unbuilt::Unbuilt;

    fn slot(target: Target, allocator: &str, engine: Engine) -> Slot {
        Slot {
            target,
            allocator: allocator.into(),
            engine: engine.name().into(),
            weight: 1.0,
            cores: 1,
        }
    }

    #[test]
    fn the_binary_most_slots_run_is_built_first_and_honggfuzz_last() {
        let slots = [
            slot(Target::HeapApi, "system", Engine::LibFuzzer),
            slot(Target::AllocOps, "mimalloc-debug", Engine::LibFuzzer),
            slot(Target::MtOps, "system", Engine::LibFuzzer),
            slot(Target::MtOps, "mimalloc", Engine::Honggfuzz),
        ];
        // A trace's series files its violations on workload's binary,
        // which no slot runs; alloc_ops/system's is built for a slot.
        let series = |target, trace: Option<&str>| Series {
            target,
            allocator: "system".into(),
            trace: trace.map(Into::into),
        };
        let drift = [
            series(Target::HeapApi, None),
            series(Target::Workload, Some("app.trace")),
        ];
        let order = parts(&slots, &drift);
        assert_eq!(
            order,
            vec![
                Part::Fuzz(Build::Asan, Target::MtOps),
                Part::Fuzz(Build::Asan, Target::HeapApi),
                Part::Fuzz(Build::AsanMimallocDebug, Target::AllocOps),
                Part::Fuzz(Build::Asan, Target::Workload),
                Part::Drift,
                Part::Honggfuzz { jemalloc: false },
            ]
        );
        let unbuilt = Unbuilt::new(&order[1..]);
        assert!(unbuilt.ready(&slots[2]));
        assert!(!unbuilt.ready(&slots[3]), "honggfuzz is not built yet");
        assert!(!unbuilt.ready(&slots[0]));
        unbuilt.built(Part::Fuzz(Build::Asan, Target::HeapApi));
        assert!(unbuilt.ready(&slots[0]));
    }

    /// honggfuzz's binaries leave jemalloc's C build out unless a
    /// honggfuzz slot's allocator may run it.
    #[test]
    fn honggfuzz_builds_jemalloc_only_for_a_slot_that_may_run_it() {
        let hongg = |allocator: &str| [slot(Target::AllocOps, allocator, Engine::Honggfuzz)];
        let jemalloc = |slots: &[Slot]| {
            parts(slots, &[])
                .into_iter()
                .find_map(|p| match p {
                    Part::Honggfuzz { jemalloc } => Some(jemalloc),
                    _ => None,
                })
                .expect("a honggfuzz slot builds honggfuzz's binaries")
        };
        for (allocator, runs) in [
            ("system", false),
            ("mimalloc", false),
            ("dylib:/lib/libmy.so:my_", false),
            ("a-declared-crate", false),
            ("zoo:short-realloc-copy", false),
            ("jemalloc", true),
            ("zoo:os-fail-leaks", true),
            ("zoo:short-realloc-copy@jemalloc", true),
        ] {
            assert_eq!(jemalloc(&hongg(allocator)), runs, "{allocator}");
        }
        // A libFuzzer slot of jemalloc beside needs no jemalloc in honggfuzz's.
        let both = [
            slot(Target::AllocOps, "jemalloc", Engine::LibFuzzer),
            slot(Target::AllocOps, "system", Engine::Honggfuzz),
        ];
        assert!(!jemalloc(&both));
    }
}
