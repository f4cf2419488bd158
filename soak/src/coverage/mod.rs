//! `allocsoak coverage`: which of an allocator's own code a soak's corpora
//! ever ran.
//!
//! The fuzz targets are built once more with the toolchains' source-based
//! coverage (`-C instrument-coverage` for Rust, clang's
//! `-fprofile-instr-generate -fcoverage-mapping` for C: [`Project::build_coverage`]).
//! Each target's persistent corpus and its seeds run once per allocator,
//! `llvm-profdata` merges the profiles, and `llvm-cov` reports on the
//! allocator's files alone ([`sources`]): its HTML, and a summary
//! ([`summary`]) of the same export, so the numbers are `llvm-cov`'s.
//!
//! ```text
//! <state>/coverage/COVERAGE.md          the summary, per allocator and file
//! <state>/coverage/summary.json         the same, typed
//! <state>/coverage/html/<allocator>/    llvm-cov's HTML of its sources
//! <state>/coverage/<allocator>.profdata the merged profile the two read
//! <state>/coverage/history.json         every report's totals: the dashboard's chart
//! ```
//! The folder is made beside the old one and renamed over it.

mod allocator;
pub mod sources;
pub mod summary;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::{bail, Context, Result};
use shadow::Target;

use crate::engines::project::{runs_jemalloc, Project};
use crate::foundation::state::StateDir;
use crate::foundation::store::Store;
use allocator::Covering;
pub use summary::Coverage;

/// What to cover: the state dir whose corpora run, which allocators
/// (default: every allocator its slots ran) and targets (default: those
/// the allocator's slots ran, else all).
pub struct Request<'a> {
    pub state: &'a Path,
    pub allocators: Vec<String>,
    pub targets: Vec<Target>,
}

/// One allocator's coverage and where its report is.
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Covered {
    pub allocator: String,
    pub coverage: Coverage,
    /// The folders of its sources the report is limited to.
    pub roots: Vec<PathBuf>,
    /// Inputs run, and those whose process failed (their coverage lost).
    pub inputs: usize,
    pub failed: usize,
    /// The HTML report's index, inside the coverage folder.
    pub html: PathBuf,
    /// The merged profile and the binaries whose mapping reads it: what
    /// `llvm-cov` takes to report on the same run.
    pub profdata: PathBuf,
    pub objects: Vec<PathBuf>,
}

/// What a coverage run made (`summary.json`).
#[derive(serde::Serialize, serde::Deserialize)]
pub struct Report {
    pub dir: PathBuf,
    pub allocators: Vec<Covered>,
    /// Allocators with nothing to report on, and why.
    pub skipped: Vec<(String, String)>,
}

/// One allocator's totals in one report: a point of the dashboard's
/// chart of coverage over the soak's days.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Point {
    /// Unix seconds.
    pub at: i64,
    pub allocator: String,
    pub totals: summary::Measures,
}

/// The last report of `state`, if one was made.
pub fn last(state: &StateDir) -> Result<Option<Report>> {
    read_json(&state.coverage().join("summary.json"))
}

/// Every report's totals, oldest first.
pub fn history(state: &StateDir) -> Result<Vec<Point>> {
    Ok(read_json(&state.coverage().join("history.json"))?.unwrap_or_default())
}

fn read_json<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>> {
    match std::fs::read(path) {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .with_context(|| format!("{} is not allocsoak's; move it aside", path.display())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("failed to read {}", path.display())),
    }
}

/// llvm-cov and llvm-profdata of the LLVM the nightly rustc uses, whose
/// profile format both sides of the build write.
struct Tools {
    cov: String,
    profdata: String,
}

impl Tools {
    fn find() -> Result<Tools> {
        let major = crate::engines::project::llvm_major()?;
        let tool = |name: &str| -> Result<String> {
            let path = format!("{name}-{major}");
            match Command::new(&path).arg("--version").output() {
                Ok(o) if o.status.success() => Ok(path),
                _ => bail!("{path} not found: nightly rustc uses LLVM {major}; install it with `just setup` (apt-get install llvm-{major})"),
            }
        };
        Ok(Tools {
            cov: tool("llvm-cov")?,
            profdata: tool("llvm-profdata")?,
        })
    }
}

