//! `allocsoak triage`: the crash groups a soak filed — listed, verified
//! against the current build (`running::verify`, above the RSS drift room
//! whose groups it measures too), exported for an upstream report.

use std::fmt::Write;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use shadow::Target;
use triage::replay::Replayer;

use crate::engines::project::{Build, Project};
use crate::foundation::config::Config;
use crate::foundation::state::{self, StateDir};
use crate::foundation::store::{utc, GroupRow, SlotRow, Store};

/// Replays per group in `verify`.
pub const TRIES: usize = 3;

/// A filed group with its slot and folder.
pub struct Group {
    pub row: GroupRow,
    pub slot: SlotRow,
    pub dir: PathBuf,
}

impl Group {
    /// The group whose id starts with `prefix` (an id is 16 hex digits; a
    /// unique prefix will do), or, for the full id of a group merged into
    /// another, that one.
    pub fn find(state: &StateDir, store: &Store, prefix: &str) -> Result<Group> {
        let matches: Vec<GroupRow> = store
            .groups()?
            .into_iter()
            .filter(|g| g.id.starts_with(prefix))
            .collect();
        if matches.is_empty() {
            if let Some(into) = store.merged_into(prefix)? {
                eprintln!("allocsoak: group {prefix} was merged into {into}");
                return Group::find(state, store, &into);
            }
        }
        match matches.len() {
            0 => bail!(
                "no crash group `{prefix}` in {}; `allocsoak triage` lists them",
                state.root().display()
            ),
            1 => Group::load(state, store, matches.into_iter().next().unwrap()),
            n => bail!("`{prefix}` matches {n} crash groups; give more of the id"),
        }
    }

    /// The group of a store row, with its slot and folder.
    pub fn load(state: &StateDir, store: &Store, row: GroupRow) -> Result<Group> {
        let slot = store.slot_by_id(row.slot_id)?;
        let dir = state.crash_group(&row.id);
        Ok(Group { row, slot, dir })
    }

    /// The target whose binary and programs the group's inputs are: a
    /// drift series of a trace (slot `trace:<file>`) is `workload`'s.
    pub fn target(&self) -> Result<Target> {
        match self
            .slot
            .target
            .starts_with(crate::foundation::config::TRACE_SLOT)
        {
            true => Ok(Target::Workload),
            false => self.slot.target.parse().map_err(anyhow::Error::msg),
        }
    }

    /// The input that stands for the group: minimized, else the original.
    pub fn input(&self) -> PathBuf {
        let minimized = self.dir.join("minimized");
        if minimized.is_file() {
            minimized
        } else {
            self.dir.join("original")
        }
    }

    /// What replays the group, in order in one process: the inputs it
    /// needs before it (`history/`), then [`Group::input`].
    pub fn inputs(&self) -> Result<Vec<PathBuf>> {
        let mut inputs = crate::pipeline::sequence::files(&self.dir)?;
        inputs.push(self.input());
        Ok(inputs)
    }

    /// The tolerate file the repro needs (a known bug would fire first
    /// without it), when it does: intake keeps one in the group's folder
    /// only then.
    pub fn tolerate(&self) -> Option<PathBuf> {
        Some(self.dir.join("tolerate")).filter(|t| t.is_file())
    }
}

/// Which groups `allocsoak triage` lists; each unset filter matches all.
#[derive(Default)]
pub struct Filter {
    pub allocator: Option<String>,
    pub target: Option<String>,
    pub kind: Option<String>,
    pub status: Option<String>,
}

/// The groups `filter` keeps, newest first.
pub fn matching(state: &StateDir, store: &Store, filter: &Filter) -> Result<Vec<Group>> {
    let mut kept = Vec::new();
    for row in store.groups()? {
        let g = Group::load(state, store, row)?;
        let keep = |want: &Option<String>, have: &str| want.as_deref().is_none_or(|w| w == have);
        if keep(&filter.allocator, &g.slot.allocator)
            && keep(&filter.target, &g.slot.target)
            && keep(&filter.kind, &g.row.kind)
            && keep(&filter.status, &g.row.status)
        {
            kept.push(g);
        }
    }
    Ok(kept)
}

/// The groups, newest first, one line each.
pub fn list(state: &StateDir, store: &Store, filter: &Filter) -> Result<String> {
    let mut out = String::new();
    writeln!(
        out,
        "{:<16} {:<10} {:<22} {:<34} {:>5}  {:<23}  {:<23}  title",
        "group", "status", "kind", "slot", "count", "first seen", "last seen"
    )?;
    let groups = matching(state, store, filter)?;
    for g in &groups {
        let bisected: String = store
            .bisections(&g.row.id)?
            .iter()
            .map(|b| format!("  [{}]", b.line()))
            .collect();
        writeln!(
            out,
            "{:<16} {:<10} {:<22} {:<34} {:>5}  {:<23}  {:<23}  {}{bisected}",
            g.row.id,
            g.row.status,
            g.row.kind,
            format!("{}/{}", g.slot.target, g.slot.allocator),
            g.row.count,
            utc(g.row.first_seen),
            utc(g.row.last_seen),
            g.row.title
        )?;
    }
    writeln!(out, "{} crash groups", groups.len())?;
    Ok(out)
}

