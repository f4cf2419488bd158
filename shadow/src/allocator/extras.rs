//! The calls an allocator offers beyond alloc / realloc / free, each
//! optional: programs skip an op whose call the allocator does not have.
//! The invariant each one is held to is in docs/targets.md's table of optional calls.

use super::Resize;

/// What an in-place resize did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum InPlace {
    /// The block is still at `ptr` (which must be where it was) and holds
    /// at least `owned` bytes, which the caller now owns.
    Resized { ptr: usize, owned: usize },
    /// The block could not be resized in place and is as it was.
    Unchanged,
}

impl InPlace {
    /// What an `expand`-style call did (`mi_expand`, a C allocator's
    /// `expand`): `q` is the block, now holding `new_size` bytes, or null.
    pub fn of_expand(q: *mut std::ffi::c_void, new_size: usize) -> InPlace {
        match q.is_null() {
            true => InPlace::Unchanged,
            false => InPlace::Resized {
                ptr: q as usize,
                owned: new_size,
            },
        }
    }
}

/// How long freed memory may stay with the allocator before it goes back
/// to the OS: mimalloc's `purge_delay`, jemalloc's `dirty_decay_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PurgeDelay {
    /// Purged as it is freed.
    Immediate,
    /// After this many milliseconds.
    Millis(u32),
    /// Never (until an explicit purge).
    Never,
}

impl PurgeDelay {
    /// The delay in milliseconds as mimalloc's `purge_delay` and jemalloc's
    /// `*_decay_ms` both take it: 0 at once, -1 never.
    pub fn millis(self) -> i32 {
        match self {
            PurgeDelay::Immediate => 0,
            PurgeDelay::Millis(ms) => ms.try_into().unwrap_or(i32::MAX),
            PurgeDelay::Never => -1,
        }
    }
}

/// Where the bytes a zeroed realloc must zero start, in the old block.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ZeroedFrom {
    /// Past its requested size: a zeroed realloc to `n` of a block last
    /// asked for `m` bytes leaves bytes `[m, n)` reading zero, whatever
    /// the block went through. The strongest reading; the zoo keeps it.
    Request,
    /// Past the bytes the program wrote, for a block of the zeroed family
    /// (allocated zeroed, resized since only by zeroed reallocs that grew
    /// it or by calls that kept it where it was, in its usable size): the
    /// allocator zeroed it whole, the program wrote only within its
    /// requested sizes as they changed, so bytes `[m, n)` past the furthest
    /// one it wrote must read zero after a zeroed realloc from `m` to `n`,
    /// shrinks in between included. For any other block, past its usable
    /// size. What a zeroed realloc whose zeroing starts at the old usable
    /// size owes ("only valid on memory originally allocated with zero
    /// initialization"): the precondition is about the block's origin. The
    /// contract the harness holds every real allocator to unless it
    /// declares less.
    Written,
    /// Past its usable size, for every block (`quote` says why): less
    /// than [`ZeroedFrom::Written`], for a release known to keep stale
    /// bytes in a zeroed block's slack.
    Usable { quote: &'static str },
}

impl ZeroedFrom {
    /// mimalloc's zeroed reallocs as its releases up to 2.3.2 and 3.3.2
    /// do them (mimalloc#763): one that moves a block zeroes the new block
    /// only up to the new request, so a later zeroed realloc that grows it
    /// within its usable size, in place, shows what the slack held. The
    /// bundled mimalloc is held to its old usable size; a declared
    /// mimalloc release is held to [`ZeroedFrom::Written`] and files the
    /// bug (`corpus/findings/`), unless it declares `zeroed_realloc = "usable"`.
    pub const MIMALLOC: ZeroedFrom = ZeroedFrom::Usable {
        quote: "mimalloc#763: mi_rezalloc_aligned can fail to zero-init all data after several reallocations",
    };
}

/// The optional calls. Every method has a default meaning "not in this
/// API" (`None` or `false`), so an adapter implements what it has.
pub trait Extras: Send + Sync {
    /// A realloc whose new bytes read zero, from where
    /// [`Extras::zeroed_from`] says (`mi_rezalloc`, `mi_recalloc` and
    /// their aligned forms; jemalloc's `rallocx` with `MALLOCX_ZERO`;
    /// `grow_zeroed`). Null: failed, the block is as it was.
    ///
    /// # Safety
    /// As for [`super::Allocator`]: a pointer is a live block of this
    /// allocator, with the size and alignment it was allocated with.
    unsafe fn realloc_zeroed(&self, _ptr: *mut u8, _r: Resize) -> Option<*mut u8> {
        None
    }

    /// Where [`Extras::realloc_zeroed`]'s zero bytes start: past the old
    /// request unless the allocator documents less.
    fn zeroed_from(&self) -> ZeroedFrom {
        ZeroedFrom::Request
    }

    /// Resizes the block in place to at least `r.to` bytes, and to
    /// `r.to + extra` if it can (`mi_expand`, jemalloc's `xallocx`).
    ///
    /// # Safety
    /// As for [`super::Allocator`]: a pointer is a live block of this
    /// allocator, with the size and alignment it was allocated with.
    unsafe fn resize_in_place(&self, _ptr: *mut u8, _r: Resize, _extra: usize) -> Option<InPlace> {
        None
    }

