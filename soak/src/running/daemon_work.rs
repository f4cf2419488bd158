//! The soak at work ([`super::run`]'s middle): [`work`] starts its
//! workers (the builder, the drift and Miri workers, the fuzz workers
//! whose loops are `Soak`'s methods in `daemon.rs`, the intake worker)
//! and, until they end, the main thread prints progress and talks to
//! systemd.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use crate::engines::project::Part;
use crate::foundation::config::Series;
use crate::foundation::notify::Notifier;
use crate::rss;
use crate::running::soak::Soak;
use crate::running::{build, status};

/// What the soak's workers beside the fuzz workers are given.
pub(super) struct Beside {
    /// The drift series to watch, and the share of the cores they take.
    pub drift: Vec<Series>,
    pub drift_share: f64,
    /// What the builder makes beside the first slices (`--build`).
    pub later: Vec<Part>,
}

/// How the main thread tells of the soak while its workers run.
pub(super) struct Progress<'a> {
    /// systemd, told the soak's state.
    pub notifier: &'a Notifier,
    /// How often the progress table is printed.
    pub every: Duration,
    /// When the workers started.
    pub started: Instant,
}

/// Runs the soak's workers to their end: the builder (on a core of its
/// own), a drift worker per series, the Miri worker, `jobs` fuzz workers
/// and the intake worker, while this thread shows the `progress`.
pub(super) fn work(soak: &Soak, beside: &Beside, jobs: usize, progress: &Progress) {
    let fuzzing_done = AtomicBool::new(false);
    let workers_done = AtomicBool::new(false);
    // The drift workers stop with the fuzz workers (at the deadline too).
    let drift_stop = AtomicBool::new(false);
    let watch = rss::Watch {
        project: &soak.project,
        state: &soak.state,
        store: &soak.store,
        config: &soak.config,
        stop: &drift_stop,
        run_id: Some(soak.run_id),
        // The replay binary takes a share of one core at most.
        share: (beside.drift_share / beside.drift.len().max(1) as f64).min(1.0),
        filed: &soak.new_groups,
        filing: soak.budget(),
    };
    // The builder holds its core before any worker can take it.
    let builder = match beside.later.is_empty() {
        true => None,
        false => soak.cores.take(1, &soak.stop),
    };
    std::thread::scope(|s| {
        if let Some(cores) = builder {
            let later = &beside.later;
            s.spawn(move || build::beside(soak, later, cores));
        }
        for series in &beside.drift {
            let watch = &watch;
            s.spawn(move || soak.drift_worker(watch, series));
        }
        s.spawn(|| crate::running::miri::worker(soak, &fuzzing_done));
        let handles: Vec<_> = (0..jobs.max(1))
            .map(|_| s.spawn(|| soak.worker()))
            .collect();
        let intake = s.spawn(|| soak.intake_worker(&fuzzing_done));
        s.spawn(|| {
            for h in handles {
                let _ = h.join();
            }
            fuzzing_done.store(true, Ordering::Relaxed);
            let _ = intake.join();
            workers_done.store(true, Ordering::Relaxed);
        });
        show_until(soak, progress, &workers_done);
        drift_stop.store(true, Ordering::Relaxed);
    });
}

/// Pings systemd's watchdog and prints the progress every
/// `progress.every` until the workers are `done`.
fn show_until(soak: &Soak, progress: &Progress, done: &AtomicBool) {
    let mut last_print = Instant::now();
    let mut last_ping = Instant::now();
    let ping = progress
        .notifier
        .watchdog_interval()
        .unwrap_or(Duration::from_secs(10));
    while !done.load(Ordering::Relaxed) {
        std::thread::sleep(Duration::from_millis(250));
        if last_ping.elapsed() >= ping {
            progress.notifier.watchdog();
            last_ping = Instant::now();
        }
        if last_print.elapsed() >= progress.every {
            last_print = Instant::now();
            print_progress(soak, progress);
        }
    }
}

/// Prints the progress table and what is left to build, and tells
/// systemd the table's first line.
fn print_progress(soak: &Soak, progress: &Progress) {
    let store = soak.lock_store();
    if let Ok(text) = status::render(
        &soak.state,
        &store,
        Some((progress.started.elapsed(), soak.shown_remaining())),
        &soak.config.drift.trend(),
    ) {
        println!("{text}");
        let left = soak.unbuilt.left();
        if !left.is_empty() && soak.unbuilt.building() {
            let left: Vec<String> = left.iter().map(Part::to_string).collect();
            println!("  building on one core: {}", left.join(", "));
        }
        progress.notifier.status(text.lines().next().unwrap_or(""));
    }
}
