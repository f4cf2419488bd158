//! A `GlobalAlloc` over the system allocator, declared the way an author
//! would declare their own. It is `Sync` but not `Send` (it holds a raw
//! pointer, as allocators that own a region do), so it fits only as a
//! `static`. `BUGGY` has a planted bug: growing a block of 100 to 199
//! bytes copies all but its last 8 bytes. `LEAKY` keeps every freed block
//! of 512 bytes or more, linked from a static (reachable, so LeakSanitizer
//! is silent): only the RSS drift workers see it. `OVERSIZE`'s
//! `usable_size` says 97- to 128-byte blocks hold 8 bytes more than they
//! do: only a declared `usable_size` reaches it.
//!
//! [`Counted`] keeps a count of the bytes in the blocks it handed out,
//! as an allocator's statistics do; `MISCOUNTED`'s realloc that shrinks a
//! block of 4 KiB or more leaves the bytes it gave back counted: the
//! memory is sound, and only the count, declared as `in_use`, shows it.
//!
//! [`ThreadCounted`] keeps its count of bytes in use per thread, as
//! allocators' statistics are kept: each thread counts what it allocated
//! and freed, and `used()` adds the live threads' counts to what exited
//! threads left. `THREAD_MISCOUNTED` counts the first call of every
//! thread but the first twice (where it makes the thread's count): only a
//! count held across a thread's start shows it.
//!
//! [`Walked`] keeps a table of the blocks it handed out, and walks it for
//! the blocks in use, as an allocator's heap walk does; `WALK_KEEPING`'s
//! free of an over-aligned block (64 or more) of 2049 to 4096 bytes
//! leaves it in the table and never frees it: reachable, so
//! LeakSanitizer is silent, and counted nowhere: only the walk, declared
//! as `walk`, shows it. `WALK_UNLISTING`'s zeroed allocation of 2049 to
//! 4096 bytes never enters its table (an allocator whose calloc path
//! takes a block without marking it in use, and would hand it out
//! again): only its walk after an op shows the live block it misses; by
//! the program's end the block is freed and nothing is kept.
//!
//! [`Slack`] is an allocator-api2 allocator over the system allocator
//! that rounds each block up to 16 bytes and says so in the slice it
//! returns; `Slack::OVERLONG`'s slices claim 8 bytes more than it took:
//! only a usable size read from the slice reaches that.

mod mapped;
pub use mapped::{Mapped, MAPPED, MAPPED_LEAKY};

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ptr;
use std::sync::atomic::{AtomicBool, AtomicIsize, AtomicPtr, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

/// The blocks `LEAKY` kept, each holding the address of the one before.
static KEPT: AtomicPtr<u8> = AtomicPtr::new(ptr::null_mut());

pub struct Planted {
    bug: bool,
    leak: bool,
    oversize: bool,
    /// Makes the type `!Send`, as a region pointer would.
    _region: *const u8,
}

// Every call goes to the system allocator, which is thread-safe.
unsafe impl Sync for Planted {}

pub static CLEAN: Planted = Planted {
    bug: false,
    leak: false,
    oversize: false,
    _region: ptr::null(),
};

pub static BUGGY: Planted = Planted {
    bug: true,
    leak: false,
    oversize: false,
    _region: ptr::null(),
};

pub static LEAKY: Planted = Planted {
    bug: false,
    leak: true,
    oversize: false,
    _region: ptr::null(),
};

pub static OVERSIZE: Planted = Planted {
    bug: false,
    leak: false,
    oversize: true,
    _region: ptr::null(),
};

extern "C" {
    fn malloc_usable_size(p: *mut u8) -> usize;
}

impl Planted {
    /// The block's usable size, as the system allocator says.
    ///
    /// # Safety
    /// `p` is a live block of this allocator.
    pub unsafe fn usable_size(&self, p: *mut u8) -> usize {
        let n = malloc_usable_size(p);
        match self.oversize && (97..=128).contains(&n) {
            true => n + 8,
            false => n,
        }
    }
}

unsafe impl GlobalAlloc for Planted {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        if self.leak && layout.size() >= 512 {
            let before = KEPT.swap(p, Ordering::AcqRel);
            p.cast::<*mut u8>().write_unaligned(before);
            return;
        }
        System.dealloc(p, layout)
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let old = layout.size();
        let Ok(new_layout) = Layout::from_size_align(new_size, layout.align()) else {
            return ptr::null_mut();
        };
        let q = System.alloc(new_layout);
        if !q.is_null() {
            let short = self.bug && (100..200).contains(&old) && new_size > old;
            let copied = old.min(new_size) - if short { 8 } else { 0 };
            ptr::copy_nonoverlapping(p, q, copied);
            self.dealloc(p, layout);
        }
        q
    }
}

