//! Worker threads for `mt_ops`, kept alive across programs so a program
//! pays for a thread only when it asks to end one.

use std::sync::mpsc::{channel, Receiver, Sender};
use std::sync::{Mutex, MutexGuard};
use std::thread::JoinHandle;

/// Number of worker threads programs address (worker index modulo this).
pub const WORKERS: usize = 3;

type Job = Box<dyn FnOnce() -> usize + Send>;

struct Worker {
    jobs: Sender<Job>,
    done: Receiver<usize>,
    thread: JoinHandle<()>,
}

impl Worker {
    fn spawn(index: usize) -> Worker {
        let (jobs, job_rx) = channel::<Job>();
        let (done_tx, done) = channel();
        let thread = std::thread::Builder::new()
            .name(format!("allocsoak-worker-{index}"))
            .spawn(move || {
                for job in job_rx {
                    if done_tx.send(job()).is_err() {
                        break;
                    }
                }
            })
            .expect("spawn worker thread");
        Worker { jobs, done, thread }
    }
}

/// The process's worker threads.
pub struct WorkerPool {
    workers: Vec<Option<Worker>>,
}

static POOL: Mutex<WorkerPool> = Mutex::new(WorkerPool {
    workers: Vec::new(),
});

impl WorkerPool {
    /// The pool; held for the length of a program.
    pub fn lock() -> MutexGuard<'static, WorkerPool> {
        POOL.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Runs `job` on worker `index` (starting it if it has exited) and
    /// waits for its result, so programs stay deterministic.
    pub fn run(&mut self, index: usize, job: impl FnOnce() -> usize + Send + 'static) -> usize {
        let index = index % WORKERS;
        if self.workers.len() < WORKERS {
            self.workers.resize_with(WORKERS, || None);
        }
        let w = self.workers[index].get_or_insert_with(|| Worker::spawn(index));
        w.jobs.send(Box::new(job)).expect("worker thread is gone");
        w.done
            .recv()
            .expect("worker thread died while running a job")
    }

    /// Ends worker `index`; blocks it allocated stay live.
    pub fn exit(&mut self, index: usize) {
        if let Some(w) = self.workers.get_mut(index % WORKERS).and_then(Option::take) {
            drop(w.jobs);
            w.thread.join().expect("worker thread panicked");
        }
    }
}
