//! Worker threads for `mt_ops`, kept alive across programs so a program
//! pays for a thread only when it asks to end one.
//!
//! [`WorkerPool::run`] runs one job and waits for it: the serial worker ops,
//! deterministic for replay, on the caller's CPU. [`WorkerPool::start`]
//! hands a job over without waiting: a race section starts one per worker,
//! each on its own CPU, and they run at once; [`WorkerPool::start_last`]
//! hands over a job after which the thread exits (its thread-local
//! destructors racing the other workers). A worker moves between the two
//! places as its jobs ask ([`Place`]).

use std::os::unix::thread::JoinHandleExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{channel, Sender};
use std::sync::{Mutex, MutexGuard, OnceLock};
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
    /// The CPU the thread is pinned to now (`None`: where it started).
    cpu: Option<usize>,
}

/// Worker threads started so far in this process.
static SPAWNED: AtomicU64 = AtomicU64::new(0);

/// How many worker threads this process has started: a count that moved
/// means threads came or went (a race section's exit, the first program
/// that needed a worker), whichever program was running.
pub fn spawned() -> u64 {
    SPAWNED.load(Ordering::Relaxed)
}

impl Worker {
    fn spawn(index: usize) -> Worker {
        SPAWNED.fetch_add(1, Ordering::Relaxed);
        let (jobs, job_rx) = channel::<Job>();
        let thread = std::thread::Builder::new()
            .name(format!("allocsoak-worker-{index}"))
            .spawn(move || {
                for (job, then) in job_rx {
                    job();
                    if then == Then::Exit {
                        break;
                    }
                }
            })
            .expect("spawn worker thread");
        Worker {
            jobs,
            thread,
            cpu: None,
        }
    }

    /// Pins the thread to `cpu` (when it is not there already).
    fn pin(&mut self, cpu: usize) {
        if self.cpu == Some(cpu) {
            return;
        }
        // SAFETY: `cpu_set_t` is plain bits, valid zeroed; the call reads
        // only the set passed, for a thread this worker owns (joined only
        // when the worker is dropped, so the handle is live).
        let set = unsafe {
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut one);
            let size = std::mem::size_of::<libc::cpu_set_t>();
            libc::pthread_setaffinity_np(self.thread.as_pthread_t(), size, &one)
        };
        self.cpu = (set == 0).then_some(cpu);
    }
}

/// Where a worker runs its next job.
#[derive(Clone, Copy)]
enum Place {
    /// On the calling thread's CPU: a serial job, for which the caller
    /// only waits. Handing a job to a thread asleep on another CPU and
    /// being woken by it again took 60 µs in a fuzz binary on 2 vCPUs,
    /// 10-13 µs on the caller's (docs/benchmarks/2026-11-29-stop-50.md):
    /// more than most allocator calls take.
    Beside,
    /// On the `index`-th of the CPUs the process may run on (round
    /// robin): a race section's workers run on different cores from its
    /// first step. Left to the scheduler, the workers a section wakes
    /// were placed on the waking thread's core, and whole runs of sections
    /// never had two inside the allocator at once.
    Spread(usize),
}

impl Place {
    /// The CPU, or `None` when the process may run on one CPU only (or
    /// its CPUs cannot be read): the thread stays where it is.
    fn cpu(self) -> Option<usize> {
        let cpus = cpus();
        if cpus.len() < 2 {
            return None;
        }
        match self {
            // SAFETY: no arguments, no memory touched.
            Place::Beside => usize::try_from(unsafe { libc::sched_getcpu() }).ok(),
            Place::Spread(index) => Some(cpus[index % cpus.len()]),
        }
    }
}

