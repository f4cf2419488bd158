//! The soak's configuration: the committed `soak.toml`, then the command
//! line's overrides.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use shadow::allocator::MIMALLOC_FLAVORS;
use shadow::Target;

use crate::declared::Declared;
use crate::engine::Engine;

mod rss;
pub use rss::{DriftConfig, Series};

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
        let mut config: Config = toml::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "config {}: {}; fix the file (soak.toml in the checkout shows every key)",
                path.display(),
                e.message()
            )
        })?;
        config.path = std::path::absolute(path)
            .with_context(|| format!("failed to resolve {}", path.display()))?;
        for (i, d) in config.declared.iter().enumerate() {
            d.check()
                .with_context(|| format!("config {}", path.display()))?;
            if config.declared[..i].iter().any(|o| o.name == d.name) {
                bail!(
                    "config {}: [[allocator]] `{}` is declared twice; give each a name of its own",
                    path.display(),
                    d.name
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
            None => shadow::allocator::bundled_names()
                .into_iter()
                .map(String::from)
                .collect(),
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
                    if !flavor(a) && !a.starts_with("dylib:") && !list.contains(a) {
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
                bail!("[drift] targets: diff_mimalloc runs two allocators; use alloc_ops, heap_api or mt_ops");
            }
            for a in &allocators {
                series.push(Series {
                    target,
                    allocator: a.clone(),
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
            if MIMALLOC_FLAVORS.contains(&allocator) || allocator.starts_with("dylib:") {
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

/// Checks an allocator name without loading it where it cannot load: an
/// ASan-instrumented library loads only into the (ASan) fuzz binary, and
/// the mimalloc flavors live in builds of their own.
fn check_allocator(name: &str) -> Result<()> {
    if let Some(spec) = name.strip_prefix("dylib:") {
        let path = spec
            .rsplit_once(':')
            .filter(|(p, _)| p.ends_with(".so"))
            .map_or(spec, |(p, _)| p);
        if !Path::new(path).is_file() {
            bail!("allocator library {path} does not exist; give an absolute path to a .so");
        }
    } else if !MIMALLOC_FLAVORS.contains(&name) {
        shadow::allocator::by_name(name).map_err(anyhow::Error::msg)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(text: &str) -> Result<Vec<Slot>> {
        toml::from_str::<Config>(text)
            .map_err(anyhow::Error::from)?
            .slots()
    }

    #[test]
    fn a_single_threaded_allocator_has_no_mt_ops_slot_and_says_why() {
        let entry = "[[allocator]]\nname = \"heap\"\ncrate = \"h\"\npath = \".\"\nnew = \"h::H\"\n";
        let text = format!("targets = [\"alloc_ops\", \"mt_ops\"]\n{entry}threads = 1\n");
        let config: Config = toml::from_str(&text).unwrap();
        let slots: Vec<String> = config
            .slots()
            .unwrap()
            .iter()
            .map(|s| s.target.name().to_string())
            .collect();
        assert_eq!(slots, ["alloc_ops"]);
        let why = config.left_out();
        assert!(
            why.len() == 1 && why[0].contains("mt_ops left out for `heap`"),
            "{why:?}"
        );
        for (threads, says) in [
            ("threads = 2", "threads = 2"),
            ("threads = 1\napi = \"allocator-api2\"", "one lock"),
        ] {
            let d: crate::declared::Declared = toml::from_str(&format!(
                "{}{threads}\n",
                entry.trim_start_matches("[[allocator]]\n")
            ))
            .unwrap();
            let e = d.check().unwrap_err().to_string();
            assert!(e.contains(says), "{e}");
        }
    }

    #[test]
    fn the_committed_config_crosses_targets_and_allocators_on_both_engines() {
        let config =
            Config::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../soak.toml")).unwrap();
        let slots = config.slots().unwrap();
        let on = |engine: &str| slots.iter().filter(|s| s.engine == engine).count();
        assert_eq!(
            on("libfuzzer"),
            config.targets.len() * config.allocators().len()
        );
        // honggfuzz on every target.
        assert_eq!(on("honggfuzz") % Target::ALL.len(), 0);
        assert!(on("honggfuzz") > 0);
        assert_eq!(on("libfuzzer") + on("honggfuzz"), slots.len());
        assert!(slots.iter().all(|s| s.weight == 1.0));
    }

    #[test]
    fn a_slot_entry_crosses_its_lists() {
        let slots = parse(
            "targets = [\"alloc_ops\"]\nallocators = [\"system\"]\n\
             [[slot]]\nengine = \"honggfuzz\"\ntargets = [\"alloc_ops\", \"mt_ops\"]\nallocators = [\"system\", \"mimalloc\"]\nweight = 0.5\n",
        )
        .unwrap();
        let labels: Vec<String> = slots
            .iter()
            .map(|s| format!("{} {} {}", s.label(), s.engine, s.weight))
            .collect();
        assert_eq!(
            labels,
            [
                "alloc_ops/system libfuzzer 1",
                "alloc_ops/system honggfuzz 0.5",
                "alloc_ops/mimalloc honggfuzz 0.5",
                "mt_ops/system honggfuzz 0.5",
                "mt_ops/mimalloc honggfuzz 0.5"
            ]
        );
    }

    #[test]
    fn honggfuzz_slots_refuse_what_its_plain_build_lacks() {
        for allocator in [
            "mimalloc-debug",
            "dylib:/usr/lib/x86_64-linux-gnu/libc.so.6",
        ] {
            let e = parse(&format!(
                "allocators = [\"system\"]\n[[slot]]\nengine = \"honggfuzz\"\ntarget = \"alloc_ops\"\nallocator = \"{allocator}\"\n"
            ))
            .unwrap_err()
            .to_string();
            assert!(
                e.contains(allocator) && e.contains("engine = \"libfuzzer\""),
                "{e}"
            );
        }
    }

    #[test]
    fn slot_entries_reweigh_or_add() {
        let slots = parse(
            "targets = [\"alloc_ops\"]\nallocators = [\"system\"]\n\
             [[slot]]\ntarget = \"alloc_ops\"\nallocator = \"system\"\nweight = 3.0\n\
             [[slot]]\ntarget = \"mt_ops\"\nallocator = \"zoo:double-issue\"\n",
        )
        .unwrap();
        assert_eq!(slots.len(), 2);
        assert_eq!((slots[0].weight, slots[0].cores), (3.0, 1));
        assert_eq!(slots[1].label(), "mt_ops/zoo:double-issue");
        let slots = parse(
            "targets = [\"alloc_ops\"]\nallocators = [\"system\"]\n\
             [[slot]]\ntarget = \"alloc_ops\"\nallocator = \"system\"\ncores = 2\n",
        )
        .unwrap();
        assert_eq!((slots.len(), slots[0].cores, slots[0].weight), (1, 2, 1.0));
        let e = parse("[[slot]]\ntarget = \"alloc_ops\"\nallocator = \"system\"\ncores = 0\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("cores must be 1 or more"), "{e}");
    }

    fn drift(text: &str) -> Result<Vec<Series>> {
        let config: Config = toml::from_str(text)?;
        config.drift_series(&config.slots()?)
    }

    #[test]
    fn drift_is_off_unless_given_a_share() {
        assert!(drift("allocators = [\"system\"]").unwrap().is_empty());
        let mut config =
            Config::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../soak.toml")).unwrap();
        config.drift.cpu_share = 0.25;
        let series = config.drift_series(&config.slots().unwrap()).unwrap();
        assert!(!series.is_empty());
    }

    #[test]
    fn drift_series_default_to_the_slots_allocators_the_drift_build_runs() {
        let series = drift(
            "targets = [\"alloc_ops\", \"mt_ops\"]\n\
             allocators = [\"system\", \"mimalloc-debug\", \"zoo:leak-on-shrink\", \"system\", \"dylib:/usr/lib/x86_64-linux-gnu/libc.so.6\"]\n\
             [drift]\ncpu_share = 0.5\ntargets = [\"alloc_ops\", \"heap_api\"]\n",
        )
        .unwrap();
        let labels: Vec<String> = series.iter().map(Series::label).collect();
        assert_eq!(
            labels,
            [
                "alloc_ops/system",
                "alloc_ops/zoo:leak-on-shrink",
                "heap_api/system",
                "heap_api/zoo:leak-on-shrink"
            ]
        );
    }

    #[test]
    fn bad_drift_settings_say_what_to_use() {
        let e = drift("[drift]\ncpu_share = 1\ntargets = [\"diff_mimalloc\"]").unwrap_err();
        assert!(
            e.to_string().contains("alloc_ops, heap_api or mt_ops"),
            "{e}"
        );
        let e = drift("[drift]\ncpu_share = 1\nallocators = [\"mimalloc-secure\"]").unwrap_err();
        assert!(
            e.to_string().contains("without the mimalloc flavors"),
            "{e}"
        );
        let e = drift("[drift]\ncpu_share = -1").unwrap_err();
        assert!(e.to_string().contains("cpu_share"), "{e}");
        let e = drift("[drift]\ncpu_share = 1\ninterval_secs = 0").unwrap_err();
        assert!(e.to_string().contains("interval_secs"), "{e}");
        assert!(drift("[drift]\ncpu_shares = 1").is_err());
    }

    #[test]
    fn declared_allocators_are_the_default_slots_and_known_names() {
        let config: Config = toml::from_str(
            "targets = [\"alloc_ops\"]\n\
             [[allocator]]\nname = \"mine\"\ncrate = \"mine\"\npath = \".\"\nstatic = \"mine::A\"\n",
        )
        .unwrap();
        let slots = config.slots().unwrap();
        assert_eq!(slots.len(), 1);
        assert_eq!(slots[0].label(), "alloc_ops/mine");
        assert!(config.check_allocator("system").is_ok());
        let e = config.check_allocator("yours").unwrap_err().to_string();
        assert!(e.contains("yours") && e.contains("mine"), "{e}");
        assert!(config.test_setup("mine").contains("declare(\"mine\""));
        assert_eq!(config.test_setup("system"), "");
    }

    #[test]
    fn bad_names_say_what_is_known() {
        let e = parse("targets = [\"alloc_opz\"]").unwrap_err().to_string();
        assert!(e.contains("alloc_opz"), "{e}");
        let e = parse("allocators = [\"tcmalloc\"]")
            .unwrap_err()
            .to_string();
        assert!(e.contains("tcmalloc") && e.contains("system"), "{e}");
        let e = parse("engine = \"afl\"").unwrap_err().to_string();
        assert!(e.contains("unknown engine `afl`"), "{e}");
        assert!(parse("slice_minutes = 0").is_err());
        assert!(toml::from_str::<Config>("slice_minute = 1").is_err());
    }
}
