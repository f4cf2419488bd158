//! `LostRemoteFree`'s blocks: owned by the thread that allocated them,
//! handed back to it when another thread frees them, through a remote
//! list whose push has its race in plain sight.

use std::collections::HashMap;
use std::ops::RangeInclusive;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, RwLock};

use shadow::allocator::Allocator;

use super::racy_list::RacyList;
use super::thread_slot::{self, SLOTS};

/// The class: every block is taken from the base with the class's largest
/// size, so any block serves any request of it.
pub(super) const CLASS: RangeInclusive<usize> = 1025..=2048;
/// Blocks one owner's remote list holds; past that, a remote free goes to
/// the base.
const CAP: usize = 256;

/// One owner's remote list: a stack in a fixed array.
struct RemoteList {
    /// Pushes hold it shared, so they race only each other; the owner's
    /// pop holds it alone, so it never races a push.
    lock: RwLock<()>,
    top: AtomicUsize,
    slots: [AtomicUsize; CAP],
}

impl RemoteList {
    fn new() -> RemoteList {
        RemoteList {
            lock: RwLock::new(()),
            top: AtomicUsize::new(0),
            slots: [const { AtomicUsize::new(0) }; CAP],
        }
    }

    /// False when the list is full (the caller frees to the base).
    #[inline(never)]
    fn push(&self, p: usize) -> bool {
        let _shared = self.lock.read().unwrap_or_else(|e| e.into_inner());
        let t = self.top.load(Ordering::Acquire);
        if t == CAP {
            return false;
        }
        self.slots[t].store(p, Ordering::Release);
        RacyList::window();
        // The bug: another push between the load and this store wrote the
        // same slot (one of the two blocks is lost), or moved the top past
        // a block this store now leaves above it.
        self.top.store(t + 1, Ordering::Release);
        true
    }

    fn pop(&self) -> Option<usize> {
        let _alone = self.lock.write().unwrap_or_else(|e| e.into_inner());
        let t = self.top.load(Ordering::Acquire);
        if t == 0 {
            return None;
        }
        self.top.store(t - 1, Ordering::Release);
        Some(self.slots[t - 1].load(Ordering::Acquire))
    }
}

/// The class's blocks: which slot owns each live one, and each slot's
/// remote list.
pub(super) struct RemoteFrees {
    owners: Mutex<HashMap<usize, usize>>,
    lists: Box<[RemoteList]>,
}

impl RemoteFrees {
    pub(super) fn new() -> RemoteFrees {
        RemoteFrees {
            owners: Mutex::new(HashMap::new()),
            lists: (0..SLOTS).map(|_| RemoteList::new()).collect(),
        }
    }

    /// A block of the class for the calling thread, which owns it: the
    /// first on its remote list, or a fresh one from `base`. `size` bytes
    /// of it zeroed if `zeroed`.
    ///
    /// # Safety
    /// As [`Allocator::alloc`] on `base`.
    pub(super) unsafe fn alloc(&self, base: &dyn Allocator, size: usize, zeroed: bool) -> *mut u8 {
        let me = thread_slot::current();
        let p = match self.lists[me].pop() {
            Some(p) => p as *mut u8,
            // SAFETY: align 16 is a power of two within every allocator's max_align.
            None => unsafe { base.alloc(*CLASS.end(), 16, false) },
        };
        if p.is_null() {
            return p;
        }
        self.owners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(p as usize, me);
        if zeroed {
            // SAFETY: `p` is a block of `*CLASS.end()` bytes, and `size` is
            // in the class.
            unsafe { std::ptr::write_bytes(p, 0, size) };
        }
        p
    }

    /// Frees block `p` of the class: to `base` on its owner's thread,
    /// onto its owner's remote list on any other.
    ///
    /// # Safety
    /// `p` came from [`RemoteFrees::alloc`] with `base` and is freed once.
    pub(super) unsafe fn free(&self, base: &dyn Allocator, p: *mut u8) {
        let owner = self
            .owners
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(p as usize));
        match owner {
            Some(o) if o != thread_slot::current() && self.lists[o].push(p as usize) => {}
            // SAFETY: `p` came from `alloc` with `base` (this fn's contract), so from `base`
            // with the class's largest size and align 16, and is freed once.
            _ => unsafe { base.free(p, *CLASS.end(), 16) },
        }
    }

    /// Frees every block on the remote lists to `base` (between programs,
    /// with no other thread inside).
    ///
    /// # Safety
    /// `base` is the allocator the blocks came from.
    pub(super) unsafe fn drain(&self, base: &dyn Allocator) {
        for list in self.lists.iter() {
            while let Some(p) = list.pop() {
                // SAFETY: every block on a remote list came from `base` (this fn's contract)
                // with the class's largest size and align 16, and was pushed by its one free.
                unsafe { base.free(p as *mut u8, *CLASS.end(), 16) };
            }
        }
    }
}
