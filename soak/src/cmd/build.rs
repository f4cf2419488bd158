//! `allocsoak build`: the fuzz targets, the drift build, and the honggfuzz
//! build when a slot runs honggfuzz; from the glue crate when the config
//! declares allocators, and plain as well.

use anyhow::Result;
use soak::engines::project::{runs_jemalloc, Build, Project};
use soak::engines::Engine;
use soak::foundation::config::Config;

#[derive(clap::Args)]
pub struct Args {
    /// Allocators to build for; the mimalloc flavors need builds of their own. Default: the
    /// config's slots' allocators, its declared ones and `system`.
    #[arg(long = "allocator")]
    allocators: Vec<String>,
    /// Build for this engine too (`honggfuzz`), even when no slot of the config runs it.
    /// Default: the engines the config's slots run (libFuzzer's build is always made:
    /// every finding is replayed on it).
    #[arg(long = "engine")]
    engines: Vec<String>,
}

pub fn run(args: Args, project: Project, config: Config) -> Result<bool> {
    let mut engines = Vec::new();
    for name in &args.engines {
        engines.push(Engine::parse(name)?);
    }
    // honggfuzz's binaries serve every name when `--engine honggfuzz`
    // asks for them, else the config's honggfuzz slots.
    let asked_honggfuzz = engines.contains(&Engine::Honggfuzz);
    let mut slotted = vec!["system".to_string()];
    let mut jemalloc = false;
    for slot in config.slots()? {
        let engine = Engine::parse(&slot.engine)?;
        jemalloc |= engine == Engine::Honggfuzz && runs_jemalloc(&slot.allocator);
        engines.push(engine);
        slotted.push(slot.allocator);
    }
    let names = super::common::allocators(&config, args.allocators, &slotted)?;
    let (names, builds) = builds(&project, names)?;
    jemalloc |= asked_honggfuzz && names.iter().any(|a| runs_jemalloc(a));
    // With declared allocators the plain targets are built first (the glue
    // build reuses what they compiled): a config that declares none, such
    // as a test's or a `--config` of one slot, runs them.
    let projects = match project.has_declared() {
        true => vec![project.plain(), project],
        false => vec![project],
    };
    for project in &projects {
        for &build in &builds {
            project.build(build)?;
        }
        if engines.contains(&Engine::Honggfuzz) {
            project.build_honggfuzz(jemalloc)?;
        }
        project.build_drift()?;
    }
    // What each name runs, from the build that serves it (the glue's when
    // the config declares allocators).
    print_runs(
        projects.last().expect("one project at least"),
        &builds,
        &names,
    )?;
    Ok(true)
}

/// The builds `names` and the config's declared allocators run in, each
/// checked to build what the config declares and its glue written
/// ([`Project::write_glue`]), with every name.
pub fn builds(project: &Project, mut names: Vec<String>) -> Result<(Vec<String>, Vec<Build>)> {
    names.extend(project.declared().iter().map(|d| d.name.clone()));
    names.sort();
    names.dedup();
    let mut builds: Vec<Build> = names.iter().map(|a| Build::for_allocator(a)).collect();
    builds.sort_by_key(|b| b.name());
    builds.dedup();
    for &build in &builds {
        project.write_glue(build)?;
    }
    Ok((names, builds))
}

/// Prints what each of `names` runs in its build (`build asan:` then a
/// line per name), from the glue [`builds`] wrote.
pub fn print_runs(project: &Project, builds: &[Build], names: &[String]) -> Result<()> {
    for &build in builds {
        let mine: Vec<String> = names
            .iter()
            .filter(|n| Build::for_allocator(n) == build)
            .cloned()
            .collect();
        println!("build {}:", build.name());
        for line in project.provenance(build, &mine)? {
            println!("  {}: {}", line.name, line.runs);
        }
    }
    Ok(())
}
