//! `allocsoak zoo`: every planted bug through its target with the real fuzz
//! binary, and the bundled correct allocators through every target as
//! controls. The proof that the oracle and the engine runs work. Each
//! bug's crash program is then minimized as intake minimizes a new
//! group's ([`crate::pipeline::minimize`]), and its op count printed before and after.
//!
//! [`soak_each`] runs each planted bug through a whole soak instead, and
//! counts what its user would read: crash groups per bug.

use ::zoo::Bug;
use anyhow::Result;
use report::Signature;
use shadow::Target;
use triage::replay::Replayer;

use crate::engines::harness::HarnessFiles;
use crate::engines::libfuzzer::{Outcome, Run};
use crate::engines::project::{Build, Project};
use crate::pipeline::minimize;

/// Correct allocators that must run clean under the same budget; `arena`
/// runs out of room on purpose, so its refusals must not read as `null`
/// nor its capacity as lost.
pub const CONTROLS: [&str; 5] = ["system", "glibc", "mimalloc", "jemalloc", "arena"];

/// One zoo run: a planted bug, or a control allocator on a target.
pub struct Case {
    pub target: Target,
    pub allocator: String,
    /// `None` for a control. Otherwise the bug and the kinds it may show as.
    pub bug: Option<Bug>,
    /// For a bug behind another: the tolerate pattern that gets past the
    /// first, as a soak's tolerate file does once it is filed.
    pub tolerate: Option<&'static str>,
}

impl Case {
    pub fn all() -> Vec<Case> {
        // A bug only the RSS drift workers or Miri see has no fuzz case
        // (see soak/tests/drift.rs and BENCHMARKS.md), nor the reference's.
        let fuzzable = Bug::ALL
            .into_iter()
            .filter(|b| !b.drift_only() && !b.miri_only() && !b.reference_only());
        let bugs = fuzzable.map(|bug| match bug.behind() {
            None => Case {
                target: bug.target(),
                allocator: format!("zoo:{}", bug.name()),
                bug: Some(bug),
                tolerate: None,
            },
            Some((first, pattern)) => Case {
                target: bug.target(),
                allocator: format!("zoo:{}+{}", first.name(), bug.name()),
                bug: Some(bug),
                tolerate: Some(pattern),
            },
        });
        let controls = Target::ALL.into_iter().flat_map(|target| {
            CONTROLS.into_iter().map(move |a| Case {
                target,
                allocator: a.to_string(),
                bug: None,
                tolerate: None,
            })
        });
        bugs.chain(controls).collect()
    }

    fn label(&self) -> String {
        match self.bug {
            Some(bug) => bug.name().to_string(),
            None => format!("control:{}", self.allocator),
        }
    }

    fn expected(&self) -> String {
        self.bug
            .map_or("none".to_string(), |b| b.expected_kinds().join("|"))
    }

    /// The bugs its allocator plants: two for a bug behind another.
    fn planted(&self) -> usize {
        match (self.bug, self.tolerate) {
            (None, _) => 0,
            (Some(_), None) => 1,
            (Some(_), Some(_)) => 2,
        }
    }

    /// Whether the outcome is what this case must produce.
    fn passes(&self, found: Option<&str>) -> bool {
        match (self.bug, found) {
            (None, found) => found.is_none(),
            (Some(bug), None) => !bug.must_crash(),
            (Some(bug), Some(kind)) => bug.expected_kinds().contains(&kind),
        }
    }
}

/// The budget of every case.
pub struct Budget {
    /// How long a control runs.
    pub secs: u64,
    /// How long a bug that must be found may take.
    pub bug_secs: u64,
    pub seed: u64,
    pub jobs: usize,
    /// How long each found bug's program is minimized.
    pub minimize_secs: u64,
}

