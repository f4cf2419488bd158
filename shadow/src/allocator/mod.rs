//! The allocator under test: one trait, adapters behind it, chosen by name.
//!
//! Names: `system`, `glibc`, `mimalloc` (or one of [`MIMALLOC_FLAVORS`] in a build
//! with that feature), `jemalloc`, `arena`,
//! `dylib:/path/lib.so[:prefix]`, `zoo:<bug>[+<bug>...][@<base>]`, and the
//! allocators a build declares with [`declare`] (an author's own, from the
//! glue crate `allocsoak` generates out of a config's `[[allocator]]`;
//! soak.toml declares `dlmalloc` and `rlsf` that way).

mod api2;
mod arena;
mod dylib;
mod extras;
mod global;
mod hardening;
mod heaps;
#[cfg(feature = "jemalloc")]
mod jemalloc;
#[cfg(feature = "mimalloc-c")]
mod mimalloc;
mod names;
pub(crate) mod os;
mod system;

pub use api2::Api2Adapter;
pub use arena::FixedArena;
pub use dylib::{split_spec as split_dylib_spec, CFunctions, CHeapApi, Dylib, HeapCheckReturns};
pub use extras::{Extras, GoodSize, Hook, HookCell, InPlace, PurgeDelay, ZeroedFrom};
pub use global::GlobalAllocAdapter;
pub(crate) use hardening::sizes as attack_sizes;
pub use hardening::Attack;
pub use heaps::EmulatedHeaps;
pub use names::{
    bundled_names, by_name, check_name, declare, declare_library, declare_zoo, declared_names,
    linked_c, Make, MakeZoo, BUNDLED,
};
/// The mimalloc builds other than the bundled `mimalloc` (the v2 line,
/// release): each is a cargo feature of its own and a fuzz build of its own,
/// and the build is named after it.
pub const MIMALLOC_FLAVORS: [&str; 3] = ["mimalloc-secure", "mimalloc-debug", "mimalloc-v3"];

/// What a crate that depends on `shadow` adds to the dependency to get
/// allocator `name` (a zoo's `@<base>` too): a mimalloc flavor is a
/// feature, and v3 replaces the default v2. Empty for every other name.
pub fn dependency_features(name: &str) -> &'static str {
    match name.rsplit('@').next().unwrap_or(name) {
        "mimalloc-secure" => r#", features = ["mimalloc-secure"]"#,
        "mimalloc-debug" => r#", features = ["mimalloc-debug"]"#,
        "mimalloc-v3" => r#", default-features = false, features = ["jemalloc", "mimalloc-v3"]"#,
        _ => "",
    }
}

/// The name of the mimalloc flavor this build links.
#[cfg(feature = "mimalloc-c")]
pub use mimalloc::NAME as MIMALLOC;

/// Called by a fuzzing process before it loads its allocator: the bundled
/// mimalloc then purges only when a program asks
/// (`mimalloc::purge_when_asked` says why). jemalloc's decay (10 s) is
/// left as it is: it purges far less often than a program runs.
pub fn purge_when_asked() {
    #[cfg(feature = "mimalloc-c")]
    mimalloc::purge_when_asked();
}

/// Whether plain `malloc(size)` already meets `align`. C promises the
/// alignment of any object that fits the size, capped at 16 on x86-64: a
/// block of 8 bytes or less may be only 8-aligned (mimalloc's are), so those
/// requests go through the aligned API.
pub fn malloc_serves(size: usize, align: usize) -> bool {
    align <= 8 || (align <= 16 && size > 8)
}

/// A heap handle, as the allocator defines it.
pub type HeapId = usize;

/// What realloc to size 0 does in an allocator's API.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReallocToZero {
    /// The block is freed; the result is null (or a fresh block).
    Frees,
    /// The result is a valid minimal block.
    Allocates,
    /// The API leaves it undefined; programs skip it.
    Undefined,
}

