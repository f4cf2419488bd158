//! The soak's configuration: the committed `soak.toml`, then the command
//! line's overrides.

use std::path::Path;

use anyhow::{bail, Context, Result};
use serde::Deserialize;
use shadow::Target;

/// The engines a slot can run. libFuzzer is the only one the soak drives
/// today (honggfuzz builds exist; `scripts/hfuzz-zoo` runs them).
pub const ENGINES: [&str; 1] = ["libfuzzer"];

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Targets crossed with `allocators` (default: all four).
    #[serde(default = "all_targets")]
    pub targets: Vec<String>,
    /// Allocators crossed with `targets` (default: the bundled ones).
    #[serde(default = "bundled")]
    pub allocators: Vec<String>,
    /// Engine of the crossed slots (default: libfuzzer).
    #[serde(default = "libfuzzer")]
    pub engine: String,
    /// Minutes per slice (default 5).
    #[serde(default = "five")]
    pub slice_minutes: f64,
    /// Hours between corpus prunes (default 24).
    #[serde(default = "day")]
    pub prune_hours: f64,
    /// libFuzzer `-timeout` (default 10 s).
    #[serde(default = "ten")]
    pub timeout_secs: u64,
    /// libFuzzer `-rss_limit_mb` (default 2048).
    #[serde(default = "rss")]
    pub rss_limit_mb: u64,
    /// Extra slots, or weights for crossed ones.
    #[serde(default, rename = "slot")]
    pub slots: Vec<SlotConfig>,
}

#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SlotConfig {
    pub target: String,
    pub allocator: String,
    #[serde(default = "libfuzzer")]
    pub engine: String,
    #[serde(default = "one")]
    pub weight: f64,
}

/// A slot ready to run: names checked.
#[derive(Clone, Debug, PartialEq)]
pub struct Slot {
    pub target: Target,
    pub allocator: String,
    pub engine: String,
    pub weight: f64,
}

impl Slot {
    pub fn label(&self) -> String {
        format!("{}/{}", self.target, self.allocator)
    }
}

fn all_targets() -> Vec<String> {
    Target::ALL.iter().map(|t| t.name().to_string()).collect()
}
fn bundled() -> Vec<String> {
    shadow::allocator::bundled_names()
        .into_iter()
        .map(String::from)
        .collect()
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

impl Config {
    pub fn load(path: &Path) -> Result<Config> {
        let text = std::fs::read_to_string(path).with_context(|| {
            format!(
                "failed to read config {}; pass --config <file>",
                path.display()
            )
        })?;
        toml::from_str(&text).map_err(|e| {
            anyhow::anyhow!(
                "config {}: {}; fix the file (soak.toml in the checkout shows every key)",
                path.display(),
                e.message()
            )
        })
    }

    /// The slots: targets × allocators, then the `[[slot]]` entries (which
    /// set the weight of a crossed slot or add one). Every name is checked.
    pub fn slots(&self) -> Result<Vec<Slot>> {
        let mut slots: Vec<Slot> = Vec::new();
        for t in &self.targets {
            for a in &self.allocators {
                slots.push(slot(t, a, &self.engine, 1.0)?);
            }
        }
        for s in &self.slots {
            let new = slot(&s.target, &s.allocator, &s.engine, s.weight)?;
            match slots.iter_mut().find(|o| {
                o.target == new.target && o.allocator == new.allocator && o.engine == new.engine
            }) {
                Some(old) => old.weight = new.weight,
                None => slots.push(new),
            }
        }
        if slots.is_empty() {
            bail!("no slots to run: give at least one target and one allocator");
        }
        if self.slice_minutes.is_nan() || self.slice_minutes <= 0.0 {
            bail!("slice_minutes must be above 0, not {}", self.slice_minutes);
        }
        Ok(slots)
    }
}

fn slot(target: &str, allocator: &str, engine: &str, weight: f64) -> Result<Slot> {
    let target: Target = target.parse().map_err(anyhow::Error::msg)?;
    check_allocator(allocator)?;
    if !ENGINES.contains(&engine) {
        bail!(
            "unknown engine `{engine}`; use one of: {}",
            ENGINES.join(", ")
        );
    }
    if weight.is_nan() || weight <= 0.0 {
        bail!("slot {target}/{allocator}: weight must be above 0, not {weight}");
    }
    Ok(Slot {
        target,
        allocator: allocator.to_string(),
        engine: engine.to_string(),
        weight,
    })
}

/// Checks an allocator name without loading it where it cannot load: an
/// ASan-instrumented library loads only into the (ASan) fuzz binary, and
/// the mimalloc flavors live in builds of their own.
pub fn check_allocator(name: &str) -> Result<()> {
    if let Some(spec) = name.strip_prefix("dylib:") {
        let path = spec
            .rsplit_once(':')
            .filter(|(p, _)| p.ends_with(".so"))
            .map_or(spec, |(p, _)| p);
        if !Path::new(path).is_file() {
            bail!("allocator library {path} does not exist; give an absolute path to a .so");
        }
    } else if !matches!(name, "mimalloc-secure" | "mimalloc-debug") {
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
    fn the_committed_config_crosses_targets_and_allocators() {
        let config =
            Config::load(&Path::new(env!("CARGO_MANIFEST_DIR")).join("../soak.toml")).unwrap();
        let slots = config.slots().unwrap();
        assert_eq!(slots.len(), config.targets.len() * config.allocators.len());
        assert!(slots
            .iter()
            .all(|s| s.engine == "libfuzzer" && s.weight == 1.0));
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
        assert_eq!(slots[0].weight, 3.0);
        assert_eq!(slots[1].label(), "mt_ops/zoo:double-issue");
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