/// Runs the cases, prints one line each and a summary; true when every bug
/// that must crash was found with its kind and no control reported anything.
pub fn run(project: &Project, cases: &[Case], budget: &Budget) -> Result<bool> {
    project.build(Build::Asan)?;
    let results = crate::running::scheduler::in_parallel(cases, budget.jobs, |case| {
        let dir = project.run_dir("zoo", &[case.target.name(), &case.label()]);
        let _ = std::fs::remove_dir_all(&dir); // scratch from an earlier zoo run
        let tolerate = case.tolerate.map(|pattern| {
            let file = dir.join("tolerate");
            std::fs::create_dir_all(&dir)
                .and_then(|_| std::fs::write(&file, format!("{pattern}\n")))
                .map(|_| file)
        });
        let run = Run {
            seed: budget.seed,
            // A bug that may go unfound (a leak LeakSanitizer
            // may miss) gets a control's time, not a bug's.
            secs: match case.bug {
                Some(bug) if bug.must_crash() => budget.bug_secs,
                _ => budget.secs,
            },
            files: HarnessFiles {
                tolerate: tolerate.transpose()?,
                ..Default::default()
            },
            ..Run::new(
                project,
                case.target,
                &case.allocator,
                dir.join("corpus"),
                dir,
            )
        };
        let mut outcome = run.run()?;
        if outcome.kind.is_none() {
            outcome.kind = kind_from_replay(case, &run, &outcome)?;
        }
        let ops = match outcome.kind {
            Some(_) => minimized_ops(case, &run, &outcome, budget.minimize_secs)
                .unwrap_or_else(|e| format!("{e:#}")),
            None => String::new(),
        };
        print_line(case, &outcome, &ops);
        Ok::<_, anyhow::Error>(outcome)
    });
    let mut found = 0;
    let mut false_alarms = 0;
    let mut ok = true;
    for (case, outcome) in cases.iter().zip(results) {
        let outcome = outcome?;
        let kind = outcome.kind.as_deref();
        if !case.passes(kind) {
            ok = false;
            eprintln!(
                "zoo: {} on {} failed: expected {}, found {} after {:.0} s; log: {}",
                case.label(),
                case.target,
                case.expected(),
                kind.unwrap_or("none"),
                outcome.secs,
                outcome.log.display()
            );
            let log = std::fs::read_to_string(&outcome.log).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            for line in &lines[lines.len().saturating_sub(12)..] {
                eprintln!("  | {line}");
            }
        }
        match case.bug {
            Some(bug) => found += kind.is_some_and(|k| bug.expected_kinds().contains(&k)) as usize,
            None => false_alarms += kind.is_some() as usize,
        }
    }
    let bugs = cases.iter().filter(|c| c.bug.is_some()).count();
    println!("zoo: {found}/{bugs} found, {false_alarms} false alarms");
    Ok(ok)
}

/// What one bug's soak filed: its groups' kinds (one entry per group)
/// and the crashes they hold.
struct Filed {
    kinds: Vec<String>,
    crashes: i64,
}

/// Runs every bug case (controls are `run`'s) as a soak of `secs` on one
/// core, in a fresh state dir of its own, with no drift workers; prints
/// the groups each filed and how many bugs it planted, then a summary.
/// True when every bug was filed as exactly one group (a leak
/// LeakSanitizer may miss, as none or one).
pub fn soak_each(project: &Project, cases: &[Case], secs: u64, jobs: usize) -> Result<bool> {
    // `allocsoak soak` runs the binaries it finds; it does not build them.
    project.build(Build::Asan)?;
    let exe = std::env::current_exe()?;
    let results = crate::running::scheduler::in_parallel(cases, jobs, |case| {
        if case.bug.is_none() {
            return Ok::<_, anyhow::Error>(None);
        }
        let state = project.run_dir("zoo-soak", &[case.target.name(), &case.label()]);
        let _ = std::fs::remove_dir_all(&state); // an earlier run's
        let out = std::process::Command::new(&exe)
            .args(["soak", "--state"])
            .arg(&state)
            .args([
                "--target",
                case.target.name(),
                "--allocator",
                &case.allocator,
            ])
            .args([
                "--jobs",
                "1",
                "--drift-share",
                "0",
                "--progress-secs",
                "600",
            ])
            .args(["--duration", &secs.to_string()])
            .output()?;
        if !out.status.success() {
            anyhow::bail!(
                "the soak of {} failed ({}): {}",
                case.allocator,
                out.status,
                String::from_utf8_lossy(&out.stderr).trim()
            );
        }
        let store = crate::foundation::store::Store::open_read_only(&state.join("store.sqlite"))?;
        let groups = store.groups()?;
        let filed = Filed {
            kinds: groups.iter().map(|g| g.kind.clone()).collect(),
            crashes: groups.iter().map(|g| g.count).sum(),
        };
        println!(
            "zoo-soak {} {} planted={} groups={} kinds={} crashes={}",
            case.label(),
            case.target,
            case.planted(),
            filed.kinds.len(),
            filed.kinds.join(","),
            filed.crashes
        );
        Ok(Some(filed))
    });
    let (mut soaks, mut groups, mut planted, mut ok) = (0, 0, 0, true);
    for (case, filed) in cases.iter().zip(results) {
        let Some(filed) = filed? else { continue };
        let bug = case.bug.expect("only bugs soak");
        let expected = case.planted();
        let leak_missed = !bug.must_crash() && filed.kinds.len() + 1 == expected;
        if filed.kinds.len() != expected && !leak_missed {
            ok = false;
            eprintln!(
                "zoo-soak: {} on {} filed {} groups ({}) for {expected} planted bugs",
                case.label(),
                case.target,
                filed.kinds.len(),
                filed.kinds.join(", ")
            );
        }
        soaks += 1;
        groups += filed.kinds.len();
        planted += expected;
    }
    println!("zoo-soak: {groups} groups for {planted} planted bugs in {soaks} soaks of {secs} s");
    Ok(ok)
}

