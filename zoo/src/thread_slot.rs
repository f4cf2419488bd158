//! The calling thread's slot: a small index per live thread, what
//! `LostRemoteFree`'s owners and `ExitReclaimRace`'s caches go by (as a
//! real allocator indexes its per-thread heaps), and the hook that runs
//! when the thread holding one exits.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;

/// Slots there are. A thread takes the lowest free one and gives it back
/// when it exits, so the executor's few live threads (its own and four
/// workers, however often they restart) never share one; past this many
/// live threads, the rest share slots round robin, which the bugs that
/// use them shrug off (a free between two threads sharing one is local).
pub(super) const SLOTS: usize = 16;

/// The slots live threads hold, a bit each.
static TAKEN: AtomicU32 = AtomicU32::new(0);
/// Where threads go when every slot is held.
static SHARED: AtomicUsize = AtomicUsize::new(0);

/// What a thread's exit does to the per-thread state its slot indexes.
pub(super) trait OnExit: Send + Sync {
    /// The thread holding `slot` is exiting (its thread-local destructors
    /// are running); the slot is given back once this returns.
    fn exit(&self, slot: usize);
}

struct Held {
    slot: usize,
    /// Whether the slot's bit is this thread's to give back (not shared).
    owned: bool,
    on_exit: RefCell<Vec<Arc<dyn OnExit>>>,
}

impl Held {
    fn take() -> Held {
        let mut taken = TAKEN.load(Ordering::Relaxed);
        loop {
            let free = (!taken).trailing_zeros() as usize;
            if free >= SLOTS {
                return Held::new(SHARED.fetch_add(1, Ordering::Relaxed) % SLOTS, false);
            }
            match TAKEN.compare_exchange_weak(
                taken,
                taken | 1 << free,
                Ordering::AcqRel,
                Ordering::Relaxed,
            ) {
                Ok(_) => return Held::new(free, true),
                Err(now) => taken = now,
            }
        }
    }

    fn new(slot: usize, owned: bool) -> Held {
        Held {
            slot,
            owned,
            on_exit: RefCell::new(Vec::new()),
        }
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        // The hooks first: the slot is this thread's until they are done.
        for hook in self.on_exit.take() {
            hook.exit(self.slot);
        }
        if self.owned {
            TAKEN.fetch_and(!(1 << self.slot), Ordering::AcqRel);
        }
    }
}

thread_local! {
    static HELD: Held = Held::take();
}

/// The calling thread's slot. A call from another thread-local
/// destructor, once this thread's slot is given back, gets a shared one.
pub(super) fn current() -> usize {
    HELD.try_with(|h| h.slot)
        .unwrap_or_else(|_| SHARED.fetch_add(1, Ordering::Relaxed) % SLOTS)
}

/// A number for the calling thread, never reused, that a call from its
/// last destructors can read too (`std::thread::current()` panics there:
/// `exit-alloc` calls the allocator after the thread's locals are gone).
pub(super) fn token() -> u64 {
    thread_local! {
        static TOKEN: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }
    static NEXT: AtomicU64 = AtomicU64::new(1);
    TOKEN.with(|t| {
        if t.get() == 0 {
            t.set(NEXT.fetch_add(1, Ordering::Relaxed));
        }
        t.get()
    })
}

/// The calling thread's own slot; `None` once its exit hooks have run
/// (a call from a later destructor).
pub(super) fn held() -> Option<usize> {
    HELD.try_with(|h| h.slot).ok()
}

/// Runs `hook` when the calling thread exits (once, however often it is
/// asked). Does nothing from a thread already running its destructors.
pub(super) fn on_exit<T: OnExit + 'static>(hook: &Arc<T>) {
    let _ = HELD.try_with(|h| {
        let mut hooks = h.on_exit.borrow_mut();
        let this = Arc::as_ptr(hook).cast::<()>();
        if !hooks.iter().any(|o| Arc::as_ptr(o).cast::<()>() == this) {
            hooks.push(hook.clone());
        }
    });
}
