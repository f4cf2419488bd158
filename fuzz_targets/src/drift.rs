//! The RSS drift replay loop: the `drift` binary, a plain release build
//! (no sanitizer, no fuzzer) that runs a target's programs against one
//! allocator over and over and prints a [`drift::Reading`] per interval.
//!
//! Each program frees everything it holds at its end, so a correct
//! allocator's memory plateaus; what keeps growing is retained by the
//! allocator. The shadow's checks stay on (`Mode::Checked`): a violation
//! prints its line and `allocsoak drift: failed in <program>`, and the
//! process exits 1. `ALLOCSOAK_TOLERATE` gets past known ones and
//! `ALLOCSOAK_HISTORY` keeps the programs run last, as in the fuzz
//! binaries.
//!
//! Readings are taken between passes over the programs, the first pass end
//! at least `--interval` after the last reading: every reading then
//! follows the same programs and holds no live block, so a correct
//! allocator reads nearly the same each time (a reading mid-pass would
//! catch whatever the last big program left in the allocator's caches).
//! The first reading is taken before any op (ops 0), so every process
//! starts its series with a gap mark (see `drift`'s crate docs).
//!
//! Folders are listed once, as the process starts: the replay set stays
//! fixed, so what grows is the allocator's and not a corpus's (a growing
//! corpus brings bigger programs, and memory grows with them). The soak
//! starts a new process, a new segment, to take in what its corpus gained.
//! A file gone by the time it is read is skipped.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use clap::Parser;
use drift::Reading;
use shadow::allocator::Allocator;
use shadow::op::trace::Trace;
use shadow::{Mode, Program, Target};

/// Replays a target's programs against one allocator forever, printing
/// memory readings (`reading secs=… ops=… rss=…`) to stdout.
#[derive(Parser)]
#[command(name = "drift")]
struct Args {
    /// The allocator, by the name the fuzz targets know it by.
    #[arg(long, default_value = "system")]
    allocator: String,
    /// The target whose programs these are: alloc_ops, heap_api, mt_ops or
    /// workload.
    #[arg(long, required_unless_present = "trace")]
    target: Option<Target>,
    /// The inputs are recorded allocation traces (`allocsoak trace
    /// record`), each replayed whole, its calls counted as ops.
    #[arg(long)]
    trace: bool,
    /// Sample each program's resident memory every 5 ms, and print the
    /// most one added (less a trace replay's own table of blocks) as
    /// `peak bytes=…` when `--ops` stops the process.
    #[arg(long)]
    peak: bool,
    /// Program files or folders of them (a corpus, seeds).
    #[arg(required = true)]
    inputs: Vec<PathBuf>,
    /// Seconds between readings.
    #[arg(long, default_value_t = 10.0)]
    interval: f64,
    /// Ops between readings instead of `--interval`: a replay of a fixed
    /// number of ops then has the same readings on a fast machine and a
    /// loaded one.
    #[arg(long)]
    every_ops: Option<u64>,
    /// The share of one core to use at most: the loop sleeps between
    /// programs to keep its CPU time under it.
    #[arg(long, default_value_t = 1.0)]
    cpu_share: f64,
    /// Stop at the first pass end after this many ops, with a last
    /// reading (default: never).
    #[arg(long)]
    ops: Option<u64>,
    /// Resident MiB at which the process stops with exit status 3: memory
    /// that grew this far drifts whatever the fit says, and a leak must
    /// not take the machine down with it.
    #[arg(long, default_value_t = 2048)]
    rss_limit_mb: u64,
}

/// The exit status of a process that went over `--rss-limit-mb`.
pub const OVER_RSS_LIMIT: i32 = 3;

