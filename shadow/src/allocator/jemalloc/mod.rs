//! jemalloc through tikv-jemalloc-sys (prefixed `_rjem_` symbols, so it runs
//! beside the process's malloc): the `*allocx` family, explicit arenas with
//! explicit tcaches as its heap API ([`heaps`]), and the extras ([`extras`]:
//! `rallocx` with `MALLOCX_ZERO`, `xallocx`, `sdallocx`, `nallocx`, decay
//! times and purges).

use std::ffi::{c_int, c_void};

use tikv_jemalloc_sys as je;

use super::{Allocator, Extras, HeapId, Heaps, InUse, LiveBlock, Resize};
use crate::edges::IMPOSSIBLE_FROM;

mod ctl;
mod extras;
mod heaps;

use heaps::{Book, Heap};

pub struct Jemalloc {
    arenas: Book,
}

impl Jemalloc {
    pub fn new() -> Jemalloc {
        Jemalloc {
            arenas: Book::new(),
        }
    }
}

fn flags(align: usize, zeroed: bool) -> c_int {
    je::MALLOCX_ALIGN(align) | if zeroed { je::MALLOCX_ZERO } else { 0 }
}

/// The `*allocx` calls are undefined for size 0 and for sizes that overflow
/// a size class; those go through the classic API, which fails cleanly.
fn classic(size: usize) -> bool {
    size == 0 || size >= IMPOSSIBLE_FROM
}

/// Resizes a block with `*allocx` (`new_size` not [`classic`]). Even sizes
/// try to resize in place first, so both paths are covered. Only an exact
/// class change counts: sized free (`sdallocx`) later needs
/// `nallocx(new_size) == sallocx(p)`, and an in-place shrink that could not
/// shrink leaves the block in its old class.
///
/// # Safety
/// `p` is a live jemalloc block, `new_size` is not [`classic`], and `flags`
/// hold a power-of-two alignment and only arena and tcache flags of this
/// adapter's.
unsafe fn resize(p: *mut u8, new_size: usize, flags: c_int) -> *mut u8 {
    if new_size.is_multiple_of(2)
        // SAFETY: `p` is live, `new_size` not 0 and `flags` valid (this fn's contract).
        && unsafe { je::xallocx(p.cast(), new_size, 0, flags) == je::nallocx(new_size, flags) }
    {
        return p;
    }
    // SAFETY: as above.
    unsafe { je::rallocx(p.cast(), new_size, flags) }.cast()
}

impl Allocator for Jemalloc {
    /// Its locks are taken around a fork (ASan's and glibc's; mimalloc's
    /// and jemalloc's own fork handlers).
    fn fork_safe(&self) -> bool {
        true
    }

    fn name(&self) -> &str {
        "jemalloc"
    }

