//! `allocsoak trace`: record a program's own allocations, and replay them
//! under allocators beside each other (`soak::tools::trace`).

use std::path::PathBuf;

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
        /// MiB of records one process writes at most (32 bytes a call).
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
        } => {
            let (code, traces, secs) = trace::record(&project, &out, max_mb, &command)?;
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
                println!("  {:>10} calls  {}{cut}", t.bytes / 32, t.path.display());
            }
            if let Some(t) = traces.first() {
                println!(
                    "replay the biggest: allocsoak trace replay {}",
                    t.path.display()
                );
            }
            Ok(code == 0)
        }
        What::Replay {
            trace: path,
            allocators,
        } => {
            let allocators = match allocators.is_empty() {
                true => ["system", "mimalloc", "jemalloc"]
                    .map(String::from)
                    .to_vec(),
                false => allocators,
            };
            let recorded = trace::read(&path)?;
            let peak = recorded.resident.iter().map(|&(_, r)| r).max().unwrap_or(0);
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
                "{:<24} {:>10} {:>8} {:>10}  result",
                "allocator", "calls", "secs", "peak MiB"
            );
            let mut clean = true;
            for r in trace::replay(&project, &path, &allocators)? {
                println!(
                    "{:<24} {:>10} {:>8.2} {:>10.1}  {}",
                    r.allocator,
                    r.calls,
                    r.secs,
                    r.peak as f64 / f64::from(1 << 20),
                    r.failed.as_deref().unwrap_or("clean")
                );
                clean &= r.failed.is_none();
            }
            Ok(clean)
        }
    }
}