/// An allocator's bytes in live blocks ([`Allocator::bytes_in_use`]) and the threads
/// it holds state of (a jemalloc cache is 28 KiB): counts compare at equal `threads`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InUse {
    pub bytes: usize,
    pub threads: u32,
}

/// A live block's resize: the size and alignment it was asked with, and
/// the size asked for now. The calls that resize a block take it whole
/// ([`Heaps::realloc_in`], [`Extras::resize_in_place`], ...).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resize {
    pub old: usize,
    pub align: usize,
    pub to: usize,
}

/// A live block as validators see it.
#[derive(Clone, Copy, Debug)]
pub struct LiveBlock {
    pub ptr: usize,
    pub size: usize,
    pub align: usize,
    /// The heap the block was allocated in, if any.
    pub heap: Option<HeapId>,
}

/// An allocator under test.
///
/// Null from `alloc`, `calloc` or `realloc` means the request failed cleanly;
/// after a failed `realloc` the old block is untouched. Callers pass back the
/// size and alignment they allocated with, so sized APIs can use them.
pub trait Allocator: Send + Sync {
    /// The name `by_name` knows this allocator by.
    fn name(&self) -> &str;

    /// # Safety
    /// `align` is a power of two no larger than `max_align()`.
    unsafe fn alloc(&self, size: usize, align: usize, zeroed: bool) -> *mut u8;

    /// C `calloc`. The default fails on overflow and otherwise allocates zeroed.
    ///
    /// # Safety
    /// As for `alloc`.
    unsafe fn calloc(&self, count: usize, size: usize) -> *mut u8 {
        match count.checked_mul(size) {
            // SAFETY: alignment 1 is a power of two no larger than any `max_align()`.
            Some(n) => unsafe { self.alloc(n, 1, true) },
            None => std::ptr::null_mut(),
        }
    }

    /// # Safety
    /// `ptr` is a live block of this allocator allocated with `old_size`, `align`.
    unsafe fn realloc(
        &self,
        ptr: *mut u8,
        old_size: usize,
        align: usize,
        new_size: usize,
    ) -> *mut u8;

    /// What `realloc(p, 0)` means here. Default: undefined (never called).
    fn realloc_to_zero(&self) -> ReallocToZero {
        ReallocToZero::Undefined
    }

    /// # Safety
    /// `ptr` is a live block of this allocator allocated with `size`, `align`.
    unsafe fn free(&self, ptr: *mut u8, size: usize, align: usize);

    /// Bytes the caller may use. Default: the requested size.
    ///
    /// # Safety
    /// `ptr` is a live block allocated with `size`, `align`.
    unsafe fn usable_size(&self, _ptr: *mut u8, size: usize, _align: usize) -> usize {
        size
    }

