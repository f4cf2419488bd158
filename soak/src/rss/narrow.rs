//! Which programs drive a drift: delta debugging over the replay set
//! (`triage::ddmin`), each subset replayed in a fresh process for a fixed
//! number of ops and its growth measured.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use drift::{Reading, Trend, TrendConfig, Verdict};

use super::watch::{Watch, OVER_RSS_LIMIT};
use crate::foundation::config::Series;

/// Growth past the warm-up, in bytes, that a measured replay must show
/// at the least (its fit's `min_growth_bytes`) to drift: 16 pages. A
/// measured replay is short, so a page or two of wobble alone would read
/// as a steep slope (4 KiB over 37,500 ops is 109 B/kop), and narrowing
/// would keep a program that leaks nothing.
const NOISE_FLOOR: f64 = 64.0 * 1024.0;

/// Readings a measured replay takes over its ops: 30 past the warm-up
/// quarter, well above the fit's `min_points`.
const READINGS: u64 = 40;

/// What one measured replay found.
pub struct Measured {
    /// Retained memory grew past the line, or the process went over its
    /// RSS limit.
    pub drifts: bool,
    pub over_limit: bool,
    /// The fit of its readings (warm-up the first quarter of its ops).
    pub trend: Trend,
    pub readings: Vec<Reading>,
}

/// Replays with `cmd` (a `drift` command, inputs given) for `ops` ops,
/// reading every [`READINGS`]th of them (by ops, not time: a loaded
/// machine gets as many readings as a fast one), and fits the growth against `threshold` bytes per
/// 1,000 ops and [`NOISE_FLOOR`]. A `stop` set meanwhile kills the replay (it then does not
/// drift).
///
/// Readings come between programs, so a replay of a few large ones (a
/// `workload`'s, each a million calls or more) may end with too few for a
/// verdict: it is run again, four times as long, up to [`LONGER`] times.
pub fn measure(
    cmd: Command,
    ops: u64,
    threshold: f64,
    stop: Option<&AtomicBool>,
) -> Result<Measured> {
    let mut ops = ops;
    let mut measured = measure_once(copy(&cmd), ops, threshold, stop)?;
    for _ in 0..LONGER {
        if measured.drifts || measured.trend.verdict != Verdict::TooFewSamples {
            break;
        }
        ops = ops.saturating_mul(4);
        measured = measure_once(copy(&cmd), ops, threshold, stop)?;
    }
    Ok(measured)
}

/// Times a replay too short for a verdict is run again, longer.
const LONGER: usize = 2;

/// A new command with `cmd`'s program, arguments and environment.
fn copy(cmd: &Command) -> Command {
    let mut copy = Command::new(cmd.get_program());
    copy.args(cmd.get_args());
    for (k, v) in cmd.get_envs() {
        match v {
            Some(v) => copy.env(k, v),
            None => copy.env_remove(k),
        };
    }
    if let Some(dir) = cmd.get_current_dir() {
        copy.current_dir(dir);
    }
    copy
}

