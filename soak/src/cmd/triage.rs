//! `allocsoak triage`: crash groups newest first; `verify` re-runs them,
//! `export` bundles one for upstream.

use std::path::PathBuf;

use anyhow::Result;
use clap::Subcommand;
use soak::engines::project::Project;
use soak::foundation::config::Config;
use soak::pipeline::groups;
use soak::running::verify;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Option<Action>,
    /// The state dir the soak ran with.
    #[arg(long, default_value = "soak-state", global = true)]
    state: PathBuf,
    /// Only this allocator's groups.
    #[arg(long)]
    allocator: Option<String>,
    /// Only this target's groups.
    #[arg(long)]
    target: Option<String>,
    /// Only groups of this kind (alignment, heap-use-after-free, ...).
    #[arg(long)]
    kind: Option<String>,
    /// Only groups with this status: new, known, fixed, flaky, regressed.
    #[arg(long)]
    status: Option<String>,
}

#[derive(Subcommand)]
enum Action {
    /// Re-run every group's minimized input on the current build: marks each known
    /// (still reproducing), fixed, flaky, or regressed (fixed, and back).
    Verify,
    /// Write a self-contained bundle of one group for an upstream bug report.
    Export {
        /// The group id (or a unique prefix).
        id: String,
        /// Where the bundle folder goes.
        #[arg(long, default_value = ".")]
        out: PathBuf,
    },
    /// File crash inputs found elsewhere (ClusterFuzz, ClusterFuzzLite, another
    /// machine): replayed on this build, signed, deduplicated and minimized like a
    /// soak's own. The files are copied, not moved.
    Import {
        /// The crash input files.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// The target that found them.
        #[arg(long)]
        target: shadow::Target,
        /// The allocator they crash.
        #[arg(long)]
        allocator: String,
        /// The engine that found them (the slot they are filed under).
        #[arg(long, default_value = "libfuzzer")]
        engine: String,
    },
    /// Write the groups as a known-groups file, for `allocsoak quick --known FILE`
    /// (self-contained: inputs and programs inside; commit it to gate on new bugs only).
    Known {
        /// The file to write.
        #[arg(long)]
        out: PathBuf,
    },
}

pub fn run(args: Args, project: Project, config: Config) -> Result<bool> {
    if let Some(Action::Import {
        files,
        target,
        allocator,
        engine,
    }) = &args.action
    {
        // The state dir may be new: an import can be the first thing in it.
        let origin = soak::pipeline::import::Origin {
            target: *target,
            allocator,
            engine,
        };
        let filed = soak::pipeline::import::import(&project, &config, &args.state, &origin, files)?;
        let (_, store) = super::common::open_state(&args.state)?;
        for (file, f) in files.iter().zip(&filed) {
            let g = store
                .group(&f.group_id)?
                .expect("a filed group is in the store");
            println!(
                "import {}: {} group {} [{}] {} ({})",
                file.display(),
                if f.new { "new" } else { "known" },
                g.id,
                g.kind,
                g.title,
                g.status
            );
        }
        return Ok(true);
    }
    let (state, store) = super::common::open_state(&args.state)?;
    match args.action {
        None => {
            let filter = groups::Filter {
                allocator: args.allocator,
                target: args.target,
                kind: args.kind,
                status: args.status,
            };
            print!("{}", groups::list(&state, &store, &filter)?);
        }
        Some(Action::Verify) => {
            for v in verify::verify(&project, &state, &store, &config)? {
                println!(
                    "verify {} {} -> {} ({} of 3 replays reproduced)",
                    v.id, v.before, v.after, v.reproduced
                );
            }
        }
        Some(Action::Export { id, out }) => {
            let group = groups::Group::find(&state, &store, &id)?;
            let bundle = groups::export(&project, &config, &group, &out)?;
            println!("export: {}", bundle.display());
        }
        Some(Action::Import { .. }) => unreachable!("handled above"),
        Some(Action::Known { out }) => {
            let n = soak::quick::known::write(&state, &store, &out)?;
            println!("known: {n} groups written to {}", out.display());
        }
    }
    Ok(true)
}
