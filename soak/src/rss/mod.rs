//! The memory half of the soak: RSS drift workers.
//!
//! Each series (a workload × an allocator, a slot with engine `drift`) has
//! a thread that runs the plain `drift` replay binary over the workload's
//! persistent corpus and seeds, stores every reading it prints as it comes
//! ([`series`]), thins old ones, and fits the series after each reading.
//! Retained memory that grows with ops (the fit's verdict, or a process
//! over `rss_limit_mb`) is filed as an `rss-drift` group ([`finding`]),
//! its culprit programs narrowed down ([`narrow`]); a violation the replay
//! hits is filed through the crash pipeline like a fuzzer's. A restarted
//! process is a new segment of the same series, so a series spans soaks.
//! `allocsoak drift` prints the series ([`table`]).

pub mod finding;
pub mod narrow;
pub mod repro;
pub mod series;
pub mod table;
mod watch;

pub use watch::Watch;
use watch::OVER_RSS_LIMIT;

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use drift::{Reading, Verdict};

use crate::engines::project::Build;
use crate::foundation::config::Series;
use crate::foundation::lock::lock;
use crate::pipeline::intake::{self, Source};

/// How often a series' old points are thinned.
const THIN_EVERY: Duration = Duration::from_secs(600);
/// The wait before a replay process that failed is started again.
const BACKOFF: Duration = Duration::from_secs(30);

/// How a replay process ended.
enum End {
    /// The soak stopped it.
    Stop,
    /// It ran `refresh_minutes`: the next one takes in the corpus's gains.
    Refresh,
    /// Its retained memory drifts (the fit's verdict), or it went over
    /// its RSS limit (`None`).
    Drifts(Option<drift::Trend>),
    /// A violation in the program at this path (from its log).
    Violation(Option<PathBuf>),
    /// It exited or died otherwise.
    Other(String),
}

/// Watches one series until the soak stops: replay processes one after
/// another, each a segment. A series with an open `rss-drift` group is
/// not run again (its finding stands until `triage verify` says fixed).
pub fn watch(w: &Watch, series: &Series) -> Result<()> {
    let slot = w
        .lock_store()
        .slot(&series.work(), &series.allocator, "drift", 1.0)?;
    let group_id = report::Signature::rss_drift(&series.label()).id();
    let mut last_thin = Instant::now();
    while !w.stopping() {
        let open = w
            .lock_store()
            .group(&group_id)?
            .is_some_and(|g| g.status != "fixed");
        if open {
            return Ok(());
        }
        let segment = series::start_segment(&w.lock_store(), slot.id, w.run_id)?;
        let log = w
            .state
            .logs()
            .join(format!("drift-{}-{segment}.log", slot.id));
        let end = run_segment(w, series, slot.id, segment, &log, &mut last_thin)?;
        let outcome = match &end {
            End::Stop => "stop".to_string(),
            End::Refresh => "refresh".to_string(),
            End::Drifts(Some(_)) => "drifts".to_string(),
            End::Drifts(None) => "rss-limit".to_string(),
            End::Violation(_) => "violation".to_string(),
            End::Other(why) => why.clone(),
        };
        series::end_segment(&w.lock_store(), segment, &outcome)?;
        match end {
            End::Stop | End::Refresh => {}
            End::Drifts(trend) => {
                let id = finding::file(w, series, slot.id, trend.as_ref())?;
                println!("drift {}: filed {id} ({outcome})", series.label());
                lock(w.filed).push(id);
            }
            End::Violation(program) => {
                let files = (tolerate_file(w, slot.id), history_file(w, slot.id));
                file_violation(w, series, program.as_deref(), &log, &files)?;
                pause(w, BACKOFF);
            }
            End::Other(why) => {
                eprintln!(
                    "allocsoak: drift {} replay {why}; its log: {}",
                    series.label(),
                    log.display()
                );
                pause(w, BACKOFF);
            }
        }
    }
    Ok(())
}