/// A `GlobalAlloc` over the system allocator that counts the bytes its
/// live blocks were asked for.
pub struct Counted {
    miscount: bool,
    used: AtomicUsize,
}

pub static COUNTED: Counted = Counted {
    miscount: false,
    used: AtomicUsize::new(0),
};

pub static MISCOUNTED: Counted = Counted {
    miscount: true,
    used: AtomicUsize::new(0),
};

impl Counted {
    /// The bytes in blocks handed out and not had back.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }
}

unsafe impl GlobalAlloc for Counted {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            self.used.fetch_add(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        self.used.fetch_sub(layout.size(), Ordering::Relaxed);
        System.dealloc(p, layout)
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let q = System.realloc(p, layout, new_size);
        let old = layout.size();
        let forgets = self.miscount && old >= 4096 && new_size < old;
        if !q.is_null() && !forgets {
            self.used.fetch_add(new_size, Ordering::Relaxed);
            self.used.fetch_sub(old, Ordering::Relaxed);
        }
        q
    }
}

/// A `GlobalAlloc` over the system allocator that counts the bytes its
/// live blocks were asked for, each thread its own count.
pub struct ThreadCounted {
    /// Whether a thread's count, made at its first call, takes that call's
    /// bytes twice, the first thread's aside (the planted bug).
    new_twice: bool,
    /// Whether a thread's count was made yet.
    made: AtomicBool,
    /// What exited threads left, and what was counted after a thread's
    /// own count was gone (its last frees, at its exit).
    exited: AtomicIsize,
    /// Each live thread's count.
    live: Mutex<Vec<Arc<AtomicIsize>>>,
}

pub static THREAD_COUNTED: ThreadCounted = ThreadCounted {
    new_twice: false,
    made: AtomicBool::new(false),
    exited: AtomicIsize::new(0),
    live: Mutex::new(Vec::new()),
};

pub static THREAD_MISCOUNTED: ThreadCounted = ThreadCounted {
    new_twice: true,
    made: AtomicBool::new(false),
    exited: AtomicIsize::new(0),
    live: Mutex::new(Vec::new()),
};

/// A thread's count for one of the statics above.
struct Local {
    of: &'static ThreadCounted,
    count: Arc<AtomicIsize>,
}

impl Drop for Local {
    /// The thread exits: its count moves from the live ones into
    /// `exited`.
    fn drop(&mut self) {
        let mut live = self.of.live.lock().unwrap_or_else(|e| e.into_inner());
        live.retain(|c| !Arc::ptr_eq(c, &self.count));
        let n = self.count.load(Ordering::Relaxed);
        self.of.exited.fetch_add(n, Ordering::Relaxed);
    }
}

thread_local! {
    static LOCAL: RefCell<Vec<Local>> = const { RefCell::new(Vec::new()) };
}

impl ThreadCounted {
    /// The bytes in blocks handed out and not had back: every live
    /// thread's count and what exited ones left.
    pub fn used(&self) -> usize {
        let live = self.live.lock().unwrap_or_else(|e| e.into_inner());
        let threads: isize = live.iter().map(|c| c.load(Ordering::Relaxed)).sum();
        (self.exited.load(Ordering::Relaxed) + threads).max(0) as usize
    }

    /// Adds `bytes` to this thread's count.
    fn count(&'static self, bytes: isize) {
        let counted = LOCAL.try_with(|local| {
            let mut local = local.borrow_mut();
            if let Some(l) = local.iter().find(|l| ptr::eq(l.of, self)) {
                l.count.fetch_add(bytes, Ordering::Relaxed);
                return;
            }
            let twice = self.new_twice && self.made.swap(true, Ordering::Relaxed);
            let count = Arc::new(AtomicIsize::new(if twice { 2 * bytes } else { bytes }));
            let mut live = self.live.lock().unwrap_or_else(|e| e.into_inner());
            live.push(count.clone());
            local.push(Local { of: self, count });
        });
        if counted.is_err() {
            self.exited.fetch_add(bytes, Ordering::Relaxed);
        }
    }

    /// `self` as the static it is.
    fn this(&self) -> &'static ThreadCounted {
        match self.new_twice {
            false => &THREAD_COUNTED,
            true => &THREAD_MISCOUNTED,
        }
    }
}

unsafe impl GlobalAlloc for ThreadCounted {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            self.this().count(layout.size() as isize);
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        self.this().count(-(layout.size() as isize));
        System.dealloc(p, layout)
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let q = System.realloc(p, layout, new_size);
        if !q.is_null() {
            self.this().count(new_size as isize - layout.size() as isize);
        }
        q
    }
}

/// A `GlobalAlloc` over the system allocator with a table of its blocks
/// in use, start to size (the table itself lives in the process's
/// allocator, not in this one).
pub struct Walked {
    keeps: bool,
    unlists: bool,
    table: Mutex<BTreeMap<usize, usize>>,
}