    /// Frees with the size and alignment the block was asked with
    /// (`mi_free_size_aligned`, `sdallocx`). `false`: not in the API.
    ///
    /// # Safety
    /// As for [`super::Allocator`]: a pointer is a live block of this
    /// allocator, with the size and alignment it was allocated with.
    unsafe fn free_sized(&self, _ptr: *mut u8, _size: usize, _align: usize) -> bool {
        false
    }

    /// Plain C-style realloc of a block allocated with any alignment
    /// (`realloc`, `mi_realloc`): the result only has malloc's alignment.
    ///
    /// # Safety
    /// As for [`super::Allocator`]: a pointer is a live block of this
    /// allocator, with the size and alignment it was allocated with.
    unsafe fn realloc_plain(&self, _ptr: *mut u8, _r: Resize) -> Option<*mut u8> {
        None
    }

    /// `realloc(NULL, size)`: a fresh block, as `malloc(size)` gives.
    ///
    /// # Safety
    /// As for [`super::Allocator`]: a pointer is a live block of this
    /// allocator, with the size and alignment it was allocated with.
    unsafe fn realloc_null(&self, _size: usize) -> Option<*mut u8> {
        None
    }

    /// `free(NULL)`: does nothing. `false`: not in the API.
    ///
    /// # Safety
    /// As for [`super::Allocator`]: a pointer is a live block of this
    /// allocator, with the size and alignment it was allocated with.
    unsafe fn free_null(&self) -> bool {
        false
    }

    /// What the allocator's good-size call promises of a fresh request
    /// of `size` and `align`, where it has one (`mi_good_size`,
    /// `nallocx`, a C allocator's `good_size`).
    fn good_size(&self, _size: usize, _align: usize) -> Option<GoodSize> {
        None
    }

    /// Sets the purge delay and purges what is due (`force`: everything
    /// freed). Live blocks must not change. `false`: not in the API.
    fn purge(&self, _delay: PurgeDelay, _force: bool) -> bool {
        false
    }

    /// The bytes of whole free pages the allocator still holds resident
    /// right after a forced purge with no delay (`purge(Immediate, true)`),
    /// which must release every one of them: jemalloc's dirty and muzzy
    /// pages by its own count; mimalloc's arena blocks that hold none of
    /// `live` (the blocks the program holds, `(start, len)`) nor a page of
    /// its own. `None`: no such count.
    fn free_pages_kept(&self, _live: &[(usize, usize)]) -> Option<usize> {
        None
    }

    /// Registers `hook` as the callback the allocator calls from inside
    /// its own calls so the program may free memory there, and allocate
    /// (mimalloc's deferred free: "re-entrant", called from its allocation
    /// slow path, `force`: free all you can). `None` takes it away again, so
    /// the allocator's calls cost nothing more outside the programs that
    /// use it. `false`: not in the API.
    fn set_hook(&self, _hook: Option<Hook>) -> bool {
        false
    }

    /// Makes the allocator call its hook now, from inside one of its own
    /// calls (mimalloc: a collect). `false`: not in the API.
    fn run_hook(&self) -> bool {
        false
    }

    /// Makes the allocator's OS layer refuse every request for memory
    /// (`true`) until called with `false`: a request it cannot serve from
    /// what it holds fails, and must fail cleanly (null, nothing else
    /// changed, nothing kept). mimalloc: no new memory from the OS or an
    /// arena; a C allocator built from its sources: its `mmap` and `sbrk`.
    /// `false`: no OS layer allocsoak can fail.
    fn fail_os(&self, _refuse: bool) -> bool {
        false
    }
}

/// A callback an allocator calls from inside its own calls
/// ([`Extras::set_hook`]); its argument is the allocator's `force`. It
/// never unwinds.
pub type Hook = fn(bool);

/// Where an adapter keeps the [`Hook`] a program set, for the callback it
/// registers with its allocator to call.
pub struct HookCell(std::sync::atomic::AtomicPtr<()>);

impl HookCell {
    pub const fn new() -> HookCell {
        HookCell(std::sync::atomic::AtomicPtr::new(std::ptr::null_mut()))
    }

    pub fn set(&self, hook: Option<Hook>) {
        let hook = hook.map_or(std::ptr::null_mut(), |h| h as *mut ());
        self.0.store(hook, std::sync::atomic::Ordering::Release);
    }

    /// Calls the hook, if one was set.
    pub fn call(&self, force: bool) {
        let hook = self.0.load(std::sync::atomic::Ordering::Acquire);
        if !hook.is_null() {
            // SAFETY: the cell only ever holds a `Hook` that `set` stored, cast to a pointer.
            let hook: Hook = unsafe { std::mem::transmute::<*mut (), Hook>(hook) };
            hook(force);
        }
    }
}

impl Default for HookCell {
    fn default() -> HookCell {
        HookCell::new()
    }
}

/// What a good-size call's answer promises of a fresh block's usable size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GoodSize {
    /// Exactly this usable size: jemalloc's `nallocx` ("the real size of
    /// the allocation that would result"), mimalloc's bins, or a declared
    /// C allocator up to its `good_size_exact_up_to`.
    Exact(usize),
    /// An estimate no smaller than the request: mimalloc documents
    /// `mi_good_size` only as "Generally, `mi_usable_size(mi_malloc(size))
    /// == mi_good_size(size)`". A value below the request is a violation;
    /// any other differs from the usable size by design, never a finding.
    AtLeastAsked(usize),
}
