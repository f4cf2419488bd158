//! A program's own allocations, recorded and replayed (`allocsoak trace`):
//! [`record`] runs a command under the recorder ([`RECORDER`], an
//! `LD_PRELOAD` library built here from its C source), one trace file per
//! process; [`replay`] replays a trace under allocators, each in a drift
//! replay process of its own (`drift --trace`), with a workload's checks,
//! and sets each one's memory beside the recorded program's.

use std::hash::{Hash, Hasher};
use std::io::Read;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{bail, Context, Result};
use shadow::op::trace::Trace;

use crate::engines::project::{Part, Project};

/// The recorder's C source (`trace_record.c`).
pub const RECORDER: &str = include_str!("trace_record.c");

/// The recorder library, built from [`RECORDER`] once per source (its
/// hash names it) under the project's work dir.
pub fn recorder(project: &Project) -> Result<PathBuf> {
    let dir = project.work_dir("trace");
    std::fs::create_dir_all(&dir).with_context(|| format!("failed to create {}", dir.display()))?;
    // As the project names the harness's coverage cfg (`Project`): a
    // hash that needs only to change with the source.
    let mut hasher = std::collections::hash_map::DefaultHasher::new();
    RECORDER.hash(&mut hasher);
    let hash = hasher.finish();
    let lib = dir.join(format!("record-{hash:016x}.so"));
    if lib.is_file() {
        return Ok(lib);
    }
    let source = dir.join("trace_record.c");
    crate::foundation::state::write_atomic(&source, RECORDER.as_bytes())?;
    let tmp = dir.join(format!("record-{hash:016x}.so.tmp"));
    let out = Command::new("cc")
        .args(["-O2", "-shared", "-fPIC", "-o"])
        .arg(&tmp)
        .arg(&source)
        .arg("-lpthread")
        .output()
        .context("failed to run cc to build the recorder; install a C compiler (`just setup`)")?;
    if !out.status.success() {
        bail!(
            "building the recorder failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    std::fs::rename(&tmp, &lib).with_context(|| format!("failed to rename {}", tmp.display()))?;
    Ok(lib)
}

/// One process's trace a recording left.
pub struct Recorded {
    pub path: PathBuf,
    pub bytes: u64,
    /// Whether the process ended without its exit handlers (killed, or
    /// `_exit`): the file holds what it wrote before.
    pub cut: bool,
}

/// Runs `command` with the recorder loaded, each of its processes writing
/// its trace into `out` (created; it must hold no trace yet), at most
/// `max_mb` MiB per process. Returns the command's exit status, the
/// traces, biggest first, and the seconds it took.
pub fn record(
    project: &Project,
    out: &Path,
    max_mb: u64,
    command: &[String],
) -> Result<(i32, Vec<Recorded>, f64)> {
    let Some((program, args)) = command.split_first() else {
        bail!("no command to record; give it after `--`: allocsoak trace record -- make -j2");
    };
    if traces_in(out)?.next().is_some() {
        bail!(
            "{} already holds traces; record into a new folder (--out), nothing there is deleted",
            out.display()
        );
    }
    std::fs::create_dir_all(out).with_context(|| format!("failed to create {}", out.display()))?;
    let lib = recorder(project)?;
    let out = out.canonicalize()?;
    let preload = match std::env::var("LD_PRELOAD") {
        Ok(theirs) if !theirs.is_empty() => format!("{} {theirs}", lib.display()),
        _ => lib.display().to_string(),
    };
    let started = Instant::now();
    let status = Command::new(program)
        .args(args)
        .env("LD_PRELOAD", preload)
        .env("ALLOCSOAK_TRACE_DIR", &out)
        .env("ALLOCSOAK_TRACE_MAX_MB", max_mb.to_string())
        .status()
        .with_context(|| format!("failed to run `{program}`"))?;
    let secs = started.elapsed().as_secs_f64();
    let code = status
        .code()
        .unwrap_or_else(|| 128 + status.signal().unwrap_or(0));
    let mut traces: Vec<Recorded> = traces_in(&out)?
        .map(|path| {
            let bytes = std::fs::metadata(&path).map_or(0, |m| m.len());
            let cut = path.extension().is_some_and(|e| e == "part");
            Recorded { path, bytes, cut }
        })
        .collect();
    traces.sort_by_key(|t| std::cmp::Reverse(t.bytes));
    Ok((code, traces, secs))
}

/// The trace files in `dir` (none when it does not exist).
fn traces_in(dir: &Path) -> Result<impl Iterator<Item = PathBuf>> {
    let entries = match std::fs::read_dir(dir) {
        Ok(entries) => entries.flatten().map(|e| e.path()).collect(),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        Err(e) => return Err(e).with_context(|| format!("failed to read {}", dir.display())),
    };
    Ok(entries.into_iter().filter(|p| {
        let name = p.file_name().unwrap_or_default().to_string_lossy();
        name.ends_with(".trace") || name.ends_with(".trace.part")
    }))
}

/// Reads a trace file; the error names the file and what is wrong.
pub fn read(path: &Path) -> Result<Trace> {
    let mut data = Vec::new();
    std::fs::File::open(path)
        .and_then(|mut f| f.read_to_end(&mut data))
        .with_context(|| format!("failed to read {}", path.display()))?;
    Trace::parse(&data).map_err(|e| anyhow::anyhow!("{}: {e}", path.display()))
}

/// What one allocator did with a trace.
pub struct Replayed {
    pub allocator: String,
    pub secs: f64,
    /// Calls made.
    pub calls: u64,
    /// The most resident bytes the replay added, less its own table of
    /// blocks (`drift --peak`'s `peak bytes=`).
    pub peak: u64,
    /// The median of the same samples (`steady bytes=`): what the work
    /// holds while it runs.
    pub steady: u64,
    /// The same samples over the run, evenly spaced.
    pub curve: drift::Curve,
    /// `None` when it ran clean; else the violation's line or why it
    /// ended.
    pub failed: Option<String>,
    /// The replay's memory at each reading the recorder took (traces
    /// only).
    pub marks: Vec<drift::Mark>,
}

/// A replay's memory beside the recorded program's, each counted from
/// the first reading both have (the recorded program's includes its
/// code; the replay's, its table of blocks).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Beside {
    /// Bytes the recorded program grew by its last reading.
    pub recorded: i64,
    /// Bytes the replay grew by the same call.
    pub replayed: i64,
    /// The call where the two growths were furthest apart, and by how
    /// much the replay's was above the recorded one's there (below when
    /// negative).
    pub apart_at: u64,
    pub apart: i64,
}

impl Replayed {
    /// The replay's memory beside the recording's; `None` with fewer than
    /// two readings (a trace under 65,536 calls).
    pub fn beside(&self) -> Option<Beside> {
        let (first, last) = (self.marks.first()?, self.marks.last()?);
        if self.marks.len() < 2 {
            return None;
        }
        let growth = |m: &drift::Mark| {
            (
                m.recorded as i64 - first.recorded as i64,
                m.replayed as i64 - first.replayed as i64,
            )
        };
        let (recorded, replayed) = growth(last);
        let (apart_at, apart) = self
            .marks
            .iter()
            .map(|m| {
                let (r, p) = growth(m);
                (m.calls, p - r)
            })
            .max_by_key(|(_, d)| d.abs())?;
        Some(Beside {
            recorded,
            replayed,
            apart_at,
            apart,
        })
    }
}

/// Work a drift replay process runs once under an allocator.
#[derive(Clone, Debug)]
pub enum Work {
    /// A recorded trace.
    Trace(PathBuf),
    /// A `workload` target input (a seed, or a text program).
    Workload(PathBuf),
}

impl Work {
    pub fn path(&self) -> &Path {
        match self {
            Work::Trace(p) | Work::Workload(p) => p,
        }
    }
}

/// Replays the trace at `path` under each of `allocators`, each in a
/// fresh drift replay process (built first when it is not).
pub fn replay(project: &Project, path: &Path, allocators: &[String]) -> Result<Vec<Replayed>> {
    let path = path
        .canonicalize()
        .with_context(|| format!("no trace at {}", path.display()))?;
    let work = Work::Trace(path);
    let drift = drift_binary(project)?;
    allocators.iter().map(|a| run(&drift, &work, a)).collect()
}

/// The drift replay binary, built when it is not.
pub fn drift_binary(project: &Project) -> Result<PathBuf> {
    let drift = project.drift_binary();
    if !project.build_part(Part::Drift, None)? || !drift.is_file() {
        bail!("the drift replay binary did not build; see cargo's output above");
    }
    Ok(drift)
}

/// Runs `work` once under `allocator` in a drift replay process of its
/// own (`drift --peak --ops 1`).
pub fn run(drift: &Path, work: &Work, allocator: &str) -> Result<Replayed> {
    let started = Instant::now();
    let mut cmd = Command::new(drift);
    match work {
        Work::Trace(_) => cmd.arg("--trace"),
        Work::Workload(_) => cmd.args(["--target", "workload"]),
    };
    let mut child = cmd
        .args(["--peak", "--ops", "1", "--allocator", allocator])
        .arg(work.path())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("failed to run {}", drift.display()))?;
    let read_all = |mut from: Box<dyn Read + Send>| {
        std::thread::spawn(move || {
            let mut text = Vec::new();
            let _ = from.read_to_end(&mut text);
            String::from_utf8_lossy(&text).into_owned()
        })
    };
    let stdout = read_all(Box::new(child.stdout.take().expect("piped")));
    let stderr = read_all(Box::new(child.stderr.take().expect("piped")));
    let success = child.wait()?.success();
    let secs = started.elapsed().as_secs_f64();
    let stdout = stdout.join().unwrap_or_default();
    let stderr = stderr.join().unwrap_or_default();
    let calls = stdout
        .lines()
        .rev()
        .find_map(drift::Reading::parse)
        .map_or(0, |r| r.ops);
    let figure = |name: &str| {
        stdout
            .lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or(0)
    };
    let (peak, steady) = (figure("peak bytes="), figure("steady bytes="));
    let marks = stdout.lines().filter_map(drift::Mark::parse).collect();
    let curve = stdout
        .lines()
        .find_map(drift::Curve::parse)
        .unwrap_or_default();
    let failed = (!success).then(|| {
        stderr
            .lines()
            .find(|l| l.contains("allocsoak violation:") || l.contains("ERROR:"))
            .or_else(|| stderr.lines().rfind(|l| !l.trim().is_empty()))
            .unwrap_or("ended without a word")
            .to_string()
    });
    Ok(Replayed {
        allocator: allocator.to_string(),
        secs,
        calls,
        peak,
        steady,
        curve,
        failed,
        marks,
    })
}