pub static WALKED: Walked = Walked {
    keeps: false,
    unlists: false,
    table: Mutex::new(BTreeMap::new()),
};

pub static WALK_KEEPING: Walked = Walked {
    keeps: true,
    unlists: false,
    table: Mutex::new(BTreeMap::new()),
};

pub static WALK_UNLISTING: Walked = Walked {
    keeps: false,
    unlists: true,
    table: Mutex::new(BTreeMap::new()),
};

impl Walked {
    /// The blocks in use, `(start, size)`, as its walk finds them.
    pub fn blocks(&self) -> Vec<(usize, usize)> {
        self.table().iter().map(|(&p, &n)| (p, n)).collect()
    }

    fn table(&self) -> std::sync::MutexGuard<'_, BTreeMap<usize, usize>> {
        self.table.lock().unwrap_or_else(|e| e.into_inner())
    }
}

unsafe impl GlobalAlloc for Walked {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc(layout);
        if !p.is_null() {
            self.table().insert(p as usize, layout.size());
        }
        p
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        let p = System.alloc_zeroed(layout);
        let unlisted = self.unlists && (2049..=4096).contains(&layout.size());
        if !p.is_null() && !unlisted {
            self.table().insert(p as usize, layout.size());
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        let kept = layout.align() >= 64 && (2049..=4096).contains(&layout.size());
        if self.keeps && kept {
            return;
        }
        self.table().remove(&(p as usize));
        System.dealloc(p, layout)
    }
}

/// An allocator that must not move once initialized, as an embedded heap
/// whose free lists point back into it: `init` records where it is, and
/// every call checks it is still there (a panic if not, or if `init` never
/// ran). Declared with `new` and `init`, it runs clean only if allocsoak
/// initializes it where it stays.
pub struct Pinned {
    at: AtomicPtr<Pinned>,
}

impl Pinned {
    pub const fn empty() -> Pinned {
        Pinned {
            at: AtomicPtr::new(ptr::null_mut()),
        }
    }

    /// # Safety
    /// `self` must not move afterwards.
    pub unsafe fn init(&self) {
        self.at.store(self as *const Pinned as *mut Pinned, Ordering::Release);
    }

    fn check(&self) {
        let at = self.at.load(Ordering::Acquire);
        assert!(
            ptr::eq(at, self),
            "Pinned used at {self:p}, initialized at {at:p}: moved after init, or never initialized"
        );
    }
}

unsafe impl GlobalAlloc for Pinned {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        self.check();
        System.alloc(layout)
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        self.check();
        System.dealloc(p, layout)
    }
}

/// An allocator-api2 allocator that rounds every block up to 16 bytes, and
/// returns the rounded length; `overlong` claims 8 bytes more.
#[derive(Default)]
pub struct Slack {
    overlong: bool,
}

impl Slack {
    pub const OVERLONG: Slack = Slack { overlong: true };

    fn block(&self, layout: Layout, zeroed: bool) -> Result<ptr::NonNull<[u8]>, allocator_api2::alloc::AllocError> {
        let taken = Slack::taken(layout)?;
        // SAFETY: `taken` has a non-zero size (the adapter asks for 1 or more).
        let p = unsafe {
            match zeroed {
                false => System.alloc(taken),
                true => System.alloc_zeroed(taken),
            }
        };
        let p = ptr::NonNull::new(p).ok_or(allocator_api2::alloc::AllocError)?;
        let claimed = taken.size() + if self.overlong { 8 } else { 0 };
        Ok(ptr::NonNull::slice_from_raw_parts(p, claimed))
    }

    fn taken(layout: Layout) -> Result<Layout, allocator_api2::alloc::AllocError> {
        let size = layout.size().checked_next_multiple_of(16);
        size.and_then(|s| Layout::from_size_align(s, layout.align()).ok())
            .ok_or(allocator_api2::alloc::AllocError)
    }
}

unsafe impl allocator_api2::alloc::Allocator for &Slack {
    fn allocate(&self, layout: Layout) -> Result<ptr::NonNull<[u8]>, allocator_api2::alloc::AllocError> {
        self.block(layout, false)
    }

    /// Its own (the trait's default zeroes the whole slice, which would
    /// show `overlong` without the slice's length ever being read).
    fn allocate_zeroed(&self, layout: Layout) -> Result<ptr::NonNull<[u8]>, allocator_api2::alloc::AllocError> {
        self.block(layout, true)
    }

    unsafe fn deallocate(&self, p: ptr::NonNull<u8>, layout: Layout) {
        // Any size between the one asked and the slice's fits (the
        // trait's contract), and each rounds up to the same block.
        if let Ok(taken) = Slack::taken(layout) {
            System.dealloc(p.as_ptr(), taken)
        }
    }
}
