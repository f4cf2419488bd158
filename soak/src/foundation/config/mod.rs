//! The soak's configuration: the committed `soak.toml`, then the command
//! line's overrides.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use shadow::allocator::MIMALLOC_FLAVORS;
use shadow::Target;

use crate::foundation::declared::Declared;

mod engine;
mod miri;
mod rss;
pub use engine::Engine;
pub use miri::{Borrows, MiriConfig};
pub use rss::{DriftConfig, Series, TRACE_SLOT};

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Targets crossed with `allocators` (default: all four).
    #[serde(default = "all_targets")]
    pub targets: Vec<String>,
    /// Allocators crossed with `targets` (default: the declared ones if
    /// any, else the bundled ones); see [`Config::allocators`].
    pub allocators: Option<Vec<String>>,
    /// Engine of the crossed slots (default: libfuzzer; see
    /// [`Engine`]).
    #[serde(default = "libfuzzer")]
    pub engine: String,
    /// Minutes per slice (default 5).
    #[serde(default = "five")]
    pub slice_minutes: f64,
    /// Hours between corpus prunes (default 24).
    #[serde(default = "day")]
    pub prune_hours: f64,
    /// Per-input time limit: libFuzzer's `-timeout`, honggfuzz's
    /// `--timeout` (default 10 s).
    #[serde(default = "ten")]
    pub timeout_secs: u64,
    /// Per-input memory limit: libFuzzer's `-rss_limit_mb`, honggfuzz's
    /// `--rlimit_rss` (default 2048).
    #[serde(default = "rss")]
    pub rss_limit_mb: u64,
    /// What the engine logs of finished slices and drift segments may take
    /// in the state's `logs/`, in MiB (default 1024); the oldest go first
    /// ([`crate::foundation::state::StateDir::prune_logs`]).
    #[serde(default = "logs_mb")]
    pub logs_mb: u64,
    /// Extra slots, or weights for crossed ones; an entry may cross lists
    /// of targets and allocators itself.
    #[serde(default, rename = "slot")]
    pub slots: Vec<SlotConfig>,
    /// Allocators of the author's own, linked in by a generated glue crate.
    #[serde(default, rename = "allocator")]
    pub declared: Vec<Declared>,
    /// RSS drift workers (off unless `cpu_share` is above 0).
    #[serde(default)]
    pub drift: DriftConfig,
    /// Miri passes over the Rust allocators' programs ([`MiriConfig`]).
    #[serde(default)]
    pub miri: MiriConfig,
    /// The file the config was read from: declared paths are relative to
    /// its folder.
    #[serde(skip)]
    pub path: PathBuf,
}

/// A `[[slot]]` entry: a target or a list of them (`target` or
/// `targets`) × an allocator or a list, on one engine, with one weight.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlotConfig {
    #[serde(alias = "targets")]
    pub target: OneOrMany,
    #[serde(alias = "allocators")]
    pub allocator: OneOrMany,
    #[serde(default = "libfuzzer")]
    pub engine: String,
    #[serde(default = "one")]
    pub weight: f64,
    /// Cores one slice of the slot spreads over (default 1): libFuzzer's
    /// `-fork=N`, honggfuzz's `--threads N`. It holds that many of the
    /// soak's `--jobs` while it runs.
    #[serde(default = "one_core")]
    pub cores: usize,
}

/// A name, or a list of names.
#[derive(Clone, Debug, Deserialize)]
#[serde(untagged)]
pub enum OneOrMany {
    One(String),
    Many(Vec<String>),
}

impl OneOrMany {
    pub fn names(&self) -> &[String] {
        match self {
            OneOrMany::One(name) => std::slice::from_ref(name),
            OneOrMany::Many(names) => names,
        }
    }
}

/// A slot ready to run: names checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Slot {
    pub target: Target,
    pub allocator: String,
    pub engine: String,
    pub weight: f64,
    /// Cores a slice spreads over (see [`SlotConfig::cores`]).
    pub cores: usize,
}

impl Slot {
    pub fn label(&self) -> String {
        format!("{}/{}", self.target, self.allocator)
    }
}

fn all_targets() -> Vec<String> {
    Target::ALL.iter().map(|t| t.name().to_string()).collect()
}
fn libfuzzer() -> String {
    "libfuzzer".into()
}
fn five() -> f64 {
    5.0
}
fn day() -> f64 {
    24.0
}
fn ten() -> u64 {
    10
}
fn rss() -> u64 {
    2048
}
fn logs_mb() -> u64 {
    1024
}
fn one() -> f64 {
    1.0
}
fn one_core() -> usize {
    1
}

