//! What several subcommands share: the target and allocator arguments,
//! the slot replacements, the stop flag, and opening a state dir to read.

use std::path::Path;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use ::soak::foundation::config::Config;
use ::soak::foundation::state::StateDir;
use ::soak::foundation::store::Store;
use anyhow::Result;
use shadow::Target;

/// Which targets and allocators a command runs.
#[derive(clap::Args)]
pub struct Pairs {
    /// A target to run (repeatable). Default: all four.
    #[arg(long = "target")]
    pub targets: Vec<Target>,
    /// An allocator to run (repeatable).
    #[arg(long = "allocator")]
    pub allocators: Vec<String>,
}

/// The slots a soak or gate runs, replacing the config's from the command line.
#[derive(clap::Args)]
pub struct SlotArgs {
    /// Replace the config's targets (repeatable).
    #[arg(long = "target")]
    pub targets: Vec<String>,
    /// Replace the config's allocators (repeatable).
    #[arg(long = "allocator")]
    pub allocators: Vec<String>,
    /// Replace the config's engine.
    #[arg(long)]
    pub engine: Option<String>,
}

impl SlotArgs {
    /// The config with these replacements (a list given drops its `[[slot]]`s).
    pub fn apply(self, config: &mut Config) {
        if !self.targets.is_empty() {
            config.targets = self.targets;
            config.slots.clear();
        }
        if !self.allocators.is_empty() {
            config.allocators = Some(self.allocators);
            config.slots.clear();
        }
        if let Some(engine) = self.engine {
            config.engine = engine;
        }
    }
}

/// A flag SIGINT and SIGTERM set (the run then stops cleanly); a second
/// signal ends the process at once.
pub fn stop_flag() -> Result<Arc<AtomicBool>> {
    let stop = Arc::new(AtomicBool::new(false));
    for signal in [signal_hook::consts::SIGINT, signal_hook::consts::SIGTERM] {
        signal_hook::flag::register_conditional_shutdown(signal, 1, Arc::clone(&stop))?;
        signal_hook::flag::register(signal, Arc::clone(&stop))?;
    }
    Ok(stop)
}

/// `given`, or `all` when none were given.
pub fn or_all<T: Clone>(given: Vec<T>, all: &[T]) -> Vec<T> {
    if given.is_empty() {
        all.to_vec()
    } else {
        given
    }
}

/// Checks allocator names before any build or run starts.
pub fn allocators(config: &Config, given: Vec<String>, default: &[String]) -> Result<Vec<String>> {
    let names = or_all(given, default);
    for name in &names {
        config.check_allocator(name)?;
    }
    Ok(names)
}

/// A state dir a soak ran with, and its store, opened to read.
pub fn open_state(path: &Path) -> Result<(StateDir, Store)> {
    let state = StateDir::open_to_read(path)?;
    let store = Store::open(&state.store())?;
    Ok((state, store))
}