/// Builds, runs and reports, writing `<state>/coverage/`.
pub fn run(project: &Project, req: &Request) -> Result<Report> {
    let state = StateDir::open_to_read(req.state)?;
    let store = Store::open_read_only(&state.store())?;
    let slots = ran(&store)?;
    let allocators = match req.allocators.is_empty() {
        true => slots.iter().map(|(a, _)| a.clone()).collect(),
        false => req.allocators.clone(),
    };
    if allocators.is_empty() {
        bail!(
            "{} has no slots yet; run a soak into it first, or name --allocator",
            req.state.display()
        );
    }
    let tools = Tools::find()?;
    let out = state.coverage();
    let work = crate::foundation::state::tmp_path(&out);
    crate::foundation::state::remove_scratch(&work)?;
    std::fs::create_dir_all(&work)
        .with_context(|| format!("failed to create {}", work.display()))?;
    let _gone_unless_renamed = Unmade(&work);
    let mut covering = Covering {
        project,
        state: &state,
        store: &store,
        tools: &tools,
        work: &work,
        out: &out,
        scratch: work.join("scratch"),
        jemalloc: allocators.iter().any(|a| runs_jemalloc(a)),
        graphs: HashMap::new(),
    };
    let mut report = Report {
        dir: out.clone(),
        allocators: Vec::new(),
        skipped: Vec::new(),
    };
    for allocator in allocators {
        let sources = match covering.sources(&allocator)? {
            Ok(s) => s,
            Err(why) => {
                report.skipped.push((allocator, why));
                continue;
            }
        };
        let targets = targets_of(req, &slots, &allocator);
        report
            .allocators
            .push(covering.cover(allocator, targets, &sources)?);
    }
    crate::foundation::state::remove_scratch(&covering.scratch)?;
    if report.allocators.is_empty() {
        // The last report stays as it was.
        let why: Vec<String> = report
            .skipped
            .iter()
            .map(|(a, why)| format!("{a}: {why}"))
            .collect();
        bail!(
            "no allocator to cover ({}); name one with its sources (--allocator)",
            why.join("; ")
        );
    }
    write_report(&state, &work, &report, &tools.cov)?;
    swap_in(&work, &out)?;
    Ok(report)
}

/// The targets whose inputs run on `allocator`: those asked for, else
/// what the soak ran, its own `slots`' targets (whose corpora and seeds
/// are what it was fuzzed with), else all.
fn targets_of(req: &Request, slots: &[(String, Vec<Target>)], allocator: &str) -> Vec<Target> {
    if !req.targets.is_empty() {
        return req.targets.clone();
    }
    match slots.iter().find(|(a, _)| a == allocator) {
        Some((_, targets)) => targets.clone(),
        None => Target::ALL.to_vec(),
    }
}

/// Writes the report's files into `work`: `COVERAGE.md` (`cov` the
/// llvm-cov that made it), `history.json` (the state dir's points so far
/// and this report's) and `summary.json`.
fn write_report(state: &StateDir, work: &Path, report: &Report, cov: &str) -> Result<()> {
    crate::foundation::state::write_atomic(
        &work.join("COVERAGE.md"),
        summary_markdown(report, cov).as_bytes(),
    )?;
    let mut points = history(state)?;
    let at = crate::foundation::store::now();
    points.extend(report.allocators.iter().map(|a| Point {
        at,
        allocator: a.allocator.clone(),
        totals: a.coverage.totals,
    }));
    crate::foundation::state::write_atomic(
        &work.join("history.json"),
        serde_json::to_string(&points)?.as_bytes(),
    )?;
    crate::foundation::state::write_atomic(
        &work.join("summary.json"),
        serde_json::to_string_pretty(report)?.as_bytes(),
    )
}

/// A report being made: removed if the run ends before it is renamed in
/// (an error, nothing to cover), so the last report stays and no scratch
/// is left in the state dir.
struct Unmade<'a>(&'a Path);

impl Drop for Unmade<'_> {
    fn drop(&mut self) {
        let _ = crate::foundation::state::remove_scratch(self.0);
    }
}

