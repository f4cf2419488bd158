//! `allocsoak trace`: record a program's own allocations, and replay them
//! under allocators beside each other (`soak::tools::trace`).

use std::path::{Path, PathBuf};

use anyhow::Result;
use soak::engines::project::Project;
use soak::foundation::config::Config;
use soak::tools::trace;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    what: What,
}

#[derive(clap::Subcommand)]
enum What {
    /// Run a command with every malloc, free, realloc, calloc and aligned
    /// allocation of its processes recorded, one trace file per process.
    Record {
        /// The folder for the traces (created; it must hold none yet).
        #[arg(long, default_value = "allocsoak-traces")]
        out: PathBuf,
        /// MiB of records one process writes at most (about 5 bytes a
        /// call).
        #[arg(long, default_value_t = 1024)]
        max_mb: u64,
        /// The command, after `--`.
        #[arg(last = true, required = true)]
        command: Vec<String>,
    },
    /// Replay a trace under each allocator (threads kept apart, each block
    /// checked as a workload's), beside the recorded program's memory.
    Replay {
        trace: PathBuf,
        /// Default: system, mimalloc and jemalloc.
        #[arg(long = "allocator")]
        allocators: Vec<String>,
    },
}

pub fn run(args: Args, project: Project, _config: Config) -> Result<bool> {
    match args.what {
        What::Record {
            out,
            max_mb,
            command,
        } => record(&project, &out, max_mb, &command),
        What::Replay {
            trace: path,
            allocators,
        } => replay(&project, &path, allocators),
    }
}

/// `allocsoak trace record`: runs `command` with its processes' calls
/// recorded into `out`, and prints the biggest traces; whether the
/// command exited 0.
fn record(project: &Project, out: &Path, max_mb: u64, command: &[String]) -> Result<bool> {
    let (code, traces, secs) = trace::record(project, out, max_mb, command)?;
    println!(
        "recorded `{}` (exit {code}) in {secs:.1} s: {} processes' traces in {}",
        command.join(" "),
        traces.len(),
        out.display()
    );
    for t in traces.iter().take(5) {
        let cut = if t.cut {
            "  (cut: the process ended without its exit handlers)"
        } else {
            ""
        };
        let mb = t.bytes as f64 / 1e6;
        println!("  {mb:>10.1} MB  {}{cut}", t.path.display());
    }
    if let Some(t) = traces.first() {
        println!(
            "replay the biggest: allocsoak trace replay {}",
            t.path.display()
        );
    }
    Ok(code == 0)
}

/// `allocsoak trace replay`: replays the trace at `path` under each of
/// `allocators` (system, mimalloc and jemalloc when none), and prints a
/// row for each beside the recording; whether every replay was clean.
fn replay(project: &Project, path: &Path, allocators: Vec<String>) -> Result<bool> {
    let allocators = match allocators.is_empty() {
        true => ["system", "mimalloc", "jemalloc"]
            .map(String::from)
            .to_vec(),
        false => allocators,
    };
    let recorded = trace::read(path)?;
    let peak = recorded.resident.iter().map(|m| m.bytes).max().unwrap_or(0);
    println!(
        "{}: {} calls on {} threads ({} left out), {} blocks; the recorded program peaked at {} MiB resident{}",
        path.display(),
        recorded.calls,
        recorded.threads.len(),
        recorded.skipped,
        recorded.blocks,
        peak >> 20,
        if recorded.truncated { " (cut at the recorder's size cap)" } else { "" },
    );
    drop(recorded);
    println!(
        "{:<24} {:>10} {:>8} {:>10} {:>13} {:>14}  result",
        "allocator", "calls", "secs", "peak MiB", "grew MiB", "most apart MiB"
    );
    let mib = |b: i64| b as f64 / f64::from(1 << 20);
    let mut clean = true;
    for r in trace::replay(project, path, &allocators)? {
        // Its growth beside the recording's (`grew`), and the
        // call where they were furthest apart.
        let (grew, apart) = match r.beside() {
            Some(b) => (
                format!("{:.1} / {:.1}", mib(b.replayed), mib(b.recorded)),
                format!("{:+.1} @{}", mib(b.apart), b.apart_at),
            ),
            None => ("-".into(), "-".into()),
        };
        println!(
            "{:<24} {:>10} {:>8.2} {:>10.1} {grew:>13} {apart:>14}  {}",
            r.allocator,
            r.calls,
            r.secs,
            r.peak as f64 / f64::from(1 << 20),
            r.failed.as_deref().unwrap_or("clean")
        );
        clean &= r.failed.is_none();
    }
    println!("grew: the replay's resident growth / the recorded program's, from the first reading to the last (the recorder reads every 65,536 calls); most apart: the replay's growth less the recording's where they differ most, and the call");
    Ok(clean)
}
