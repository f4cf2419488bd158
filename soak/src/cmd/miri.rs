//! `allocsoak miri`: a Rust allocator's programs replayed under Miri,
//! which sees what native runs cannot (a pointer used past the provenance
//! it was made with, aliasing, an uninitialized read). Each finding is
//! signed as a crash is, one per signature, and kept with its input and
//! Miri's log under `target/allocsoak/miri/<target>-<allocator>/<id>/`,
//! and its program minimized under Miri beside them (`minimized`, its log
//! `minimized.log`).

use std::collections::btree_map::Entry;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Result};
use report::miri::Miri;
use shadow::Target;
use soak::engines::miri::{self, Outcome};
use soak::engines::project::Project;
use soak::foundation::config::Config;
use soak::foundation::state::write_atomic;
use soak::pipeline::minimize::under_miri;

#[derive(clap::Args)]
pub struct Args {
    /// The allocator: `arena`, `zoo:<bug>@arena`, or a Rust crate the
    /// config declares (C code does not run under Miri).
    #[arg(long)]
    allocator: String,
    /// The target whose programs these are.
    #[arg(long, default_value = "alloc_ops")]
    target: Target,
    /// Program files or folders of them. Default: the target's seeds.
    inputs: Vec<PathBuf>,
    /// Run at most this many, smallest first (Miri is a thousand times
    /// slower than a native run).
    #[arg(long, default_value_t = 20)]
    most: usize,
    /// The aliasing model (default: the config's `[miri] borrows`,
    /// else `stacked`).
    #[arg(long, value_enum)]
    borrows: Option<miri::Borrows>,
}

pub fn run(args: Args, project: Project, config: Config) -> Result<bool> {
    if !miri::runs_under_miri(&project, &args.allocator) {
        bail!(
            "`{}` is not Rust code Miri can run; give `arena`, `zoo:<bug>@arena` or a Rust crate your config declares",
            args.allocator
        );
    }
    if args.target == Target::DiffMimalloc {
        bail!("diff_mimalloc runs the C mimalloc beside the allocator; give alloc_ops, heap_api, mt_ops or workload");
    }
    if !miri::installed() {
        bail!("Miri is not installed; run `rustup component add --toolchain nightly miri rust-src` (`just setup` does)");
    }
    let inputs = match args.inputs.is_empty() {
        true => vec![project.seeds(args.target)],
        false => args.inputs,
    };
    let inputs = miri::smallest(&inputs, args.most)?;
    if inputs.is_empty() {
        bail!("no programs to replay; give input files or folders");
    }
    let replay = miri::Replay {
        allocator: &args.allocator,
        target: args.target,
        borrows: args.borrows.unwrap_or(config.miri.borrows),
    };
    let budget = triage::budget::Budget::default(); // no end
    let outcomes = miri::run(&project, replay, &inputs, &budget)?;
    let out = project.run_dir("miri", &[args.target.name(), &args.allocator]);
    let mut found = BTreeMap::new();
    let mut unsupported = 0;
    for (input, outcome) in &outcomes {
        let Outcome::Stopped { miri, log } = outcome else {
            continue;
        };
        match miri {
            Miri::Unsupported(head) => {
                unsupported += 1;
                println!(
                    "miri: {} stopped where Miri cannot follow: {head}",
                    input.display()
                );
            }
            Miri::Finding(sig) => {
                if let Entry::Vacant(entry) = found.entry(sig.id()) {
                    let dir = out.join(sig.id());
                    let shown = keep(&project, replay, (input, sig, log), &dir, &budget)?;
                    entry.insert((sig.title(), shown));
                }
            }
        }
    }
    let clean = outcomes
        .iter()
        .filter(|(_, o)| matches!(o, Outcome::Clean))
        .count();
    println!(
        "miri {} {} ({} borrows): {} programs, {clean} clean, {unsupported} past what Miri runs, {} findings",
        args.target,
        args.allocator,
        replay.borrows.name(),
        outcomes.len(),
        found.len()
    );
    for (id, (title, shown)) in &found {
        println!(
            "  {id} {title}\n    {}\n    {shown}",
            out.join(id).display()
        );
    }
    Ok(found.is_empty())
}

/// Keeps a finding in `dir`: its input, Miri's log, and its program
/// minimized under Miri with that log; what minimizing did, as shown.
fn keep(
    project: &Project,
    replay: miri::Replay,
    (input, sig, log): (&Path, &report::Signature, &str),
    dir: &Path,
    budget: &triage::budget::Budget,
) -> Result<String> {
    std::fs::create_dir_all(dir)?;
    write_atomic(&dir.join("input"), &std::fs::read(input)?)?;
    write_atomic(&dir.join("miri.log"), log.as_bytes())?;
    Ok(
        match under_miri(project, replay, input, (sig, log), dir, budget)? {
            Some(m) => {
                write_atomic(&dir.join("minimized.log"), m.log.as_bytes())?;
                format!("minimized {}", m.summary)
            }
            None => "not minimized: nothing smaller stops Miri so".into(),
        },
    )
}