    /// `Some("mimalloc")` when the allocator promises mimalloc's size classes
    /// (a mimalloc port): `diff_mimalloc` then requires equal usable sizes.
    fn size_classes(&self) -> Option<&'static str> {
        None
    }

    /// Largest alignment the API supports; programs skip larger requests.
    fn max_align(&self) -> usize {
        crate::edges::MAX_ALIGN
    }

    /// Whether the allocator is documented as single-threaded (an embedded
    /// heap that is `Sync` only to be a `#[global_allocator]` on one core):
    /// programs then skip every op that runs on another thread (worker
    /// calls, race sections, thread exits), whose findings would be by
    /// design, and `mt_ops` is left out of its slots. Default: `false`.
    fn single_threaded(&self) -> bool {
        false
    }

    /// How soon a block of `size` bytes freed by another thread than the
    /// one that allocated it is handed out again, if the allocator
    /// promises it: `Some(n)` says that after `k` such remote frees, every
    /// one of those blocks is reused within `k + n` allocations of that
    /// size and alignment made on the owner's thread or on the freeing
    /// one (a remote free goes back to the owner, as mimalloc's do, or
    /// into the freeing thread's cache, as glibc's and jemalloc's tcaches
    /// do). After a remote-free race the executor allocates that many on
    /// each and reports each block that never came back (`remote-free-lost`):
    /// a remote free that was silently dropped. `None` (the default): no
    /// such promise, as for an allocator that quarantines freed memory
    /// (ASan's, which is `system` in the fuzz builds).
    /// Whether a child forked while other threads are inside it can
    /// allocate (its locks taken around a fork, `pthread_atfork`, as
    /// glibc's, jemalloc's and mimalloc's are): `race-fork` holds it to
    /// that. Default: no such promise (POSIX asks nothing of malloc in a
    /// multi-threaded process's child, and Rust global allocators with
    /// plain locks make none), so `race-fork` skips it.
    fn fork_safe(&self) -> bool {
        false
    }

    /// The heap corruptions the allocator promises to stop ([`Attack`]):
    /// the `attack` op makes each in a forked child and holds it to that.
    /// Default: none (an allocator that is not hardened may do anything).
    fn stops(&self) -> &'static [Attack] {
        &[]
    }

    fn remote_reuse(&self, _size: usize, _align: usize) -> Option<usize> {
        None
    }

    /// Called on the owner's thread after a remote-free race, once the
    /// owner has taken in what other threads freed for it (mimalloc's
    /// `mi_heap_collect`): of `ptrs`, blocks it allocated that other
    /// threads freed, those its own heap still counts in use: remote frees
    /// that were dropped (`remote-free-lost`). `None` (the default): the
    /// allocator cannot say, and [`Allocator::remote_reuse`] is asked.
    /// An allocator whose remote frees come back only after all the free
    /// blocks ahead of them (mimalloc's, measured: after 57,302 blocks of
    /// 8 bytes) can still be held to them this way. `live`: the blocks the
    /// program holds now; a block in use that holds one of them is that
    /// one's, whatever freed address it also covers (a block larger than
    /// asked, a size class's or an aligned request's, may start before a
    /// freed block's address and cover it).
    fn in_use_after_collect(&self, _ptrs: &[usize], _live: &[usize]) -> Option<Vec<usize>> {
        None
    }

    /// The allocator's own heap API, if it has one. Without one, programs
    /// run heap ops on an emulation that only tracks block membership.
    fn heaps(&self) -> Option<&dyn Heaps> {
        None
    }

    /// The allocator's own memory figures, read now: (name, bytes) pairs such as
    /// mimalloc's committed bytes or jemalloc's `stats.resident`. Default: none.
    ///
    /// The figures are the process's, not a program's: every thread's
    /// blocks count, and for `system` the harness's own. A figure the
    /// allocator cannot give right now is left out, not reported as 0.
    fn memory_figures(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }

    /// The calls the allocator has beyond alloc / realloc / free (zeroed
    /// realloc, in-place resize, sized free, purge, ...), if any.
    fn extras(&self) -> Option<&dyn Extras> {
        None
    }

    /// Runs the allocator's consistency checks against the live blocks.
    /// `Err` carries the violation detail.
    fn validate(&self, _live: &[LiveBlock]) -> Result<(), String> {
        Ok(())
    }

    /// Runs the allocator's own check of its whole heap, when it has one
    /// (a declared C allocator's `heap_check`, such as umm_malloc's
    /// `umm_integrity_check`): after every op's calls and before the
    /// first program, on the main thread while no other thread is in the
    /// allocator. `Err` says what the check answered. Default: none.
    ///
    /// A heap the check finds broken right after an op's calls was broken
    /// by those calls, so the finding is keyed by their code path: one bug
    /// that corrupts the heap is one group, whichever symptom (a timeout, a
    /// read past the heap, a block handed out twice) it would show later.
    fn heap_check(&self) -> Result<(), String> {
        Ok(())
    }

    /// Whether it has a [`heap_check`](Allocator::heap_check) (the
    /// executor asks nothing between ops of one that has none).
    fn has_heap_check(&self) -> bool {
        false
    }

    /// Takes an error the allocator reported through a callback since the
    /// last call (mimalloc's `mi_register_error`), if any.
    fn take_error(&self) -> Option<String> {
        None
    }

    /// Called when a program has freed everything: drop per-program state so
    /// the next program starts as a fresh process would (zoo caches).
    fn reset(&self) {}

    /// The bytes the allocator counts in blocks it handed out and has not
    /// had back, blocks in a thread's cache not counted (jemalloc's
    /// `stats.allocated` less its caches' bytes). A program that freed
    /// everything leaves it where it started, or it lost a free
    /// (`kept-bytes`). Default: `None`, no such count.
    fn bytes_in_use(&self) -> Option<InUse> {
        None
    }

    /// The blocks the allocator's own walk of its heap lists in use, as
    /// `(start, size)`; a start may precede the pointer the caller got (a
    /// header). Blocks held for reuse (free lists, a thread's cache) are
    /// not in use. Read after every op: a live block no listed block holds
    /// is one it counts free or lost (`unlisted-block`); and once a
    /// program has freed everything: a block in use then that was not at
    /// the start is one the program gave back and the allocator kept
    /// (`kept-block`). Default: `None`, no walk.
    fn blocks_in_use(&self) -> Option<Vec<(usize, usize)>> {
        None
    }

    /// Gives back to the OS what the allocator holds free, as a real
    /// process's purge timer would have by now. Called between programs
    /// when a fuzzing process has grown ([`crate::resident`]). Default:
    /// nothing.
    fn trim(&self) {}

    /// The fixed region the allocator serves every block from, if it has
    /// one (a static pool, a TLSF over a buffer). Default: `None`, the
    /// allocator grows as it needs, and a null for a request that must
    /// succeed is a `null` violation.
    ///
    /// `Some` changes what null means: the allocator may refuse a request
    /// it cannot serve from what is left of its region right now, and only
    /// then. The executor holds it to that by asking the allocator itself
    /// (a size search over its own alloc and free): a refused request of
    /// `n` bytes is a `null` violation when a block of `n` bytes or more,
    /// with the same alignment, is served right after. This assumes what
    /// every allocator over one region does: a block that holds a larger
    /// request holds a smaller one, and allocating never makes room. In
    /// exchange, capacity the allocator loses is a finding: once a program
    /// has freed everything, the largest block it serves, and its own
    /// count of free bytes where it keeps one, must be what they were when
    /// the program started (`capacity-leak`).
    fn arena(&self) -> Option<Arena> {
        None
    }
}