fn measure_once(
    mut cmd: Command,
    ops: u64,
    threshold: f64,
    stop: Option<&AtomicBool>,
) -> Result<Measured> {
    let mut child = cmd
        .arg(format!("--ops={ops}"))
        .arg(format!("--every-ops={}", (ops / READINGS).max(1)))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("failed to run the drift replay binary; run `allocsoak build`")?;
    // The pipes are read on threads of their own, so a full one never
    // blocks the replay while this one waits.
    let mut stdout = child.stdout.take().expect("piped");
    let mut stderr = child.stderr.take().expect("piped");
    let out_reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stdout, &mut text);
        text
    });
    let err_reader = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = std::io::Read::read_to_end(&mut stderr, &mut text);
        text
    });
    let status = loop {
        if let Some(status) = child.try_wait()? {
            break status;
        }
        if stop.is_some_and(|s| s.load(Ordering::Relaxed)) {
            let _ = child.kill();
            child.wait()?;
            anyhow::bail!("stopped");
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let out = std::process::Output {
        status,
        stdout: out_reader.join().unwrap_or_default(),
        stderr: err_reader.join().unwrap_or_default(),
    };
    let readings: Vec<Reading> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter_map(Reading::parse)
        .collect();
    let over_limit = out.status.code() == Some(OVER_RSS_LIMIT);
    if !out.status.success() && !over_limit {
        anyhow::bail!(
            "the drift replay failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
                .lines()
                .last()
                .unwrap_or("")
        );
    }
    let samples: Vec<drift::Sample> = readings.iter().map(Reading::sample).collect();
    let config = TrendConfig {
        threshold,
        warmup_fraction: 0.25,
        warmup_ops: ops / 4,
        min_ops: ops / 4,
        min_points: 8,
        min_growth_bytes: NOISE_FLOOR,
        ..TrendConfig::default()
    };
    let trend = drift::trend(&samples, &config);
    Ok(Measured {
        drifts: over_limit || trend.verdict == Verdict::Drifts,
        over_limit,
        trend,
        readings,
    })
}

/// The smallest set of programs found that still drifts.
pub struct Narrowed {
    pub programs: Vec<PathBuf>,
    /// Programs in the replay set.
    pub of: usize,
    pub secs: f64,
    pub replays: usize,
    /// False when time ran out.
    pub complete: bool,
    /// The whole set did not drift in a replay of `narrow_ops`: a leak
    /// too slow to show in one (or one every program drives); every
    /// program is kept.
    pub too_slow: bool,
    /// Why the first narrowing replay that failed did (a violation, a
    /// crash): such a replay counts as not drifting, and narrowing goes on.
    pub failed: Option<String>,
}

impl Narrowed {
    /// `967 programs to 2 in 81 s (23 replays)`.
    pub fn summary(&self) -> String {
        if self.too_slow {
            return format!(
                "all {} programs kept: together they did not drift within one short replay, so none could be told apart ({:.0} s)",
                self.of, self.secs
            );
        }
        let mut note = if self.complete {
            String::new()
        } else {
            ", not to the end".to_string()
        };
        if let Some(why) = &self.failed {
            note.push_str(&format!("; a replay failed: {why}"));
        }
        format!(
            "{} programs to {} in {:.0} s ({} replays{note})",
            self.of,
            self.programs.len(),
            self.secs,
            self.replays
        )
    }
}

/// Narrows the series' replay set down to the programs that drive its
/// drift, within `narrow_secs`.
pub fn narrow(w: &Watch, series: &Series) -> Result<Narrowed> {
    let start = Instant::now();
    let deadline = start + Duration::from_secs(w.config.drift.narrow_secs);
    let programs = list(&w.inputs(series))?;
    let drifts = |subset: &[PathBuf]| -> Result<bool> {
        let cmd = w.command(series, subset, 1.0);
        let ops = w.config.drift.replay_ops(&series.work());
        let line = w.config.drift.threshold;
        Ok(measure(cmd, ops, line, Some(w.stop))?.drifts)
    };
    let mut replays = 1;
    // A replay that fails (a violation the replay does not get past, the
    // process over its limit in a way `measure` cannot read) does not
    // drift; the first failure is kept for the group's page.
    let mut failed = None;
    let mut drifts_or_note = |subset: &[PathBuf]| match drifts(subset) {
        Ok(d) => d,
        Err(e) => {
            failed.get_or_insert_with(|| format!("{e:#}"));
            false
        }
    };
    // `None`: the soak stopped the replay.
    let whole = drifts_or_note(&programs);
    let whole = (!w.stopping()).then_some(whole);
    if whole != Some(true) {
        // Nothing to narrow (or no time to): the group keeps every program.
        return Ok(Narrowed {
            of: programs.len(),
            programs,
            secs: start.elapsed().as_secs_f64(),
            replays,
            complete: whole.is_some(),
            too_slow: whole == Some(false) && failed.is_none(),
            failed,
        });
    }
    let mut out_of_time = false;
    let found = triage::ddmin::ddmin(&programs, |subset| {
        if w.stopping() || Instant::now() >= deadline {
            out_of_time = true;
            return false;
        }
        replays += 1;
        drifts_or_note(subset)
    });
    Ok(Narrowed {
        of: programs.len(),
        programs: found,
        secs: start.elapsed().as_secs_f64(),
        replays,
        complete: !out_of_time,
        too_slow: false,
        failed,
    })
}

/// The program files in `folders` (missing folders are empty; a file,
/// such as a trace series' trace, is itself), sorted.
fn list(folders: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut files: Vec<PathBuf> = folders.iter().filter(|f| f.is_file()).cloned().collect();
    for folder in folders.iter().filter(|f| f.is_dir()) {
        for entry in std::fs::read_dir(folder)
            .with_context(|| format!("failed to list {}", folder.display()))?
        {
            let path = entry?.path();
            if path.is_file() {
                files.push(path);
            }
        }
    }
    files.sort_by(|a, b| name(a).cmp(name(b)).then(a.cmp(b)));
    Ok(files)
}

fn name(p: &Path) -> &std::ffi::OsStr {
    p.file_name().unwrap_or_default()
}
