//! Any Rust `GlobalAlloc` as an allocator under test.

use std::alloc::{GlobalAlloc, Layout};

use super::Allocator;

/// Wraps a `GlobalAlloc`. Zero-size requests become one byte (a zero-size
/// `Layout` is undefined for `GlobalAlloc`); requests `Layout` rejects fail
/// cleanly without reaching the allocator.
///
/// The allocator is held by `&'static` reference, so a `static` allocator
/// that is `Sync` but not `Send` (its type holds raw pointers, as many do)
/// fits as well as a value.
pub struct GlobalAllocAdapter<A: 'static> {
    name: &'static str,
    inner: &'static A,
    size_classes: Option<&'static str>,
    arena_size: Option<usize>,
    max_align: usize,
    single_threaded: bool,
    fork_safe: bool,
    /// The heap corruptions it stops ([`Allocator::stops`]).
    stops: &'static [super::Attack],
    /// The crate's own usable size of a block ([`Self::with_usable_size`]).
    usable: Option<fn(&'static A, *mut u8) -> usize>,
    /// The crate's own count of bytes in use ([`Self::with_in_use`]).
    in_use: Option<fn(&'static A) -> usize>,
    /// The crate's own walk of the blocks in use ([`Self::with_walk`]).
    walk: Option<Walk<A>>,
}

impl<A: GlobalAlloc + Sync> GlobalAllocAdapter<A> {
    /// Wraps a value, which lives for the rest of the process (an
    /// allocator under test is never dropped: its blocks may outlive it).
    pub fn new(name: &'static str, inner: A) -> Self {
        Self::of_static(name, Box::leak(Box::new(inner)))
    }

    /// Wraps a `static` allocator (`&MY_ALLOC`).
    pub fn of_static(name: &'static str, inner: &'static A) -> Self {
        GlobalAllocAdapter {
            name,
            inner,
            size_classes: None,
            arena_size: None,
            max_align: crate::edges::MAX_ALIGN,
            single_threaded: false,
            fork_safe: false,
            stops: &[],
            usable: None,
            in_use: None,
            walk: None,
        }
    }

    /// The allocator, at the address it keeps for the rest of the process:
    /// where an embedded heap's `init` runs (after [`Self::new`] moved it).
    pub fn allocator(&self) -> &'static A {
        self.inner
    }

    /// Declares the allocator a port of another one's size classes
    /// (`"mimalloc"`): `diff_mimalloc` then requires equal usable sizes.
    pub fn with_size_classes(mut self, of: &'static str) -> Self {
        self.size_classes = Some(of);
        self
    }
}

/// A crate's walk of the blocks it holds in use, `(start, size)` each.
pub type Walk<A> = fn(&'static A) -> Vec<(usize, usize)>;

fn layout(size: usize, align: usize) -> Option<Layout> {
    Layout::from_size_align(size.max(1), align).ok()
}

impl<A: GlobalAlloc + Sync> Allocator for GlobalAllocAdapter<A> {
    fn name(&self) -> &str {
        self.name
    }

    unsafe fn alloc(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        match (layout(size, align), zeroed) {
            (None, _) => std::ptr::null_mut(),
            // SAFETY: `l` has a nonzero size (`layout` asks at least 1 byte).
            (Some(l), false) => unsafe { self.inner.alloc(l) },
            // SAFETY: as above.
            (Some(l), true) => unsafe { self.inner.alloc_zeroed(l) },
        }
    }

    unsafe fn realloc(&self, p: *mut u8, old: usize, align: usize, new_size: usize) -> *mut u8 {
        match (layout(old, align), layout(new_size, align)) {
            // SAFETY: `p` is a live block of `inner` with layout `l` (`Allocator::realloc`'s
            // contract); the new size is nonzero and valid in a `Layout` with `align` (checked).
            (Some(l), Some(_)) => unsafe { self.inner.realloc(p, l, new_size.max(1)) },
            _ => std::ptr::null_mut(),
        }
    }

    unsafe fn free(&self, p: *mut u8, size: usize, align: usize) {
        if let Some(l) = layout(size, align) {
            // SAFETY: `p` is a live block of `inner`, layout `l` (`Allocator::free`'s contract).
            unsafe { self.inner.dealloc(p, l) }
        }
    }

    /// The crate's own, where it has one; else the size asked (a
    /// `GlobalAlloc` promises no more).
    unsafe fn usable_size(&self, p: *mut u8, size: usize, _align: usize) -> usize {
        self.usable.map_or(size, |f| f(self.inner, p))
    }

    fn size_classes(&self) -> Option<&'static str> {
        self.size_classes
    }

    fn max_align(&self) -> usize {
        self.max_align
    }

    fn single_threaded(&self) -> bool {
        self.single_threaded
    }

    fn fork_safe(&self) -> bool {
        self.fork_safe
    }

    /// Its OS calls refused on demand, where it makes its own (a crate
    /// that maps its memory, as dlmalloc's `System` does) and the fuzz
    /// binary wraps them.
    fn extras(&self) -> Option<&dyn super::Extras> {
        Some(self)
    }

    fn stops(&self) -> &'static [super::Attack] {
        self.stops
    }

    fn arena(&self) -> Option<super::Arena> {
        self.arena_size
            .map(|size| super::Arena { size, free: None })
    }

    /// The crate's own count, where it has one: a count of the program's
    /// blocks alone (the harness's own go to the process's allocator),
    /// kept by no thread.
    fn bytes_in_use(&self) -> Option<super::InUse> {
        let count = self.in_use?;
        Some(super::InUse {
            bytes: count(self.inner),
            threads: 0,
        })
    }

    /// The crate's own walk, where it has one: of the program's blocks
    /// alone, as the count.
    fn blocks_in_use(&self) -> Option<Vec<(usize, usize)>> {
        self.walk.map(|walk| walk(self.inner))
    }
}