/// The replayer of a group's slot on the current build.
pub fn replayer<'a>(
    binary: &'a Path,
    g: &'a Group,
    tolerate: Option<&'a Path>,
    config: &Config,
) -> Replayer<'a> {
    Replayer {
        binary,
        allocator: &g.slot.allocator,
        tolerate,
        timeout_secs: config.timeout_secs,
        rss_limit_mb: config.rss_limit_mb,
        budget: Default::default(),
    }
}

/// The fuzz binary a slot replays on; a one-line error when it is not built.
pub fn binary(project: &Project, target: Target, allocator: &str) -> Result<PathBuf> {
    let binary = project.binary(Build::for_allocator(allocator), target);
    if !binary.is_file() {
        bail!("fuzz binary {} is missing; run `allocsoak build --allocator {allocator}` (or `just build`)", binary.display());
    }
    Ok(binary)
}

/// The test name an emitted test gets: `allocsoak_<kind>_<id>`.
pub fn test_name(g: &GroupRow) -> String {
    let kind: String = g
        .kind
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    format!("allocsoak_{kind}_{}", g.id)
}

/// Writes `<out>/allocsoak-<id>/` with everything an upstream bug report
/// of group `g` needs: the report, the inputs, the program text, the
/// stack, the replay log and the emitted test, plus a README saying how
/// to replay.
pub fn export(project: &Project, config: &Config, g: &Group, out: &Path) -> Result<PathBuf> {
    let bundle = out.join(format!("allocsoak-{}", g.row.id));
    if bundle.exists() {
        bail!(
            "{} exists; remove it or pass another --out",
            bundle.display()
        );
    }
    let work = state::tmp_path(&bundle);
    std::fs::create_dir_all(&work)
        .with_context(|| format!("failed to create {}", work.display()))?;
    copy_group_files(g, &work)?;
    let inputs = g.inputs()?;
    let history = &inputs[..inputs.len() - 1];
    if !history.is_empty() {
        std::fs::create_dir_all(work.join("history"))?;
        for file in history {
            state::copy_atomic(file, &work.join("history").join(file.file_name().unwrap()))?;
        }
    }
    let programs = crate::pipeline::program::read_programs(g.target()?, &inputs)?;
    let setup = config.test_setup(&g.slot.allocator);
    let test = shadow::Program::rust_test(&programs, &test_name(&g.row), &g.slot.allocator, &setup);
    state::write_atomic(&work.join("test.rs"), test.as_bytes())?;
    let readme = readme(project, config, g, history)?;
    state::write_atomic(&work.join("README.md"), readme.as_bytes())?;
    std::fs::rename(&work, &bundle).with_context(|| {
        format!(
            "failed to rename {} to {}",
            work.display(),
            bundle.display()
        )
    })?;
    Ok(bundle)
}

/// Copies the files of group `g`'s folder a bug report takes into `work`,
/// those it has.
fn copy_group_files(g: &Group, work: &Path) -> Result<()> {
    for name in [
        "REPORT.md",
        "original",
        "minimized",
        "program.txt",
        "stack.txt",
        "replay.log",
        "tolerate",
    ] {
        let from = g.dir.join(name);
        if from.is_file() {
            state::copy_atomic(&from, &work.join(name))?;
        }
    }
    Ok(())
}

/// The README of group `g`'s bundle: what its files are, and the command
/// that replays its `history` inputs and its input on allocsoak's fuzz
/// binary.
fn readme(project: &Project, config: &Config, g: &Group, history: &[PathBuf]) -> Result<String> {
    let name = |i: &PathBuf| i.file_name().unwrap().to_string_lossy().into_owned();
    let files = history
        .iter()
        .map(|i| format!("history/{}", name(i)))
        .chain([name(&g.input())])
        .collect::<Vec<_>>()
        .join(" ");
    // Relative to the checkout, where the author runs it; a declared
    // allocator's binary is its glue's, not the plain target's.
    let target = g.target()?;
    let binary = project.binary(Build::for_allocator(&g.slot.allocator), target);
    let binary = binary.strip_prefix(project.root()).unwrap_or(&binary);
    Ok(format!(
        "# allocsoak crash group {id}\n\n\
         {title}\n\n\
         Found by allocsoak on {target} / {allocator}. `REPORT.md` has the details.\n\n\
         - `program.txt`: the op program (the failing op is marked); each op is one allocator call.\n\
         - `test.rs`: the program as a standalone Rust `#[test]` (its header says how to depend on allocsoak's `shadow` crate).\n\
         - `minimized` / `original`: the minimized program as text / the fuzz input{needs}; replay on allocsoak's fuzz binary:\n\n\
         ```sh\n{build}{tolerate}ALLOCSOAK_TEXT_INPUTS=1 {reference}ALLOCSOAK_ALLOCATOR='{allocator}' {binary} {files}\n```\n",
        id = g.row.id,
        title = g.row.title,
        target = g.slot.target,
        allocator = g.slot.allocator,
        binary = binary.display(),
        build = if config.declared.iter().any(|d| d.name == g.slot.allocator) {
            format!("cargo run --release -p soak -- --config {} build\n", config.path.display())
        } else {
            String::new()
        },
        tolerate = if g.tolerate().is_some() { "ALLOCSOAK_TOLERATE=tolerate " } else { "" },
        reference = crate::pipeline::intake::reference_setting(&g.row.title),
        needs = if history.is_empty() {
            String::new()
        } else {
            format!(
                ", after the {} in `history/`: the crash needs the allocator state they leave, replayed in order in one process",
                history.len()
            )
        },
    ))
}