fn print_line(case: &Case, o: &Outcome, ops: &str) {
    println!(
        "zoo {} {} expected={} found={} secs={:.1}{}{ops}",
        case.label(),
        case.target,
        case.expected(),
        o.kind.as_deref().unwrap_or("none"),
        o.secs,
        if ops.is_empty() { "" } else { " ops=" },
    );
}

/// Replays a case's inputs on its run's binary.
fn replayer<'a>(case: &'a Case, run: &'a crate::engines::libfuzzer::Run) -> Replayer<'a> {
    Replayer {
        binary: &run.binary,
        allocator: &case.allocator,
        tolerate: run.files.tolerate.as_deref(),
        timeout_secs: 20,
        rss_limit_mb: 2048,
        budget: Default::default(),
    }
}

/// The kind of a crash whose log names none, from replays of its
/// artifact, as intake signs it: a report on a thread running its
/// thread-local destructors (an allocator's exit hook) can end the
/// process before its text reaches the log. `None` without an artifact
/// or when three replays do not reproduce it.
fn kind_from_replay(
    case: &Case,
    run: &crate::engines::libfuzzer::Run,
    o: &Outcome,
) -> Result<Option<String>> {
    let dir = o.log.parent().expect("the log is in the run's folder");
    let Some(artifact) = crate::engines::libfuzzer::artifacts(dir)?
        .into_iter()
        .next()
    else {
        return Ok(None);
    };
    let replayer = replayer(case, run);
    let slot = format!("{}/{}", case.target, case.allocator);
    for _ in 0..3 {
        let replay = replayer.replay(&[artifact.as_path()], true)?;
        if let Some(sig) = replay.signature(&slot) {
            return Ok(Some(sig.kind));
        }
    }
    Ok(None)
}

/// The crash program's op count before and after minimizing (`97->2 in
/// 3.1 s`), or why it stayed (`4 (reproduces only after earlier inputs)`).
fn minimized_ops(
    case: &Case,
    run: &crate::engines::libfuzzer::Run,
    o: &Outcome,
    secs: u64,
) -> Result<String> {
    let dir = o.log.parent().expect("the log is in the run's folder");
    let Some(artifact) = crate::engines::libfuzzer::artifacts(dir)?
        .into_iter()
        .next()
    else {
        return Ok("none (no artifact)".into());
    };
    let ops = crate::pipeline::program::read_program(case.target, &artifact)?
        .ops
        .len();
    let log = std::fs::read_to_string(&o.log)?;
    let slot = format!("{}/{}", case.target, case.allocator);
    if Signature::from_log(&log, &slot).is_none() {
        return Ok(format!("{ops} (unsigned)"));
    }
    let replayer = replayer(case, run);
    // Signed as intake signs it: the replay's record (and code path).
    let inputs = [artifact.as_path()];
    let Some(sig) = replayer.replay(&inputs, true)?.signature(&slot) else {
        return Ok(format!("{ops} (reproduces only after earlier inputs)"));
    };
    let crash = minimize::Failing {
        target: case.target,
        slot: &slot,
        before: &[],
        input: &artifact,
        sig: &sig,
        log: &log,
    };
    let m = minimize::minimize(
        &replayer,
        &crash,
        dir,
        &triage::budget::Budget {
            until: Some(std::time::Instant::now() + std::time::Duration::from_secs(secs)),
            stop: None,
        },
    )?;
    Ok(match m {
        Some(m) => format!("{}->{} in {:.1}s", m.ops_before, m.ops_after, m.secs),
        None => format!("{ops}->{ops}"),
    })
}