impl Config {
    pub fn load(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path).with_context(|| {
            format!(
                "failed to read config {}; pass --config <file>",
                path.display()
            )
        })?;
        let unreadable = |e: toml::de::Error| {
            anyhow::anyhow!(
                "config {}: {}; fix the file (soak.toml in the checkout shows every key)",
                path.display(),
                e.message()
            )
        };
        let mut top = text.parse::<toml::Table>().map_err(unreadable)?;
        let traced =
            take_trace_slots(&mut top).with_context(|| format!("config {}", path.display()))?;
        let mut config: Config = toml::Value::Table(top).try_into().map_err(unreadable)?;
        if !traced.is_empty() && config.drift.cpu_share == 0.0 {
            bail!(
                "config {}: [[slot]] trace = {:?}: a trace is replayed by the drift workers, and [drift] cpu_share is 0; give it a share (0.25 is a quarter of a core)",
                path.display(),
                traced[0]
            );
        }
        config.drift.traces.extend(traced);
        config
            .miri
            .on()
            .with_context(|| format!("config {}", path.display()))?;
        config.path = std::path::absolute(path)
            .with_context(|| format!("failed to resolve {}", path.display()))?;
        for (i, d) in config.declared.iter().enumerate() {
            d.check()
                .with_context(|| format!("config {}", path.display()))?;
            if let Some(lib) = &d.dylib {
                let file = config.base().join(&lib.path);
                if !file.is_file() {
                    bail!(
                        "config {}: [[allocator]] `{}`: dylib.path {} does not exist; build the library first (docs/allocators.md gives the clang line)",
                        path.display(),
                        d.name,
                        file.display()
                    );
                }
            }
            if config.declared[..i].iter().any(|o| o.name == d.name) {
                bail!(
                    "config {}: [[allocator]] `{}` is declared twice; give each a name of its own",
                    path.display(),
                    d.name
                );
            }
            // Cargo unifies the releases of one compatible series: the
            // build would hold one of them under both names.
            let same_release = |o: &&Declared| {
                o.krate != d.krate
                    && o.package_name().is_some()
                    && o.package_name() == d.package_name()
                    && o.series().is_some()
                    && o.series() == d.series()
            };
            if let Some(o) = config.declared[..i].iter().find(same_release) {
                bail!(
                    "config {}: [[allocator]] `{}` and `{}` ask for {} {} and {}, one compatible series, which cargo builds as one release; soak releases of different series (0.1 and 0.2, 1 and 2) side by side, and others in configs of their own",
                    path.display(),
                    o.name,
                    d.name,
                    d.package_name().unwrap_or_default(),
                    o.version.as_deref().unwrap_or_default(),
                    d.version.as_deref().unwrap_or_default()
                );
            }
        }
        Ok(config)
    }

    /// The allocators crossed with the targets: the config's list, else
    /// every declared allocator, else every bundled one.
    pub fn allocators(&self) -> Vec<String> {
        match &self.allocators {
            Some(list) => list.clone(),
            None if !self.declared.is_empty() => {
                self.declared.iter().map(|d| d.name.clone()).collect()
            }
            None => shadow::allocator::BUNDLED.map(String::from).to_vec(),
        }
    }

    /// The folder declared paths are relative to.
    pub fn base(&self) -> &Path {
        self.path.parent().unwrap_or(Path::new("."))
    }

    /// What an emitted test runs first to have `allocator`: its declaration
    /// when this config declares it, else nothing.
    pub fn test_setup(&self, allocator: &str) -> String {
        self.declared
            .iter()
            .find(|d| d.name == allocator)
            .map_or_else(String::new, |d| d.test_setup(&self.path))
    }

    /// Checks an allocator name against this config's declarations too.
    pub fn check_allocator(&self, name: &str) -> Result<()> {
        if self.declared.iter().any(|d| d.name == name) {
            return Ok(());
        }
        check_allocator(name).map_err(|e| {
            if self.declared.is_empty() {
                e
            } else {
                let names: Vec<&str> = self.declared.iter().map(|d| d.name.as_str()).collect();
                anyhow::anyhow!(
                    "{e:#}; declared in {}: {}",
                    self.path.display(),
                    names.join(", ")
                )
            }
        })
    }

    /// Whether `target` runs on `allocator`: `Err` says why not (`mt_ops`
    /// on an allocator declared single-threaded, `threads = 1`).
    pub fn runs_on(&self, target: Target, allocator: &str) -> Result<(), String> {
        let one_thread = self
            .declared
            .iter()
            .any(|d| d.name == allocator && d.single_threaded());
        match target == Target::MtOps && one_thread {
            true => Err(format!(
                "mt_ops left out for `{allocator}`: it is declared single-threaded (threads = 1) in {}",
                self.path.display()
            )),
            false => Ok(()),
        }
    }

    /// The lines saying which target × allocator pairs of the config's
    /// lists and `[[slot]]`s [`Config::slots`] leaves out, and why.
    pub fn left_out(&self) -> Vec<String> {
        let mut lines: Vec<String> = Vec::new();
        let mut pairs: Vec<(String, String)> = Vec::new();
        for t in &self.targets {
            pairs.extend(self.allocators().into_iter().map(|a| (t.clone(), a)));
        }
        for s in &self.slots {
            for t in s.target.names() {
                pairs.extend(s.allocator.names().iter().map(|a| (t.clone(), a.clone())));
            }
        }
        for (t, a) in pairs {
            if let Ok(target) = t.parse::<Target>() {
                if let Err(why) = self.runs_on(target, &a) {
                    if !lines.contains(&why) {
                        lines.push(why);
                    }
                }
            }
        }
        lines
    }

    /// The slots: targets × allocators, then the `[[slot]]` entries (which
    /// set the weight of a crossed slot or add one). Every name is checked.
    pub fn slots(&self) -> Result<Vec<Slot>> {
        let mut slots: Vec<Slot> = Vec::new();
        for t in &self.targets {
            for a in &self.allocators() {
                slots.push(self.slot(t, a, &self.engine, 1.0, 1)?);
            }
        }
        for s in &self.slots {
            for t in s.target.names() {
                for a in s.allocator.names() {
                    let new = self.slot(t, a, &s.engine, s.weight, s.cores)?;
                    match slots.iter_mut().find(|o| {
                        o.target == new.target
                            && o.allocator == new.allocator
                            && o.engine == new.engine
                    }) {
                        Some(old) => *old = new,
                        None => slots.push(new),
                    }
                }
            }
        }
        slots.retain(|s| self.runs_on(s.target, &s.allocator).is_ok());
        if slots.is_empty() {
            bail!("no slots to run: give at least one target and one allocator");
        }
        if self.slice_minutes.is_nan() || self.slice_minutes <= 0.0 {
            bail!("slice_minutes must be above 0, not {}", self.slice_minutes);
        }
        Ok(slots)
    }

    /// The drift series: the `[drift]` targets × its allocators (default:
    /// the slots' allocators but the mimalloc flavors and `dylib:`, whose
    /// slot library is instrumented). None when its
    /// `cpu_share` is 0.
    pub fn drift_series(&self, slots: &[Slot]) -> Result<Vec<Series>> {
        let d = &self.drift;
        if d.cpu_share.is_nan() || !(0.0..=64.0).contains(&d.cpu_share) {
            bail!(
                "[drift] cpu_share must be 0 (off) or a share of cores above 0, not {}",
                d.cpu_share
            );
        }
        if d.cpu_share == 0.0 {
            return Ok(Vec::new());
        }
        if d.interval_secs.is_nan() || d.interval_secs <= 0.0 {
            bail!(
                "[drift] interval_secs must be above 0, not {}",
                d.interval_secs
            );
        }
        // The drift build is plain: the mimalloc flavors need builds of
        // their own, and a slot's `dylib:` is instrumented (it would not
        // load); a plain build of the same library is named in the list.
        // Without ASan, `system` is glibc's malloc: `glibc` would watch the
        // same code twice.
        let flavor = |a: &str| MIMALLOC_FLAVORS.contains(&a);
        let allocators: Vec<String> = match &d.allocators {
            Some(list) => {
                for a in list {
                    self.check_allocator(a)?;
                    if flavor(a) {
                        bail!("[drift] allocator `{a}`: the drift build is plain, without the mimalloc flavors; measure `mimalloc`");
                    }
                }
                list.clone()
            }
            None => {
                let mut list: Vec<String> = Vec::new();
                for s in slots {
                    let a = &s.allocator;
                    let twin = a == "glibc" && slots.iter().any(|s| s.allocator == "system");
                    if !flavor(a) && !twin && !a.starts_with("dylib:") && !list.contains(a) {
                        list.push(a.clone());
                    }
                }
                list
            }
        };
        let mut series = Vec::new();
        for t in &d.targets {
            let target: Target = t.parse().map_err(anyhow::Error::msg)?;
            if target == Target::DiffMimalloc {
                bail!("[drift] targets: diff_mimalloc runs two allocators; use alloc_ops, heap_api, mt_ops or workload");
            }
            for a in &allocators {
                series.push(Series {
                    target,
                    allocator: a.clone(),
                    trace: None,
                });
            }
        }
        for t in &d.traces {
            let path = self.base().join(t);
            check_trace(&path)?;
            for a in &allocators {
                series.push(Series {
                    target: Target::Workload,
                    allocator: a.clone(),
                    trace: Some(path.clone()),
                });
            }
        }
        Ok(series)
    }

    fn slot(
        &self,
        target: &str,
        allocator: &str,
        engine: &str,
        weight: f64,
        cores: usize,
    ) -> Result<Slot> {
        let target: Target = target.parse().map_err(anyhow::Error::msg)?;
        self.check_allocator(allocator)?;
        if Engine::parse(engine)? == Engine::Honggfuzz {
            // Its build is plain: one mimalloc, no ASan for an
            // instrumented library to link against.
            let library = crate::foundation::declared::is_library(&self.declared, allocator);
            if MIMALLOC_FLAVORS.contains(&allocator) || library {
                bail!("slot {target}/{allocator}: honggfuzz runs the plain build, without the mimalloc flavors or `dylib:` allocators; give this slot engine = \"libfuzzer\"");
            }
        }
        if weight.is_nan() || weight <= 0.0 {
            bail!("slot {target}/{allocator}: weight must be above 0, not {weight}");
        }
        if cores == 0 {
            bail!("slot {target}/{allocator}: cores must be 1 or more, not 0");
        }
        Ok(Slot {
            target,
            allocator: allocator.to_string(),
            engine: engine.to_string(),
            weight,
            cores,
        })
    }
}

