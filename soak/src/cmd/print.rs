//! `allocsoak print`: the op program a fuzz input decodes to.

use std::path::PathBuf;

use anyhow::{Context, Result};
use shadow::Target;
use soak::engines::project::Project;
use soak::foundation::config::Config;

#[derive(clap::Args)]
pub struct Args {
    target: Target,
    input: PathBuf,
}

pub fn run(args: Args, _project: Project, _config: Config) -> Result<bool> {
    let data = std::fs::read(&args.input)
        .with_context(|| format!("failed to read {}", args.input.display()))?;
    print!("{}", shadow::Program::decode(args.target, &data));
    Ok(true)
}