/// A fixed region an allocator serves every block from
/// ([`Allocator::arena`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Arena {
    /// Bytes of the region, the allocator's headers included: no request
    /// larger can ever be served.
    pub size: usize,
    /// Bytes free in the region when [`Allocator::arena`] was called, by
    /// the allocator's own count (a walk of its blocks), or `None` if it
    /// keeps none.
    pub free: Option<usize>,
}

/// A heap API: blocks allocated in a heap can be freed all at once.
pub trait Heaps: Send + Sync {
    /// A new heap, or `None` when the allocator cannot make one.
    fn new_heap(&self) -> Option<HeapId>;
    /// # Safety
    /// As for [`Allocator::alloc`]; `heap` is live.
    unsafe fn alloc_in(&self, heap: HeapId, size: usize, align: usize, zeroed: bool) -> *mut u8;
    /// # Safety
    /// As for [`Allocator::realloc`]; the block belongs to `heap`.
    unsafe fn realloc_in(&self, heap: HeapId, ptr: *mut u8, r: Resize) -> *mut u8;
    /// # Safety
    /// As for [`Allocator::free`]; the block belongs to `heap`.
    unsafe fn free_in(&self, heap: HeapId, ptr: *mut u8, size: usize, align: usize);
    /// [`Heaps::free_in`] from a thread that is not the heap's, while
    /// other threads may do the same (a race section). Every heap API
    /// allows it; only allocating in a heap is bound to one thread
    /// (mimalloc: "can only be allocate/reallocate from the thread that
    /// created it. Freeing blocks can be done from any thread though.").
    /// The default is `free_in`, for heaps whose every call any thread may
    /// make.
    ///
    /// # Safety
    /// As for [`Heaps::free_in`].
    unsafe fn remote_free_in(&self, heap: HeapId, ptr: *mut u8, size: usize, align: usize) {
        // SAFETY: `heap` and the block are as `free_in` needs (`Heaps::remote_free_in`'s contract).
        unsafe { self.free_in(heap, ptr, size, align) }
    }
    /// Reallocs a block of `heap` from a thread that is not the heap's,
    /// through the allocator's plain realloc: a block that stays where it
    /// is stays in `heap`, one that moves is the calling thread's (out of
    /// any heap). `None` where the API has no such call (a realloc would
    /// allocate in the heap, bound to its thread).
    ///
    /// # Safety
    /// As for [`Heaps::realloc_in`].
    unsafe fn remote_realloc_in(&self, _h: HeapId, _p: *mut u8, _r: Resize) -> Option<*mut u8> {
        None
    }
    /// Whether [`Heaps::remote_realloc_in`] is there.
    fn reallocs_remotely(&self) -> bool {
        false
    }
    /// The zeroed realloc ([`Extras::realloc_zeroed`]) of a block of
    /// `heap`, the new block in `heap` too; `None` where the allocator has
    /// none.
    ///
    /// # Safety
    /// As for [`Heaps::realloc_in`].
    unsafe fn realloc_zeroed_in(&self, _h: HeapId, _p: *mut u8, _r: Resize) -> Option<*mut u8> {
        None
    }
    /// The allocator's own calls, where a heap's block takes them as any
    /// block does: an in-place resize (the block stays in its heap) and a
    /// sized free ([`Heaps::resize_in_place_in`], [`Heaps::free_sized_in`]).
    /// Default: none.
    fn any_blocks_calls(&self) -> Option<&dyn Extras> {
        None
    }
    /// An in-place resize ([`Extras::resize_in_place`]) of a block of
    /// `heap`, which stays in `heap`; `None` where the allocator has none.
    /// Default: [`Heaps::any_blocks_calls`]'.
    ///
    /// # Safety
    /// As for [`Heaps::realloc_in`].
    unsafe fn resize_in_place_in(
        &self,
        _heap: HeapId,
        ptr: *mut u8,
        r: Resize,
        extra: usize,
    ) -> Option<InPlace> {
        // SAFETY: `ptr` is a live block as `r` says (this fn's contract).
        unsafe { self.any_blocks_calls()?.resize_in_place(ptr, r, extra) }
    }
    /// The sized free ([`Extras::free_sized`]) of a block of `heap`; false
    /// where the allocator has none (the block is still live). Default:
    /// [`Heaps::any_blocks_calls`]'.
    ///
    /// # Safety
    /// As for [`Heaps::free_in`].
    unsafe fn free_sized_in(&self, _heap: HeapId, ptr: *mut u8, size: usize, align: usize) -> bool {
        // SAFETY: `ptr` is a live block with `size` and `align` (this fn's contract).
        self.any_blocks_calls()
            .is_some_and(|x| unsafe { x.free_sized(ptr, size, align) })
    }
    /// Ends the heap; its live blocks stay valid and move to the default heap.
    ///
    /// # Safety
    /// `heap` is live and not used again.
    unsafe fn delete(&self, heap: HeapId);
    /// Ends the heap and frees every block in it.
    ///
    /// # Safety
    /// `heap` is live; none of its blocks is used again.
    unsafe fn destroy(&self, heap: HeapId);
    fn collect(&self, heap: HeapId, force: bool);
    /// The blocks the allocator holds live in `heap` as (start, size), or
    /// `None` if it cannot enumerate them. A start may precede the pointer
    /// the caller got (an over-aligned block inside a larger one).
    fn visit(&self, heap: HeapId) -> Option<Vec<(usize, usize)>>;
    /// Whether `heap` holds `ptr`, or `None` if the allocator cannot say.
    fn contains(&self, heap: HeapId, ptr: usize) -> Option<bool>;
}