/// Takes the `[[slot]] trace = "app.trace"` entries out of the config's
/// table: shorthand for `[drift] traces = ["app.trace"]`. A trace has
/// nothing for a fuzzer to mutate, so its slot is a drift series under
/// each drift allocator, replayed whole with its checks; any other key
/// beside `trace` is refused.
fn take_trace_slots(top: &mut toml::Table) -> Result<Vec<PathBuf>> {
    let Some(toml::Value::Array(slots)) = top.get_mut("slot") else {
        return Ok(Vec::new());
    };
    let mut traces = Vec::new();
    for slot in std::mem::take(slots) {
        let Some(trace) = slot.get("trace") else {
            slots.push(slot);
            continue;
        };
        let Some(path) = trace.as_str() else {
            bail!("[[slot]] trace must be a trace file's path, as a string, not {trace}");
        };
        let keys = slot.as_table().into_iter().flat_map(|t| t.keys());
        if let Some(other) = keys.into_iter().find(|k| *k != "trace") {
            bail!(
                "[[slot]] trace = {path:?}: `{other}` does not apply to a trace, which runs as a drift series under every [drift] allocator; leave it out"
            );
        }
        traces.push(PathBuf::from(path));
    }
    Ok(traces)
}

/// A `[drift] traces` entry is a trace file: its first bytes say so.
fn check_trace(path: &Path) -> Result<()> {
    if !shadow::op::trace::file_is_trace(path) {
        bail!(
            "[drift] traces: {} is not a trace this allocsoak records; record one with `allocsoak trace record`",
            path.display()
        );
    }
    Ok(())
}

/// Checks an allocator name without making the allocator: the CLI is
/// built without the C allocators (the fuzz builds have them), an
/// ASan-instrumented library loads only into the (ASan) fuzz binary, and
/// the mimalloc flavors live in builds of their own.
fn check_allocator(name: &str) -> Result<()> {
    if let Some(spec) = name.strip_prefix("dylib:") {
        let (path, _) = shadow::allocator::split_dylib_spec(spec);
        if !Path::new(path).is_file() {
            bail!("allocator library {path} does not exist; give an absolute path to a .so");
        }
    } else if let Some(spec) = name.strip_prefix("zoo:") {
        let (bugs, base) = ::zoo::split_spec(spec);
        ::zoo::parse_bugs(bugs).map_err(anyhow::Error::msg)?;
        check_allocator(base)?;
    } else {
        ::zoo::register(); // its bugs' names, for the error
        shadow::allocator::check_name(name).map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests;
