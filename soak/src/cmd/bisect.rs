//! `allocsoak bisect`: which commit of a declared allocator's repository
//! made a crash group reproduce, or (`--fixed`) stopped it.

use std::path::PathBuf;

use anyhow::Result;
use soak::engines::project::Project;
use soak::foundation::config::Config;
use soak::tools::bisect::{self, Outcome, Request, Seen};

#[derive(clap::Args)]
pub struct Args {
    /// The group id (or a unique prefix).
    group: String,
    /// The allocator's git repository; the config declares the allocator from a
    /// `path` (or C sources) inside it.
    #[arg(long)]
    repo: PathBuf,
    /// A revision where the group does not reproduce.
    #[arg(long)]
    good: String,
    /// A revision where it does.
    #[arg(long)]
    bad: String,
    /// Find the commit that fixed the group: --bad is then the older revision.
    #[arg(long)]
    fixed: bool,
    /// The state dir the group is in.
    #[arg(long, default_value = "soak-state")]
    state: PathBuf,
}

/// Exit 1 when no single commit could be named.
pub fn run(args: Args, project: Project, config: Config) -> Result<bool> {
    let req = Request {
        group: &args.group,
        state: &args.state,
        repo: &args.repo,
        good: &args.good,
        bad: &args.bad,
        fixed: args.fixed,
    };
    let outcome = bisect::bisect(&project, &config, &req, &mut |t| {
        let seen = match &t.seen {
            Seen::Reproduces => "reproduces".to_string(),
            Seen::Clean => "does not reproduce".to_string(),
            Seen::Skipped(why) => format!("skipped: {why}"),
        };
        println!("bisect: {} {}: {seen}", &t.commit[..12], t.subject);
    })?;
    match outcome {
        Outcome::Found(row) => {
            let what = if args.fixed {
                "fixed"
            } else {
                "first reproduces"
            };
            println!(
                "bisect: group {} {what} at {} \"{}\" ({} builds, {} skipped)",
                row.group_id, row.commit, row.subject, row.builds, row.skipped
            );
            Ok(true)
        }
        Outcome::OneOf(commits) => {
            println!(
                "bisect: skipped revisions hide it; it is one of: {}",
                commits.join(" ")
            );
            Ok(false)
        }
    }
}
