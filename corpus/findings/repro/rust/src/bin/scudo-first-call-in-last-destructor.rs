//! scudo 0.1.3 (scudo-sys 0.2.2's Scudo, exclusive TSDs): a thread whose
//! first Scudo call is made in its last round of thread-exit destructors
//! sets up its thread cache there, which links the cache's stats into
//! Scudo's global list and asks for Scudo's own exit destructor
//! (`pthread_setspecific`). That destructor waits out three rounds before
//! it tears down (`DestructorIterations`), but glibc runs only four
//! (`PTHREAD_DESTRUCTOR_ITERATIONS`): the teardown never comes, the stats
//! stay in the list after the thread's thread-locals are gone, and a later
//! thread's exit, unlinking its own, fails Scudo's check of the list
//! (`CHECK failed @ scudo-standalone/list.h:203 (Prev->Next) == (X)`),
//! an abort. glibc's malloc, jemalloc and mimalloc serve such a call.
//! allocsoak found it in mt_ops (`exit-alloc`, a call in a thread's last
//! destructors, then threads exiting), after 40 to 55 programs.
//! expected: SIGABRT

use std::alloc::{GlobalAlloc, Layout};

static mut KEY: libc::pthread_key_t = 0;

/// A thread-exit destructor that re-arms itself until glibc's last round,
/// then makes the thread's first Scudo call there.
unsafe extern "C" fn late(round: *mut libc::c_void) {
    let round = round as usize;
    if round < 3 {
        // SAFETY: the key was created in `main`; a value re-arms this destructor.
        unsafe { libc::pthread_setspecific(KEY, (round + 1) as *mut libc::c_void) };
        return;
    }
    let layout = Layout::from_size_align(64, 8).unwrap();
    // SAFETY: one block of Scudo's, freed once with its layout.
    unsafe {
        let p = scudo::GlobalScudoAllocator.alloc(layout);
        scudo::GlobalScudoAllocator.dealloc(p, layout);
    }
}

fn main() {
    // SAFETY: creates a key with `late` as its destructor, once, before any thread.
    unsafe { libc::pthread_key_create(std::ptr::addr_of_mut!(KEY), Some(late)) };
    for _ in 0..200 {
        // SAFETY: arms `late` for this thread's exit.
        std::thread::spawn(|| unsafe { libc::pthread_setspecific(KEY, 1 as *mut libc::c_void) })
            .join()
            .unwrap();
        churn();
    }
}

/// Threads that allocate and exit, four at a time: each links and
/// unlinks its own stats.
fn churn() {
    for _ in 0..50 {
        let threads: Vec<_> = (0..4)
            .map(|_| {
                std::thread::spawn(|| {
                    let layout = Layout::from_size_align(64, 8).unwrap();
                    // SAFETY: one block of Scudo's, freed once with its layout.
                    unsafe {
                        let p = scudo::GlobalScudoAllocator.alloc(layout);
                        scudo::GlobalScudoAllocator.dealloc(p, layout);
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
    }
}