/// The allocators the state dir's slots ran, each with its targets.
fn ran(store: &Store) -> Result<Vec<(String, Vec<Target>)>> {
    let mut ran: Vec<(String, Vec<Target>)> = Vec::new();
    for slot in store.slots()? {
        let Ok(target) = slot.target.parse::<Target>() else {
            continue;
        };
        match ran.iter_mut().find(|(a, _)| *a == slot.allocator) {
            Some((_, targets)) if !targets.contains(&target) => targets.push(target),
            Some(_) => {}
            None => ran.push((slot.allocator, vec![target])),
        }
    }
    ran.sort_by(|a, b| a.0.cmp(&b.0));
    Ok(ran)
}

/// An allocator name as a file name.
fn safe_name(allocator: &str) -> String {
    allocator
        .chars()
        .map(|c| match c {
            'a'..='z' | 'A'..='Z' | '0'..='9' | '-' | '_' | '.' => c,
            _ => '_',
        })
        .collect()
}

/// Renames `work` over `out`: the old report moves aside first and goes
/// once the new one is in.
fn swap_in(work: &Path, out: &Path) -> Result<()> {
    let old = crate::foundation::state::tmp_path(&out.with_file_name("coverage-old"));
    if out.exists() {
        std::fs::rename(out, &old)
            .with_context(|| format!("failed to move {} aside", out.display()))?;
    }
    std::fs::rename(work, out)
        .with_context(|| format!("failed to rename {} to {}", work.display(), out.display()))?;
    crate::foundation::state::remove_scratch(&old)
}

/// One target's inputs run once on one allocator in the coverage build.
struct Replay<'a> {
    binary: &'a Path,
    allocator: &'a str,
    profiles: &'a Path,
    tolerate: &'a Path,
    findings: &'a Path,
    prefix: &'a str,
}

impl Replay<'_> {
    /// Runs every input of `dirs` in one process; if it fails, each input
    /// in a process of its own. Returns the inputs and the failed ones.
    fn all(&self, dirs: &[PathBuf]) -> Result<(usize, usize)> {
        let mut inputs = Vec::new();
        for dir in dirs {
            for entry in std::fs::read_dir(dir)? {
                let path = entry?.path();
                if path.is_file() {
                    inputs.push(path);
                }
            }
        }
        if inputs.is_empty() {
            return Ok((0, 0));
        }
        std::fs::create_dir_all(self.findings)?;
        let mut cmd = self.command();
        cmd.arg("-runs=0").args(dirs);
        if self.ok(cmd)? {
            return Ok((inputs.len(), 0));
        }
        let mut failed = 0;
        for input in &inputs {
            let mut cmd = self.command();
            cmd.arg(input);
            if !self.ok(cmd)? {
                failed += 1;
            }
        }
        Ok((inputs.len(), failed))
    }

    fn command(&self) -> Command {
        let mut cmd = Command::new(self.binary);
        cmd.env("ALLOCSOAK_ALLOCATOR", self.allocator)
            .env("ALLOCSOAK_MODE", "checked")
            .env("ALLOCSOAK_TOLERATE", self.tolerate)
            .env("ALLOCSOAK_FINDINGS", self.findings)
            .env(
                "LLVM_PROFILE_FILE",
                self.profiles.join(format!("{}-%m-%p.profraw", self.prefix)),
            )
            .args(["-timeout=30", "-rss_limit_mb=8192"])
            // A crash's input stays in the scratch, not the working folder.
            .arg(format!("-artifact_prefix={}/", self.findings.display()));
        cmd
    }

    fn ok(&self, mut cmd: Command) -> Result<bool> {
        let status = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .with_context(|| format!("failed to run {}", self.binary.display()))?;
        Ok(status.success())
    }
}

impl Tools {
    fn merge(&self, profiles: &Path, out: &Path) -> Result<()> {
        let mut raw = Vec::new();
        for entry in std::fs::read_dir(profiles)? {
            raw.push(entry?.path());
        }
        if raw.is_empty() {
            bail!(
                "no profile was written in {}: the coverage build's binaries ran no input",
                profiles.display()
            );
        }
        let mut cmd = Command::new(&self.profdata);
        cmd.args(["merge", "-sparse", "-o"]).arg(out).args(&raw);
        stdout_of(cmd, "merge").map(drop)
    }

    /// `llvm-cov <what> -instr-profile P bin -object bin2 ... <sources>`.
    fn cov(&self, what: &str, profdata: &Path, objects: &[PathBuf]) -> Command {
        let mut cmd = Command::new(&self.cov);
        cmd.arg(what).arg("-instr-profile").arg(profdata);
        for (i, o) in objects.iter().enumerate() {
            if i > 0 {
                cmd.arg("-object");
            }
            cmd.arg(o);
        }
        cmd
    }

