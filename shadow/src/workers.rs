//! Worker threads for `mt_ops`, kept alive across programs so a program
//! pays for a thread only when it asks to end one.
//!
//! [`WorkerPool::run`] runs one job and waits for it: the serial worker ops,
//! deterministic for replay. [`WorkerPool::start`] hands a job over without
//! waiting: a race section starts one per worker, and they run at once;
//! [`WorkerPool::start_last`] hands over a job after which the thread
//! exits (its thread-local destructors racing the other workers).

use std::sync::mpsc::{channel, Sender};
use std::sync::{Mutex, MutexGuard};
use std::thread::JoinHandle;

/// Number of worker threads programs address (worker index modulo this):
/// a race section can have four threads inside the allocator at once.
pub const WORKERS: usize = 4;

/// A job, and whether its thread exits after it.
type Job = (Box<dyn FnOnce() + Send>, Then);

#[derive(Clone, Copy, PartialEq, Eq)]
enum Then {
    Next,
    Exit,
}

struct Worker {
    jobs: Sender<Job>,
    thread: JoinHandle<()>,
}

impl Worker {
    fn spawn(index: usize) -> Worker {
        let (jobs, job_rx) = channel::<Job>();
        let thread = std::thread::Builder::new()
            .name(format!("allocsoak-worker-{index}"))
            .spawn(move || {
                spread(index);
                for (job, then) in job_rx {
                    job();
                    if then == Then::Exit {
                        break;
                    }
                }
            })
            .expect("spawn worker thread");
        Worker { jobs, thread }
    }
}

/// Pins worker `index` to the `index`-th of the CPUs the process may run
/// on (round robin), so a race section's workers run on different cores
/// from its first step. Left to the scheduler, the workers a section wakes
/// were placed on the waking thread's core, and whole runs of sections
/// never had two inside the allocator at once. With one CPU, or when the
/// mask cannot be read or set, the thread stays as it is.
fn spread(index: usize) {
    // SAFETY: `cpu_set_t` is plain bits, valid zeroed; the calls read and
    // write only the set passed, for the calling thread (pid 0).
    unsafe {
        let mut allowed: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        if libc::sched_getaffinity(0, size, &mut allowed) != 0 {
            return;
        }
        let cpus: Vec<usize> = (0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &allowed))
            .collect();
        if cpus.len() < 2 {
            return;
        }
        let mut one: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpus[index % cpus.len()], &mut one);
        libc::sched_setaffinity(0, size, &one);
    }
}

/// The process's worker threads.
pub struct WorkerPool {
    workers: Vec<Option<Worker>>,
    /// Workers handed a last job, not yet reaped.
    exiting: Vec<usize>,
}

static POOL: Mutex<WorkerPool> = Mutex::new(WorkerPool {
    workers: Vec::new(),
    exiting: Vec::new(),
});

impl WorkerPool {
    /// The pool; held for the length of a program.
    pub fn lock() -> MutexGuard<'static, WorkerPool> {
        POOL.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Hands `job` to worker `index` (starting it if it has exited) and
    /// returns at once. Jobs must not panic (allocator calls go through
    /// [`crate::guard`]).
    pub fn start(&mut self, index: usize, job: impl FnOnce() + Send + 'static) {
        self.send(index, Box::new(job), Then::Next);
    }

    /// Hands `job` to worker `index` as [`WorkerPool::start`]; the thread
    /// exits once it is done, its blocks left live. [`WorkerPool::reap`]
    /// waits for the exit to end.
    pub fn start_last(&mut self, index: usize, job: impl FnOnce() + Send + 'static) {
        self.send(index, Box::new(job), Then::Exit);
    }

    fn send(&mut self, index: usize, job: Box<dyn FnOnce() + Send>, then: Then) {
        let index = index % WORKERS;
        if self.workers.len() < WORKERS {
            self.workers.resize_with(WORKERS, || None);
        }
        let w = self.workers[index].get_or_insert_with(|| Worker::spawn(index));
        w.jobs.send((job, then)).expect("worker thread is gone");
        if then == Then::Exit {
            self.exiting.push(index);
        }
    }

    /// Waits until every worker handed a last job has exited (its
    /// thread-local destructors run); the next job starts a fresh thread.
    pub fn reap(&mut self) {
        for index in std::mem::take(&mut self.exiting) {
            self.exit(index);
        }
    }

    /// Runs `job` on worker `index` and waits for its result, so programs
    /// stay deterministic.
    pub fn run<R: Send + 'static>(
        &mut self,
        index: usize,
        job: impl FnOnce() -> R + Send + 'static,
    ) -> R {
        let (tx, rx) = channel();
        self.start(index, move || {
            let _ = tx.send(job());
        });
        rx.recv().expect("worker thread died while running a job")
    }

    /// Ends worker `index`; blocks it allocated stay live.
    pub fn exit(&mut self, index: usize) {
        if let Some(w) = self.workers.get_mut(index % WORKERS).and_then(Option::take) {
            drop(w.jobs);
            w.thread.join().expect("worker thread panicked");
        }
    }
}
