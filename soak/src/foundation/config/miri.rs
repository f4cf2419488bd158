//! The config's `[miri]` table: when a soak replays its Rust allocators'
//! programs under Miri, and under which aliasing model.

use anyhow::{bail, Result};
use serde::Deserialize;

/// Miri passes in a soak: every `every_hours`, each slot whose allocator
/// is Rust code Miri runs has the programs of its target's corpus that no
/// pass replayed before run under Miri, smallest first, at most `most` per
/// slot (`running::miri`).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MiriConfig {
    /// Hours between passes (default 2; 0: none). The first comes this
    /// long after the state's first soak started.
    #[serde(default = "two")]
    pub every_hours: f64,
    /// Programs per slot and pass (default 10): Miri runs one a thousand
    /// times slower than the fuzz binary.
    #[serde(default = "ten")]
    pub most: usize,
    /// The aliasing model: `"stacked"` (default, Miri's) or `"tree"`.
    /// A pass, `allocsoak miri` and `allocsoak repro` of a Miri group use
    /// it.
    #[serde(default)]
    pub borrows: Borrows,
}

impl Default for MiriConfig {
    fn default() -> MiriConfig {
        toml::from_str("").expect("every key has a default")
    }
}

impl MiriConfig {
    /// Whether passes run; an error for a value that means nothing.
    pub fn on(&self) -> Result<bool> {
        if !(self.every_hours >= 0.0 && self.every_hours.is_finite()) {
            bail!(
                "[miri] every_hours must be 0 (no passes) or the hours between passes, not {}",
                self.every_hours
            );
        }
        Ok(self.every_hours > 0.0 && self.most > 0)
    }
}

fn two() -> f64 {
    2.0
}

fn ten() -> usize {
    10
}

/// The aliasing model Miri holds references to: Stacked Borrows (Miri's
/// default) or Tree Borrows (`-Zmiri-tree-borrows`), its newer model,
/// which accepts some code Stacked Borrows rejects.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Deserialize, clap::ValueEnum)]
#[serde(rename_all = "kebab-case")]
pub enum Borrows {
    #[default]
    Stacked,
    Tree,
}

impl Borrows {
    /// Miri's flag for it (none: its default).
    pub fn flag(self) -> &'static str {
        match self {
            Borrows::Stacked => "",
            Borrows::Tree => "-Zmiri-tree-borrows",
        }
    }

    /// Its name in the config and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Borrows::Stacked => "stacked",
            Borrows::Tree => "tree",
        }
    }
}