/// The `drift` binary's `main`; `register` declares a glue crate's
/// allocators first, as in [`crate::target!`].
pub fn main(register: fn()) {
    let args = Args::parse();
    let target = checked(&args);
    register();
    zoo::register();
    let alloc = shadow::allocator::by_name(&args.allocator).unwrap_or_else(|e| exit(e));
    let every = match args.every_ops {
        Some(ops) => Every::Ops(ops),
        None => Every::Time(Duration::from_secs_f64(args.interval)),
    };
    let mut run = Replay::new(alloc, every, args.peak);
    let programs = list(&args.inputs).unwrap_or_else(|e| exit(e));
    if programs.is_empty() {
        exit(format!(
            "no programs in {:?}; give a corpus or seed folder",
            args.inputs
        ));
    }
    // Traces are read once, whole; programs each time they run.
    let traces: Vec<Trace> = match args.trace {
        true => read_traces(&programs),
        false => Vec::new(),
    };
    // The parsed traces are the process's own memory, not the
    // allocator's: each reading counts them as held (`live`).
    run.own = traces.iter().map(|t| t.heap_bytes() as u64).sum();
    // The first reading holds the traces read, before any call.
    run.read();
    let pass = Pass {
        target,
        programs: &programs,
        traces: &traces,
        cpu_share: args.cpu_share,
        rss_limit_mb: args.rss_limit_mb,
    };
    loop {
        run.pass(&pass);
        if args.ops.is_some_and(|limit| run.ops >= limit) {
            run.last();
            return;
        }
        if run.due() {
            run.read();
        }
    }
}

/// Ends the process on a usage error: `msg` on stderr, exit status 2.
fn exit(msg: String) -> ! {
    eprintln!("allocsoak drift: {msg}");
    std::process::exit(2)
}

/// The target whose programs `args` names (alloc_ops without one), once
/// its numbers are checked; ends the process on one that cannot be.
fn checked(args: &Args) -> Target {
    let target = args.target.unwrap_or(Target::AllocOps);
    if target == Target::DiffMimalloc {
        exit(
            "diff_mimalloc runs two allocators; replay alloc_ops, heap_api, mt_ops or workload"
                .into(),
        );
    }
    if !(args.interval > 0.0) {
        exit(format!("--interval must be above 0, not {}", args.interval));
    }
    if args.every_ops == Some(0) {
        exit("--every-ops must be above 0".into());
    }
    if !(args.cpu_share > 0.0 && args.cpu_share <= 1.0) {
        exit(format!(
            "--cpu-share must be in (0, 1], not {}",
            args.cpu_share
        ));
    }
    target
}

/// The traces at `paths`, each read and parsed whole; ends the process
/// on one that cannot be.
fn read_traces(paths: &[PathBuf]) -> Vec<Trace> {
    paths
        .iter()
        .map(|path| {
            let data =
                std::fs::read(path).unwrap_or_else(|e| exit(format!("{}: {e}", path.display())));
            Trace::parse(&data).unwrap_or_else(|e| exit(format!("{}: {e}", path.display())))
        })
        .collect()
}

/// What a pass over the programs runs, and its limits.
struct Pass<'a> {
    target: Target,
    programs: &'a [PathBuf],
    /// The programs' traces, read whole (`--trace`); empty without.
    traces: &'a [Trace],
    cpu_share: f64,
    rss_limit_mb: u64,
}

/// How often a reading is taken (at the first pass end past it).
enum Every {
    Time(Duration),
    Ops(u64),
}

/// The loop's state.
struct Replay {
    alloc: &'static dyn Allocator,
    /// Ops stepped since the process started.
    ops: u64,
    /// Programs run to their end.
    programs: u64,
    started: Instant,
    every: Every,
    /// When the next reading is due, by the clock.
    next: Instant,
    /// When the next reading is due, by ops stepped.
    next_ops: u64,
    /// Whether each program's memory is sampled (`--peak`), the most
    /// resident bytes one added, and every sample of what they added.
    sample_peak: bool,
    peak: u64,
    samples: Vec<u64>,
    /// Bytes of the process's own it holds between passes (parsed
    /// traces), reported as live so retained memory leaves them out.
    own: u64,
}

impl Replay {
    fn new(alloc: &'static dyn Allocator, every: Every, sample_peak: bool) -> Replay {
        let now = Instant::now();
        Replay {
            alloc,
            ops: 0,
            programs: 0,
            started: now,
            every,
            next: now,
            next_ops: 0,
            sample_peak,
            peak: 0,
            samples: Vec::new(),
            own: 0,
        }
    }

