//! The zoo's hook (mimalloc's deferred free, emulated): once the program
//! sets one, every allocation calls it first, with the zoo's state whole.
//! `HookReentryReissue` adds a one-block cache of `CLASS` whose
//! allocation calls the hook between taking the cached block and clearing
//! the cache, as an allocator that calls out from the middle of its slow
//! path does: an allocation made from inside the hook takes the same
//! block, which the outer call then returns too.

use std::ops::RangeInclusive;
use std::sync::Mutex;

use shadow::allocator::{Allocator, Hook, HookCell};

/// The sizes `HookReentryReissue`'s cache holds.
const CLASS: RangeInclusive<usize> = 256..=65536;

pub(super) struct ZooHook {
    /// `HookReentryReissue` is planted.
    reissue: bool,
    /// The program's hook, once it set one.
    hook: HookCell,
    /// `HookReentryReissue`: a freed block of `CLASS`, and its size.
    cached: Mutex<Option<(usize, usize)>>,
}

impl ZooHook {
    pub(super) fn new(reissue: bool) -> ZooHook {
        ZooHook {
            reissue,
            hook: HookCell::new(),
            cached: Mutex::new(None),
        }
    }

    pub(super) fn set(&self, hook: Option<Hook>) {
        self.hook.set(hook);
    }

    /// Calls the hook, if the program set one.
    pub(super) fn call(&self, force: bool) {
        self.hook.call(force);
    }

    /// An allocation's start: the hook, or (the bug planted) the cached
    /// block for a request it holds, with the hook called between taking
    /// the block and clearing the cache (the bug).
    pub(super) fn alloc(&self, size: usize, align: usize, zeroed: bool) -> Option<*mut u8> {
        let fits = self.reissue && CLASS.contains(&size) && align <= 16 && !zeroed;
        let cached = fits.then(|| *self.lock()).flatten();
        let Some((p, _)) = cached.filter(|&(_, held)| size <= held) else {
            self.call(false);
            return None;
        };
        self.call(false);
        *self.lock() = None;
        Some(p as *mut u8)
    }

    /// A free (the bug planted): whether the cache kept block `p` of
    /// `size` bytes.
    pub(super) fn keep(&self, p: *mut u8, size: usize, align: usize) -> bool {
        if !(self.reissue && CLASS.contains(&size) && align <= 16) {
            return false;
        }
        let mut cached = self.lock();
        if cached.is_some() {
            return false;
        }
        *cached = Some((p as usize, size));
        true
    }

    /// A program's end: the cached block goes back to `base`, so each
    /// program starts with the cache empty.
    pub(super) fn drain(&self, base: &dyn Allocator) {
        let cached = self.lock().take();
        if let Some((p, size)) = cached {
            // SAFETY: the cached block is one `base` gave (through `keep`, a zoo free of a
            // block the zoo took from it) and nobody holds; it leaves the cache here, so it is
            // freed once, with the size it was last freed with (the base's `free` ignores it).
            unsafe { base.free(p as *mut u8, size, 16) };
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<(usize, usize)>> {
        self.cached.lock().unwrap_or_else(|e| e.into_inner())
    }
}