/// One replay process: readings stored as they come, the series fitted
/// after each.
fn run_segment(
    w: &Watch,
    series: &Series,
    slot_id: i64,
    segment: i64,
    log: &Path,
    last_thin: &mut Instant,
) -> Result<End> {
    let tolerate = tolerate_file(w, slot_id);
    let keys = w.lock_store().tolerated_keys(&series.allocator)?;
    let text: String = keys.iter().map(|(_, k)| format!("{k}\n")).collect();
    crate::foundation::state::write_atomic(&tolerate, text.as_bytes())?;
    let mut cmd = w.command(series, &w.inputs(series), w.share);
    cmd.arg(format!("--interval={}", w.config.drift.interval_secs));
    if !keys.is_empty() {
        cmd.env("ALLOCSOAK_TOLERATE", &tolerate);
    }
    cmd.env("ALLOCSOAK_HISTORY", history_file(w, slot_id));
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(log)?)
        .spawn()
        .with_context(|| {
            format!(
                "failed to run {}; run `allocsoak build`",
                w.project.drift_binary().display()
            )
        })?;
    let lines = forward_lines(&mut child);
    let started = Instant::now();
    let refresh = Duration::from_secs_f64(w.config.drift.refresh_minutes.max(1.0) * 60.0);
    loop {
        match lines.recv_timeout(Duration::from_millis(250)) {
            Ok(line) => {
                let Some(reading) = Reading::parse(&line) else {
                    continue;
                };
                let mut store = w.lock_store();
                series::add_reading(&store, segment, &reading)?;
                if last_thin.elapsed() >= THIN_EVERY {
                    series::thin(&mut store, slot_id, crate::foundation::store::now() as u64)?;
                    *last_thin = Instant::now();
                }
                let points = series::fitted(&store, slot_id, &series.label())?;
                drop(store);
                let trend =
                    drift::trend_downsampled(&series::buckets(&points), &w.config.drift.trend());
                if trend.verdict == Verdict::Drifts {
                    end(&mut child);
                    return Ok(End::Drifts(Some(trend)));
                }
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                if w.stopping() {
                    end(&mut child);
                    return Ok(End::Stop);
                }
                if started.elapsed() >= refresh {
                    end(&mut child);
                    return Ok(End::Refresh);
                }
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let status = child.wait()?;
    if w.stopping() {
        return Ok(End::Stop);
    }
    Ok(match status.code() {
        Some(OVER_RSS_LIMIT) => End::Drifts(None),
        Some(1) => End::Violation(failed_program(log)),
        _ => End::Other(format!("ended ({status})")),
    })
}

/// The known bugs a series' replay gets past (`ALLOCSOAK_TOLERATE`).
fn tolerate_file(w: &Watch, slot_id: i64) -> PathBuf {
    w.state.logs().join(format!("drift-{slot_id}.tolerate"))
}

/// The ring of the programs a series' replay ran last (`ALLOCSOAK_HISTORY`),
/// for a violation that needs them.
fn history_file(w: &Watch, slot_id: i64) -> PathBuf {
    w.state.logs().join(format!("drift-{slot_id}.history"))
}

/// The child's stdout lines, from a thread of their own.
fn forward_lines(child: &mut Child) -> mpsc::Receiver<String> {
    let (tx, rx) = mpsc::channel();
    let stdout = child.stdout.take().expect("stdout is piped");
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    rx
}

/// Stops a replay process: SIGTERM, then SIGKILL if it lingers.
fn end(child: &mut Child) {
    // SAFETY: `kill` has no memory preconditions; the pid is our own child's, not yet
    // waited for, so it cannot have been reused.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    for _ in 0..50 {
        if let Ok(Some(_)) = child.try_wait() {
            return;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let _ = child.kill();
    let _ = child.wait();
}

fn pause(w: &Watch, how_long: Duration) {
    let until = Instant::now() + how_long;
    while Instant::now() < until && !w.stopping() {
        std::thread::sleep(Duration::from_millis(250));
    }
}

/// The program the replay's log says failed (`allocsoak drift: failed in <path>`).
fn failed_program(log: &Path) -> Option<PathBuf> {
    let text = std::fs::read_to_string(log).ok()?;
    text.lines()
        .rev()
        .find_map(|l| l.strip_prefix("allocsoak drift: failed in "))
        .map(PathBuf::from)
}

/// Files a violation the replay hit: its program, copied out of the
/// corpus, goes through the crash pipeline on the fuzz binary (which has
/// the sanitizer that sees most) with the programs run before it, like a
/// slice's artifact.
fn file_violation(
    w: &Watch,
    series: &Series,
    program: Option<&Path>,
    log: &Path,
    (tolerate, history): &(PathBuf, PathBuf),
) -> Result<()> {
    let Some(program) = program else {
        eprintln!(
            "allocsoak: drift {}: the replay failed without naming its program; its log: {}",
            series.label(),
            log.display()
        );
        return Ok(());
    };
    let artifact = w.state.logs().join(format!(
        "drift-artifact-{}",
        program
            .file_name()
            .map_or_else(|| "program".into(), |n| n.to_string_lossy().into_owned())
    ));
    crate::foundation::state::copy_atomic(program, &artifact)?;
    let slot = w
        .lock_store()
        .slot(series.target.name(), &series.allocator, "libfuzzer", 1.0)?;
    let binary = w
        .project
        .binary(Build::for_allocator(&series.allocator), series.target);
    let engine_log = std::fs::read_to_string(log).unwrap_or_default();
    let src = Source {
        target: series.target,
        allocator: &series.allocator,
        engine: "libfuzzer",
        slot_id: slot.id,
        slice_id: None,
        binary: &binary,
        tolerate: Some(tolerate),
        history: Some(history),
        timeout_secs: w.config.timeout_secs,
        rss_limit_mb: w.config.rss_limit_mb,
        budget: w.filing,
    };
    let filed = intake::file(
        w.state,
        w.store,
        &src,
        &intake::Artifact {
            path: &artifact,
            engine_log: &engine_log,
            shown: None,
        },
    )?;
    println!(
        "drift {}: violation filed as {}",
        series.label(),
        filed.group_id
    );
    if filed.new {
        lock(w.filed).push(filed.group_id);
    }
    Ok(())
}