    /// The last reading, and with `--peak` the most resident bytes a
    /// program added (`peak bytes=…`), its samples over the run
    /// ([`drift::Curve`]) and their median (`steady bytes=…`: what the
    /// work holds while it runs), as the process stops at `--ops`.
    fn last(&mut self) {
        self.read();
        if self.sample_peak {
            println!("peak bytes={}", self.peak);
            println!("{}", drift::Curve::of(&self.samples).to_line());
            self.samples.sort_unstable();
            let steady = self.samples.get(self.samples.len() / 2).copied();
            println!("steady bytes={}", steady.unwrap_or(0));
        }
    }

    /// Takes in one run's samples of the bytes it added, less `own` (the
    /// replay's own table of blocks).
    fn sampled(&mut self, added: Vec<u64>, own: u64) {
        let added = added.into_iter().map(|b| b.saturating_sub(own));
        let start = self.samples.len();
        self.samples.extend(added);
        let most = self.samples[start..].iter().copied().max().unwrap_or(0);
        self.peak = self.peak.max(most);
    }

    /// Runs each program of `pass` once, in the CPU share it is given;
    /// ends the process with a last reading when resident memory goes
    /// over its limit (`OVER_RSS_LIMIT`).
    fn pass(&mut self, pass: &Pass) {
        for (i, path) in pass.programs.iter().enumerate() {
            if let Some(trace) = pass.traces.get(i) {
                self.trace(trace, path);
            } else {
                // A merge may have moved it away: the next pass lists again.
                let Ok(data) = std::fs::read(path) else {
                    continue;
                };
                // A violation that needs the programs before it is filed with
                // them, as a fuzz binary's is (`ALLOCSOAK_HISTORY`).
                shadow::history::record(&data);
                let Ok(program) = Program::from_input(pass.target, &data) else {
                    continue;
                };
                self.program(&program, path);
            }
            self.throttle(pass.cpu_share);
            let rss = rss();
            if rss > pass.rss_limit_mb << 20 {
                self.read();
                eprintln!(
                    "allocsoak drift: resident {} MiB is over --rss-limit-mb {}",
                    rss >> 20,
                    pass.rss_limit_mb
                );
                std::process::exit(OVER_RSS_LIMIT);
            }
        }
    }

    /// Runs one program to its end.
    fn program(&mut self, program: &Program, path: &Path) {
        let alloc = self.alloc;
        let (calls, added) = self.measured(path, || {
            let stats = shadow::harness::run_program(program, alloc, Mode::Checked);
            // A workload is one op of many thousand calls: its calls are
            // what the cadence counts.
            match program.target {
                Target::Workload => stats.calls,
                _ => stats.ops,
            }
        });
        self.ops += calls as u64;
        self.sampled(added, 0);
    }

    /// Replays one recorded trace to its end. With `--peak`, prints the
    /// process's memory where the recording read its own (`mark …`).
    fn trace(&mut self, trace: &Trace, path: &Path) {
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        let alloc = self.alloc;
        let replay = shadow::executor::workload::replay;
        let marks = std::sync::Mutex::new(Vec::new());
        let on_mark = |i: usize| marks.lock().unwrap().push((i, rss()));
        let on_mark: shadow::executor::workload::OnMark = &on_mark;
        let sampled = self.sample_peak.then_some(on_mark);
        let (calls, added) = self.measured(path, || {
            replay(trace, &name, alloc, Mode::Checked, sampled).calls
        });
        self.ops += calls as u64;
        // The replay's own table of blocks is not the allocator's.
        let tables = shadow::executor::workload::table_bytes(trace) as u64;
        self.sampled(added, tables);
        for (i, replayed) in marks.into_inner().unwrap() {
            let mark = drift::Mark {
                calls: trace.resident[i].calls as u64,
                recorded: trace.resident[i].bytes,
                replayed,
            };
            println!("{}", mark.to_line());
        }
    }