    fn export(&self, profdata: &Path, objects: &[PathBuf], sources: &[PathBuf]) -> Result<Vec<u8>> {
        let mut cmd = self.cov("export", profdata, objects);
        cmd.args(["-format=text", "-skip-expansions"]).args(sources);
        stdout_of(cmd, "export")
    }

    fn html(
        &self,
        profdata: &Path,
        objects: &[PathBuf],
        sources: &[PathBuf],
        dir: &Path,
    ) -> Result<()> {
        let mut cmd = self.cov("show", profdata, objects);
        cmd.args([
            "-format=html",
            "-show-branches=count",
            "-show-line-counts-or-regions",
        ])
        .arg(format!("-output-dir={}", dir.display()))
        .args(sources);
        stdout_of(cmd, "show").map(drop)
    }
}

/// Runs an LLVM tool's `what`: its output, or its error in one line.
fn stdout_of(mut cmd: Command, what: &str) -> Result<Vec<u8>> {
    let tool = cmd.get_program().to_string_lossy().into_owned();
    let out = cmd
        .output()
        .with_context(|| format!("failed to run {tool}"))?;
    if !out.status.success() {
        bail!(
            "{tool} {what} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(out.stdout)
}

/// The `llvm-cov report` command line of an allocator's coverage, `cov`
/// the llvm-cov it was made with.
fn llvm_cov_report(cov: &str, a: &Covered) -> String {
    let mut cmd = format!("{cov} report -instr-profile {}", a.profdata.display());
    for (i, o) in a.objects.iter().enumerate() {
        let flag = if i > 0 { "-object " } else { "" };
        cmd.push_str(&format!(" {flag}{}", o.display()));
    }
    for r in &a.roots {
        cmd.push_str(&format!(" {}", r.display()));
    }
    cmd
}

/// `COVERAGE.md`: a table of the allocators, then each one's files and
/// the functions no input ran; `cov`: the llvm-cov that made it.
fn summary_markdown(report: &Report, cov: &str) -> String {
    let mut md = String::from("# Coverage of the allocators' own code\n\n");
    md.push_str("| allocator | functions | lines | regions | branches | inputs |\n");
    md.push_str("| --- | --- | --- | --- | --- | --- |\n");
    for a in &report.allocators {
        let t = a.coverage.totals;
        md.push_str(&format!(
            "| {} | {} | {} | {} | {} | {}{} |\n",
            a.allocator,
            t.functions,
            t.lines,
            t.regions,
            t.branches,
            a.inputs,
            match a.failed {
                0 => String::new(),
                n => format!(" ({n} failed, not counted)"),
            }
        ));
    }
    for (allocator, why) in &report.skipped {
        md.push_str(&format!("\n{allocator}: not covered: {why}.\n"));
    }
    for a in &report.allocators {
        let roots: Vec<&Path> = a.roots.iter().map(PathBuf::as_path).collect();
        md.push_str(&format!(
            "\n## {}\n\nSources: {}. HTML: `{}`. The same numbers: `{}`.\n\n| file | functions | lines | regions | branches |\n| --- | --- | --- | --- | --- |\n",
            a.allocator,
            a.roots
                .iter()
                .map(|r| format!("`{}`", r.display()))
                .collect::<Vec<_>>()
                .join(", "),
            a.html.display(),
            llvm_cov_report(cov, a)
        ));
        for f in &a.coverage.files {
            let m = f.measures;
            md.push_str(&format!(
                "| `{}` | {} | {} | {} | {} |\n",
                summary::shown(&f.path, &roots),
                m.functions,
                m.lines,
                m.regions,
                m.branches
            ));
        }
        md.push_str(&format!(
            "\n### Never run ({} functions)\n",
            a.coverage.never_run_count()
        ));
        for (file, names) in &a.coverage.never_run {
            md.push_str(&format!(
                "\n- `{}`: {}\n",
                summary::shown(file, &roots),
                names
                    .iter()
                    .map(|n| format!("`{n}`"))
                    .collect::<Vec<_>>()
                    .join(", ")
            ));
        }
    }
    md
}