    /// What its layout stops: it keeps nothing in or beside its blocks
    /// (slabs' bitmaps and extents' records live elsewhere, thread caches
    /// are arrays), so neither a write into a freed block nor an overflow
    /// past one nor into the header a block does not have reaches its
    /// metadata. Without `opt.safety_checks` (not in
    /// this build) it takes a double, foreign or interior free.
    fn stops(&self) -> &'static [crate::allocator::Attack] {
        &[
            crate::allocator::Attack::FreedWrite,
            crate::allocator::Attack::Overflow,
            crate::allocator::Attack::HeaderWrite,
        ]
    }

    unsafe fn alloc(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        if !classic(size) {
            // SAFETY: `size` is not 0; `align` is a power of two (`Allocator::alloc`'s contract).
            return unsafe { je::mallocx(size, flags(align, zeroed)) }.cast();
        }
        let mut p = std::ptr::null_mut();
        // SAFETY: `p` is a valid out-parameter; the alignment is a power of two (as above) and a
        // multiple of a pointer's size.
        if unsafe { je::posix_memalign(&mut p, align.max(std::mem::size_of::<usize>()), size) } != 0
        {
            return std::ptr::null_mut();
        }
        p.cast()
    }

    unsafe fn calloc(&self, count: usize, size: usize) -> *mut u8 {
        // SAFETY: `calloc` takes any count and size; it fails cleanly on overflow.
        unsafe { je::calloc(count, size) }.cast()
    }

    unsafe fn realloc(&self, p: *mut u8, _old: usize, align: usize, new_size: usize) -> *mut u8 {
        if classic(new_size) {
            // SAFETY: `p` is a live block of this allocator (`Allocator::realloc`'s contract).
            return unsafe { je::realloc(p.cast(), new_size) }.cast();
        }
        // SAFETY: `p` is live (as above), `new_size` is not `classic`, `align` is the block's
        // power-of-two alignment, and `free_flags` adds only `MALLOCX_TCACHE_NONE`.
        unsafe {
            resize(
                p,
                new_size,
                flags(align, false) | self.arenas.free_flags(p as usize),
            )
        }
    }

    /// Unsized: `sdallocx` is the `free-sized` op's ([`extras`]).
    unsafe fn free(&self, p: *mut u8, _size: usize, _align: usize) {
        // SAFETY: `p` is a live block of this allocator (`Allocator::free`'s contract).
        unsafe { je::dallocx(p.cast(), self.arenas.free_flags(p as usize)) }
    }

    unsafe fn usable_size(&self, p: *mut u8, _size: usize, align: usize) -> usize {
        // SAFETY: `p` is a live block of this allocator (`Allocator::usable_size`'s contract).
        unsafe { je::sallocx(p as *const c_void, flags(align, false)) }
    }

    fn heaps(&self) -> Option<&dyn Heaps> {
        Some(self)
    }

    fn extras(&self) -> Option<&dyn Extras> {
        Some(self)
    }

    /// What jemalloc says a block is (`sallocx`) must be what it says such a
    /// request gets (`nallocx`): sized free relies on it. (Arena and tcache
    /// flags change neither, so heap blocks are asked with their alignment
    /// alone.) A heap's block must be in the heap's arena.
    fn validate(&self, live: &[LiveBlock]) -> Result<(), String> {
        for b in live.iter().filter(|b| !classic(b.size)) {
            // SAFETY: assumes `live` holds only this allocator's live blocks (the executor's
            // shadow; this safe fn cannot check), as `sallocx` needs; the size is not 0 or huge.
            let (real, promised) = unsafe {
                (
                    je::sallocx(b.ptr as *const c_void, flags(b.align, false)),
                    je::nallocx(b.size, flags(b.align, false)),
                )
            };
            if real != promised {
                return Err(format!(
                    "sallocx({:#x}) = {real} but nallocx({}, align {}) = {promised}",
                    b.ptr, b.size, b.align
                ));
            }
        }
        for b in live {
            let Some(h) = b.heap.map(Heap::of) else {
                continue;
            };
            let arena = ctl::arena_of(b.ptr);
            if arena != Some(h.arena) {
                return Err(format!(
                    "arenas.lookup({:#x}) = {arena:?}, but the block (size {}) was allocated in arena {}",
                    b.ptr, b.size, h.arena
                ));
            }
        }
        Ok(())
    }

    /// Resets the arenas of deleted heaps (their blocks are all freed by
    /// now) into the pool new heaps take arenas from; the next program
    /// starts with the process's decay times.
    fn reset(&self) {
        self.arenas.sweep();
        extras::set_decay(None);
    }

    /// `stats.allocated` less the bytes in every thread's cache
    /// (`tcache_bytes`, which `allocated` counts until a cache is
    /// flushed). Each thread's cache is an allocation of its own, so the
    /// threads jemalloc serves are counted too.
    fn bytes_in_use(&self) -> Option<InUse> {
        ctl::refresh_stats();
        let allocated = ctl::read::<usize>("stats.allocated")?;
        Some(InUse {
            bytes: allocated.checked_sub(ctl::all_arenas::<usize>("tcache_bytes")?)?,
            threads: ctl::all_arenas::<u32>("nthreads")?,
        })
    }

    /// Flushes this thread's cache and purges every arena's unused dirty
    /// and muzzy pages (`arena.<all>.purge`): what a decay would give
    /// back by now.
    fn trim(&self) {
        ctl::run("thread.tcache.flush");
        ctl::arena_verb(ctl::ARENAS_ALL, "purge");
    }

    /// jemalloc's `stats.*` after an `epoch` refresh: `jemalloc_allocated`,
    /// `_active`, `_resident`, `_retained` and `_mapped`. jemalloc counts
    /// tcache-held blocks as allocated and purges dirty pages only after a
    /// decay, so a free shows in `allocated` at once and in `resident`
    /// later. A statistic jemalloc refuses is left out.
    fn memory_figures(&self) -> Vec<(&'static str, u64)> {
        ctl::refresh_stats();
        FIGURES
            .into_iter()
            .filter_map(|(figure, stat)| ctl::read::<usize>(stat).map(|v| (figure, v as u64)))
            .collect()
    }
}