/// The CPUs the process may run on, as first read.
fn cpus() -> &'static [usize] {
    static CPUS: OnceLock<Vec<usize>> = OnceLock::new();
    CPUS.get_or_init(|| {
        // SAFETY: `cpu_set_t` is plain bits, valid zeroed; the call writes
        // only the set passed, for the calling thread (pid 0).
        unsafe {
            let mut allowed: libc::cpu_set_t = std::mem::zeroed();
            let size = std::mem::size_of::<libc::cpu_set_t>();
            if libc::sched_getaffinity(0, size, &mut allowed) != 0 {
                return Vec::new();
            }
            (0..libc::CPU_SETSIZE as usize)
                .filter(|&c| libc::CPU_ISSET(c, &allowed))
                .collect()
        }
    })
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

    /// Hands `job` to worker `index` (starting it if it has exited) on its
    /// own CPU ([`Place::Spread`]) and returns at once. Jobs must not
    /// panic (allocator calls go through [`crate::guard`]).
    pub fn start(&mut self, index: usize, job: impl FnOnce() + Send + 'static) {
        self.send(index, Box::new(job), Then::Next, Place::Spread(index));
    }

    /// Hands `job` to worker `index` as [`WorkerPool::start`]; the thread
    /// exits once it is done, its blocks left live. [`WorkerPool::reap`]
    /// waits for the exit to end.
    pub fn start_last(&mut self, index: usize, job: impl FnOnce() + Send + 'static) {
        self.send(index, Box::new(job), Then::Exit, Place::Spread(index));
    }

    fn send(&mut self, index: usize, job: Box<dyn FnOnce() + Send>, then: Then, place: Place) {
        let index = index % WORKERS;
        if self.workers.len() < WORKERS {
            self.workers.resize_with(WORKERS, || None);
        }
        let w = self.workers[index].get_or_insert_with(|| Worker::spawn(index));
        if let Some(cpu) = place.cpu() {
            w.pin(cpu);
        }
        w.jobs.send((job, then)).expect("worker thread is gone");
        if then == Then::Exit {
            self.exiting.push(index);
        }
    }

    /// Waits until every worker handed a last job has exited (its
    /// thread-local destructors run); the next job starts a fresh thread.
    pub fn reap(&mut self) {
        for index in std::mem::take(&mut self.exiting) {
            self.join(index);
        }
    }

    /// Runs `job` on worker `index`, on the caller's CPU
    /// ([`Place::Beside`]), and waits for its result, so programs stay
    /// deterministic.
    pub fn run<R: Send + 'static>(
        &mut self,
        index: usize,
        job: impl FnOnce() -> R + Send + 'static,
    ) -> R {
        let (tx, rx) = channel();
        let job = Box::new(move || {
            let _ = tx.send(job());
        });
        self.send(index, job, Then::Next, Place::Beside);
        rx.recv().expect("worker thread died while running a job")
    }

    /// Runs `job` on worker `index` in its thread's last moments, on the
    /// caller's CPU, and waits for the thread to end (the next job starts
    /// a fresh one). It runs after the thread's Rust thread-locals are
    /// gone and after the first round of its thread-specific data
    /// destructors, where allocators end a thread's heap (mimalloc's
    /// thread-done, jemalloc's tsd cleanup), as a program's own late
    /// destructor calls the allocator ([`late`]).
    pub fn run_at_exit<R: Send + 'static>(
        &mut self,
        index: usize,
        job: impl FnOnce() -> R + Send + 'static,
    ) -> R {
        let (tx, rx) = channel();
        let job: Box<dyn FnOnce() + Send> = Box::new(move || {
            let _ = tx.send(job());
        });
        self.send(
            index,
            Box::new(move || late::arm(job)),
            Then::Next,
            Place::Beside,
        );
        self.exit(index);
        rx.recv().expect("worker thread ended without its last job")
    }

    /// Ends worker `index` on the caller's CPU, as a serial job; blocks it
    /// allocated stay live.
    pub fn exit(&mut self, index: usize) {
        if let (Some(Some(w)), Some(cpu)) =
            (self.workers.get_mut(index % WORKERS), Place::Beside.cpu())
        {
            w.pin(cpu);
        }
        self.join(index);
    }

    /// Ends worker `index`'s thread where it runs (a race section's exit
    /// is not moved while it races); the next job starts a fresh one.
    fn join(&mut self, index: usize) {
        if let Some(w) = self.workers.get_mut(index % WORKERS).and_then(Option::take) {
            drop(w.jobs);
            w.thread.join().expect("worker thread panicked");
        }
    }
}

/// A job run in a thread's last moments ([`WorkerPool::run_at_exit`]):
/// the value of a thread-specific data key whose destructor runs it once
/// a round of destructors has passed.
mod late {
    use std::sync::OnceLock;

    /// An armed job, and the destructor rounds still to let pass.
    struct Late {
        wait: u8,
        job: Box<dyn FnOnce() + Send>,
    }

    /// One round: every destructor of the first (an allocator's thread
    /// exit among them: its key is older than this one, and a round runs
    /// keys in order) has run when the job does.
    const WAIT: u8 = 1;

