//! `allocsoak status`: a soak's progress from its state dir.

use std::path::PathBuf;

use anyhow::Result;
use soak::engines::project::Project;
use soak::foundation::config::Config;
use soak::running::status;

#[derive(clap::Args)]
pub struct Args {
    /// The state dir the soak runs with.
    #[arg(long, default_value = "soak-state")]
    state: PathBuf,
}

pub fn run(args: Args, _project: Project, config: Config) -> Result<bool> {
    let (state, store) = super::common::open_state(&args.state)?;
    let table = status::render(&state, &store, None, &config.drift.trend())?;
    print!("{table}");
    Ok(true)
}
