//! `allocsoak quick`: the CI gate. Every slot runs one slice through the
//! soak's pipeline; exits 1 on a new finding or a fixed group that is back.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use soak::engines::project::Project;
use soak::foundation::config::Config;
use soak::foundation::state::write_atomic;
use soak::quick::{self, report};

#[derive(clap::Args)]
pub struct Args {
    /// Seconds per slot (target × allocator × engine). The gate takes
    /// about slots × secs / jobs, plus its builds (soak.toml's 45 slots at
    /// 5 s: 166 s on 2 cores).
    #[arg(long, default_value_t = 10)]
    secs: u64,
    /// Inputs per slot (libFuzzer -runs, honggfuzz --iterations); a slot ends at whichever comes first.
    #[arg(long)]
    runs: Option<u64>,
    /// Slots run at once. Default: one per core.
    #[arg(long)]
    jobs: Option<usize>,
    /// Where run folders go (`<out>/run-<time>`, `<out>/latest`).
    #[arg(long, default_value = "quick-out")]
    out: PathBuf,
    /// Known crash groups to get past: a soak's state dir, or a file
    /// `allocsoak triage known` wrote. Only new findings fail the gate.
    #[arg(long)]
    known: Option<PathBuf>,
    /// A persistent corpus, `<dir>/<target>/`, read before the pass.
    #[arg(long)]
    corpus: Option<PathBuf>,
    /// Save the pass's new inputs into --corpus.
    #[arg(long)]
    save_corpus: bool,
    /// Also write the markdown summary here ($GITHUB_STEP_SUMMARY gets it when set).
    #[arg(long)]
    markdown: Option<PathBuf>,
    /// Also write the JUnit XML report here.
    #[arg(long)]
    junit: Option<PathBuf>,
    #[command(flatten)]
    slots: super::common::SlotArgs,
}

pub fn run(args: Args, project: Project, mut config: Config) -> Result<bool> {
    if args.save_corpus && args.corpus.is_none() {
        bail!("--save-corpus needs --corpus DIR: the corpus to save the new inputs into");
    }
    if args.secs == 0 {
        bail!("--secs 0 runs nothing; give each slot at least one second");
    }
    args.slots.apply(&mut config);
    // A gate runs no drift workers: drift needs hours, not minutes.
    config.drift.cpu_share = 0.0;
    let slots = config.slots()?;
    for why in config.left_out() {
        eprintln!("allocsoak: {why}");
    }
    let stop = super::common::stop_flag()?;
    let options = quick::Options {
        out: args.out,
        slots,
        config,
        secs: args.secs,
        runs: args.runs,
        jobs: args
            .jobs
            .unwrap_or_else(|| std::thread::available_parallelism().map_or(1, |n| n.get())),
        known: args.known,
        corpus: args.corpus,
        save_corpus: args.save_corpus,
    };
    let outcome = quick::run(project, options, stop)?;
    let md = report::markdown(&outcome);
    let xml = report::junit(&outcome)?;
    write_atomic(&outcome.dir.join("summary.md"), md.as_bytes())?;
    write_atomic(&outcome.dir.join("junit.xml"), xml.as_bytes())?;
    if let Some(path) = &args.markdown {
        write_atomic(path, md.as_bytes())?;
    }
    if let Some(path) = &args.junit {
        write_atomic(path, xml.as_bytes())?;
    }
    if let Some(path) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) {
        // GitHub's file for the job summary: appended to, as each step does.
        use std::io::Write;
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&path)
            .and_then(|mut f| f.write_all(md.as_bytes()))
            .with_context(|| {
                format!(
                    "failed to append to $GITHUB_STEP_SUMMARY ({})",
                    PathBuf::from(&path).display()
                )
            })?;
    }
    print!("{}", report::text(&outcome));
    Ok(outcome.passed())
}