    /// Runs `run` (a program or a trace, from `path`), which returns the
    /// calls it counts; ends the process when it fails. With `--peak`,
    /// also the resident bytes it added, sampled every 5 ms and at its
    /// end.
    fn measured(&mut self, path: &Path, run: impl FnOnce() -> usize) -> (usize, Vec<u64>) {
        let base = rss();
        let samples = std::sync::Mutex::new(Vec::new());
        let done = AtomicBool::new(false);
        let sampling = self.sample_peak;
        let result = std::thread::scope(|s| {
            if sampling {
                s.spawn(|| {
                    while !done.load(Ordering::Relaxed) {
                        let added = rss().saturating_sub(base);
                        samples
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(added);
                        std::thread::sleep(Duration::from_millis(5));
                    }
                });
            }
            let mut calls = 0;
            let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                shadow::tolerance::tolerate(|| calls = run())
            }));
            done.store(true, Ordering::Relaxed);
            result.map(|()| calls)
        });
        let Ok(calls) = result else {
            eprintln!("allocsoak drift: failed in {}", path.display());
            std::process::exit(1);
        };
        self.programs += 1;
        let mut samples = samples.into_inner().unwrap_or_else(|e| e.into_inner());
        if sampling {
            samples.push(rss().saturating_sub(base));
        }
        (calls, samples)
    }

    /// Sleeps while the CPU time used is above `share` of the time passed.
    fn throttle(&mut self, share: f64) {
        if share >= 1.0 {
            return;
        }
        let ahead = cpu_time().as_secs_f64() / share - self.started.elapsed().as_secs_f64();
        if ahead > 0.0 {
            std::thread::sleep(Duration::from_secs_f64(ahead.min(1.0)));
        }
    }

    fn due(&self) -> bool {
        match self.every {
            Every::Time(_) => Instant::now() >= self.next,
            Every::Ops(_) => self.ops >= self.next_ops,
        }
    }

    /// Prints a reading now.
    fn read(&mut self) {
        match self.every {
            Every::Time(interval) => self.next = Instant::now() + interval,
            Every::Ops(ops) => self.next_ops = self.ops + ops,
        }
        let reading = Reading {
            secs: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            ops: self.ops,
            rss: rss(),
            anon: anon(),
            live: self.own,
            cpu_ms: cpu_time().as_millis() as u64,
            programs: self.programs,
            figures: self
                .alloc
                .memory_figures()
                .into_iter()
                .map(|(name, value)| (name.to_string(), value))
                .collect(),
        };
        let mut out = std::io::stdout().lock();
        // The soak reads these as they come; a closed pipe means it is gone.
        if writeln!(out, "{}", reading.to_line())
            .and_then(|_| out.flush())
            .is_err()
        {
            std::process::exit(0);
        }
    }
}

/// The program files of `inputs`, folders listed (not recursively), sorted.
fn list(inputs: &[PathBuf]) -> Result<Vec<PathBuf>, String> {
    let mut files = Vec::new();
    for input in inputs {
        if input.is_dir() {
            let entries = std::fs::read_dir(input)
                .map_err(|e| format!("cannot list {}: {e}", input.display()))?;
            files.extend(
                entries
                    .filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.is_file()),
            );
        } else if input.is_file() {
            files.push(input.clone());
        } else {
            return Err(format!(
                "{} is neither a file nor a folder",
                input.display()
            ));
        }
    }
    files.sort();
    Ok(files)
}

/// Resident bytes of this process (0 when unread).
fn rss() -> u64 {
    shadow::resident::resident_bytes().unwrap_or(0)
}

/// Anonymous resident bytes of this process (0 when unread).
fn anon() -> u64 {
    std::fs::read_to_string("/proc/self/smaps_rollup")
        .ok()
        .and_then(|s| {
            let line = s.lines().find(|l| l.starts_with("Anonymous:"))?;
            line.split_whitespace().nth(1)?.parse::<u64>().ok()
        })
        .map_or(0, |kb| kb * 1024)
}

/// CPU time (user + system) this process used, all threads.
fn cpu_time() -> Duration {
    // SAFETY: `rusage` is a C struct of integers (`timeval`s, `c_long`s): all zeros is a
    // valid value.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: `getrusage` writes one `rusage` through a pointer to a live local of that
    // type; `RUSAGE_SELF` is a valid `who`.
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let tv = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    tv(usage.ru_utime) + tv(usage.ru_stime)
}