/// [`Allocator::memory_figures`]' names, and the statistic each reads.
const FIGURES: [(&str, &str); 5] = [
    ("jemalloc_allocated", "stats.allocated"),
    ("jemalloc_active", "stats.active"),
    ("jemalloc_resident", "stats.resident"),
    ("jemalloc_retained", "stats.retained"),
    ("jemalloc_mapped", "stats.mapped"),
];

/// Heap blocks use `*allocx` alone (there is no classic call that names an
/// arena): size 0 asks for 1 byte, the block `malloc(0)` gets in jemalloc,
/// and is freed unsized; impossible sizes, undefined for `*allocx`, fail
/// without a call.
impl Heaps for Jemalloc {
    fn new_heap(&self) -> Option<HeapId> {
        self.arenas.create().map(Heap::id)
    }

    unsafe fn alloc_in(&self, h: HeapId, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        if size >= IMPOSSIBLE_FROM {
            return std::ptr::null_mut();
        }
        let heap = Heap::of(h);
        // SAFETY: the size is not 0, `align` is a power of two and `h` a live heap, whose arena
        // and tcache are valid (`Heaps::alloc_in`'s contract).
        let p = unsafe { je::mallocx(size.max(1), flags(align, zeroed) | heap.flags()) };
        if !p.is_null() {
            self.arenas.allocated(heap);
        }
        p.cast()
    }

    unsafe fn realloc_in(&self, h: HeapId, p: *mut u8, r: Resize) -> *mut u8 {
        let (align, new_size) = (r.align, r.to);
        if new_size >= IMPOSSIBLE_FROM {
            return std::ptr::null_mut();
        }
        // SAFETY: `p` is a live block of live heap `h`, with `align` (`Heaps::realloc_in`'s
        // contract); the size is not `classic`; the flags are its alignment and the heap's.
        unsafe {
            resize(
                p,
                new_size.max(1),
                flags(align, false) | Heap::of(h).flags(),
            )
        }
    }

    /// `rallocx` with `MALLOCX_ZERO` and the heap's arena.
    unsafe fn realloc_zeroed_in(&self, h: HeapId, p: *mut u8, r: Resize) -> Option<*mut u8> {
        let (align, new_size) = (r.align, r.to);
        let flags = flags(align, true) | Heap::of(h).flags();
        // SAFETY: as for `realloc_in` (`Heaps::realloc_zeroed_in`'s contract).
        Some(unsafe { extras::rezalloc(p, new_size, flags) })
    }

    /// `xallocx`: the block stays where it is, in its arena. (Its sized
    /// free is the heap's own, below.)
    fn any_blocks_calls(&self) -> Option<&dyn Extras> {
        Some(self)
    }

    /// `sdallocx` with the heap's tcache flag, as `free_in`.
    unsafe fn free_sized_in(&self, h: HeapId, p: *mut u8, size: usize, align: usize) -> bool {
        if size == 0 {
            return false;
        }
        // SAFETY: `p` is a live block of heap `h` with `size`, `align` (`Heaps::free_sized_in`).
        unsafe { self.free_in(h, p, size, align) };
        true
    }