    pub(super) fn key() -> libc::pthread_key_t {
        static KEY: OnceLock<libc::pthread_key_t> = OnceLock::new();
        *KEY.get_or_init(|| {
            let mut key = 0;
            // SAFETY: `key` is a valid place for the new key; `run` has the
            // destructor's signature. The key is never deleted.
            let made = unsafe { libc::pthread_key_create(&mut key, Some(run)) };
            assert_eq!(
                made, 0,
                "pthread_key_create: no key left for a thread's last job"
            );
            key
        })
    }

    /// Runs `job` on the calling thread as it exits.
    pub(super) fn arm(job: Box<dyn FnOnce() + Send>) {
        set(Box::new(Late { wait: WAIT, job }));
    }

    fn set(late: Box<Late>) {
        let raw = Box::into_raw(late);
        // SAFETY: the key lives for the process; the value is a leaked box
        // that `run` takes back (once: the thread clears a value before
        // it calls its destructor).
        if unsafe { libc::pthread_setspecific(key(), raw.cast()) } != 0 {
            // SAFETY: `raw` was not stored, so it is still this box alone.
            let late = unsafe { Box::from_raw(raw) };
            (late.job)();
        }
    }

    /// The key's destructor: lets `wait` rounds pass (setting the value
    /// again makes the thread run another round), then runs the job.
    extern "C" fn run(value: *mut libc::c_void) {
        // SAFETY: the key's only values are boxes `set` leaked, and the
        // thread hands each to this destructor once.
        let mut late = unsafe { Box::from_raw(value.cast::<Late>()) };
        if late.wait > 0 {
            late.wait -= 1;
            return set(late);
        }
        (late.job)();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cpu() -> usize {
        // SAFETY: no arguments, no memory touched.
        usize::try_from(unsafe { libc::sched_getcpu() }).expect("sched_getcpu")
    }

    /// Pins the calling thread to `cpu`.
    fn stay_on(cpu: usize) {
        // SAFETY: as in `Worker::pin`, for the calling thread (pid 0).
        let set = unsafe {
            let mut one: libc::cpu_set_t = std::mem::zeroed();
            libc::CPU_SET(cpu, &mut one);
            libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &one)
        };
        assert_eq!(set, 0, "could not pin the test thread to CPU {cpu}");
    }

    #[test]
    fn a_last_job_runs_after_the_threads_exit_handlers() {
        static DONE: Mutex<Vec<&str>> = Mutex::new(Vec::new());
        struct Local;
        impl Drop for Local {
            fn drop(&mut self) {
                DONE.lock().unwrap().push("thread-local");
            }
        }
        thread_local! {
            static LOCAL: Local = const { Local };
        }
        extern "C" fn key_done(_: *mut libc::c_void) {
            DONE.lock().unwrap().push("key");
        }
        // A key made after the last job's own (a round runs keys in
        // order): the job must still wait for its destructor.
        let _ = late::key();
        let mut key = 0;
        // SAFETY: `key` is a valid place for the key; `key_done` has the
        // destructor's signature.
        let made = unsafe { libc::pthread_key_create(&mut key, Some(key_done)) };
        assert_eq!(made, 0);
        let mut pool = WorkerPool::lock();
        pool.run(0, move || {
            LOCAL.with(|_| ());
            // SAFETY: a non-null value the destructor never reads.
            unsafe {
                libc::pthread_setspecific(key, std::ptr::NonNull::<u8>::dangling().as_ptr().cast())
            };
        });
        let before = spawned();
        let seen = pool.run_at_exit(0, || DONE.lock().unwrap().clone());
        assert_eq!(seen, ["thread-local", "key"]);
        pool.run(0, || ());
        assert_eq!(spawned(), before + 1, "the next job starts a fresh thread");
        // SAFETY: no thread holds a value of it any more.
        unsafe { libc::pthread_key_delete(key) };
    }

    #[test]
    fn a_serial_job_runs_on_the_callers_cpu_and_a_race_job_on_its_own() {
        let cpus = cpus().to_vec();
        let mut pool = WorkerPool::lock();
        let home = *cpus.last().expect("the process may run on some CPU");
        stay_on(home);
        for w in 0..WORKERS {
            assert_eq!(pool.run(w, cpu), home, "worker {w}'s serial job");
            let (tx, rx) = channel();
            pool.start(w, move || tx.send(cpu()).unwrap());
            let spread = match cpus.len() {
                1 => home,
                n => cpus[w % n],
            };
            assert_eq!(rx.recv().unwrap(), spread, "worker {w}'s race job");
            assert_eq!(pool.run(w, cpu), home, "worker {w}'s next serial job");
        }
    }
}