impl<A: 'static> GlobalAllocAdapter<A> {
    /// Declares that the allocator serves every block from one region of
    /// `size` bytes (see [`Allocator::arena`]): a request it cannot fit
    /// may fail, and capacity it loses is a `capacity-leak`. A
    /// `GlobalAlloc` keeps no count of free bytes the adapter can read, so
    /// only the largest block served is compared.
    pub fn with_arena(mut self, size: usize) -> Self {
        self.arena_size = Some(size);
        self
    }

    /// The largest alignment the allocator supports: programs skip larger
    /// requests rather than report them.
    pub fn with_max_align(mut self, align: usize) -> Self {
        self.max_align = align.min(crate::edges::MAX_ALIGN);
        self
    }

    /// Declares it single-threaded (see [`Allocator::single_threaded`]).
    pub fn with_single_thread(mut self) -> Self {
        self.single_threaded = true;
        self
    }

    /// Declares that a child forked while other threads are in it can
    /// allocate (see [`Allocator::fork_safe`]).
    pub fn with_fork_safe(mut self) -> Self {
        self.fork_safe = true;
        self
    }

    /// Declares the heap corruptions it stops (see [`Allocator::stops`]).
    pub fn with_stops(mut self, stops: &'static [super::Attack]) -> Self {
        self.stops = stops;
        self
    }

    /// The crate's own usable size of block `p` (`mimalloc::MiMalloc`'s
    /// `usable_size`, `tikv_jemallocator::usable_size`): programs then
    /// write up to it and check it, as for a C allocator's
    /// `malloc_usable_size`.
    pub fn with_usable_size(mut self, usable: fn(&'static A, *mut u8) -> usize) -> Self {
        self.usable = Some(usable);
        self
    }

    /// Declares the crate's own count of the bytes in blocks it handed out
    /// and has not had back (embedded-alloc's `heap.used()`): a program
    /// that freed everything must leave it where it started, else the
    /// allocator lost a free or its count drifted (`kept-bytes`).
    pub fn with_in_use(mut self, in_use: fn(&'static A) -> usize) -> Self {
        self.in_use = Some(in_use);
        self
    }

    /// Declares the crate's own walk of the blocks it holds in use, as
    /// `(start, size)` (rlsf's `iter_blocks` filtered to occupied ones): a
    /// live block it misses after an op is an `unlisted-block`, and a
    /// block a program freed that the walk still lists once the program
    /// has freed everything is one the allocator kept (`kept-block`).
    pub fn with_walk(mut self, walk: Walk<A>) -> Self {
        self.walk = Some(walk);
        self
    }
}

/// A `GlobalAlloc` has no calls beyond the four; its OS layer, where it
/// maps its own memory, refuses on demand.
impl<A: GlobalAlloc + Sync> super::Extras for GlobalAllocAdapter<A> {
    /// Its `mmap`s and `sbrk`s refused on the program's thread, where the
    /// fuzz binary wraps them (`allocator/os/`); a crate over a fixed
    /// region or the system allocator asks the OS nothing, so a window
    /// changes nothing there.
    fn fail_os(&self, refuse: bool) -> bool {
        super::os::refuse(refuse);
        super::os::wrapped()
    }
}
