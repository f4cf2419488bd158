//! `allocsoak drift`: every RSS drift series, one line each.

use std::path::PathBuf;

use anyhow::Result;
use soak::engines::project::Project;
use soak::foundation::config::Config;

#[derive(clap::Args)]
pub struct Args {
    /// The state dir the soak runs with.
    #[arg(long, default_value = "soak-state")]
    state: PathBuf,
}

pub fn run(args: Args, _project: Project, config: Config) -> Result<bool> {
    let (_, store) = super::common::open_state(&args.state)?;
    print!(
        "{}",
        soak::rss::table::render(&store, &config.drift.trend())?
    );
    Ok(true)
}