    unsafe fn free_in(&self, h: HeapId, p: *mut u8, size: usize, align: usize) {
        let heap = Heap::of(h);
        self.arenas.freed(heap);
        if size == 0 {
            // SAFETY: `p` is a live block of live heap `h` (`Heaps::free_in`'s contract).
            unsafe { je::dallocx(p.cast(), heap.tcache_flag()) }
        } else {
            // SAFETY: as above, allocated with `size` and `align`, as `sdallocx` needs.
            unsafe { je::sdallocx(p.cast(), size, flags(align, false) | heap.tcache_flag()) }
        }
    }

    /// Not through the heap's tcache (jemalloc(3), `tcache.create`: "Each
    /// explicit cache can be used by only one thread at a time; the
    /// application must assure that this constraint holds.") but through
    /// the freeing thread's own, as any thread's free of another's block
    /// goes, which is flushed at once (`thread.tcache.flush`: the block
    /// goes back to its arena's bin, racing the owner's fills from it). A
    /// block left in that tcache would come back to the thread's next
    /// request of its class as a block of no heap, which the heap's end
    /// then discards (`arena.<i>.destroy`: "all thread caches which were
    /// used to allocate/deallocate in conjunction with the arena must be
    /// flushed beforehand"; seen here, unflushed, as a live block
    /// `sallocx` no longer knows). A deleted heap's orphan arena takes its
    /// blocks back without a tcache.
    unsafe fn remote_free_in(&self, h: HeapId, p: *mut u8, size: usize, align: usize) {
        self.arenas.freed(Heap::of(h));
        let orphan = self.arenas.free_flags(p as usize);
        match size {
            // SAFETY: `p` is a live block of heap `h` (`Heaps::remote_free_in`'s contract).
            0 => unsafe { je::dallocx(p.cast(), orphan) },
            // SAFETY: as above, allocated with `size` and `align`, as `sdallocx` needs.
            _ => unsafe { je::sdallocx(p.cast(), size, flags(align, false) | orphan) },
        }
        ctl::run("thread.tcache.flush");
    }

    /// `rallocx` without an arena, through the calling thread's tcache,
    /// flushed at once (as [`Heaps::remote_free_in`]): a block that moves
    /// goes to the thread's automatic arena and leaves the heap's.
    unsafe fn remote_realloc_in(&self, h: HeapId, p: *mut u8, r: Resize) -> Option<*mut u8> {
        let (align, new_size) = (r.align, r.to);
        if classic(new_size) {
            return Some(std::ptr::null_mut());
        }
        let orphan = self.arenas.free_flags(p as usize);
        // SAFETY: `p` is a live block with `align` (`Heaps::remote_realloc_in`'s contract);
        // `new_size` is not `classic`.
        let q = unsafe { resize(p, new_size, flags(align, false) | orphan) };
        ctl::run("thread.tcache.flush");
        if !q.is_null() && q != p {
            self.arenas.freed(Heap::of(h));
        }
        Some(q)
    }

    fn reallocs_remotely(&self) -> bool {
        true
    }

    unsafe fn delete(&self, h: HeapId) {
        self.arenas.delete(Heap::of(h))
    }

    unsafe fn destroy(&self, h: HeapId) {
        self.arenas.destroy(Heap::of(h))
    }

    /// Flushes the heap's tcache into its arena, then purges the arena's
    /// unused dirty pages (`force`) or lets them decay.
    fn collect(&self, h: HeapId, force: bool) {
        let heap = Heap::of(h);
        ctl::write_unsigned("tcache.flush", heap.tcache);
        ctl::arena_verb(heap.arena, if force { "purge" } else { "decay" });
    }

    /// jemalloc cannot enumerate an arena's blocks.
    fn visit(&self, _h: HeapId) -> Option<Vec<(usize, usize)>> {
        None
    }

    /// Whether `arenas.lookup` puts `p` in the heap's arena.
    fn contains(&self, h: HeapId, p: usize) -> Option<bool> {
        Some(ctl::arena_of(p) == Some(Heap::of(h).arena))
    }
}
