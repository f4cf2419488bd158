//! C mimalloc through libmimalloc-sys (`extended`): the aligned family, the
//! heap API, `mi_usable_size`, `mi_register_error`, and the extras (zeroed
//! realloc, `mi_expand`, sized free, `mi_good_size`, purge settings).
//!
//! The secure, debug and v3 flavors are compile-time (the sys crate links
//! one copy per build), so the name of this adapter is the flavor of the
//! build: [`super::MIMALLOC_FLAVORS`].

use std::ffi::{c_int, c_void};
use std::sync::Mutex;

use libmimalloc_sys as mi;

use super::heaps::collect_block;
use super::{
    malloc_serves, Allocator, Extras, HeapId, Heaps, LiveBlock, PurgeDelay, ReallocToZero, Resize,
};

mod extras;
#[cfg(not(feature = "mimalloc-v3"))]
mod kept;

#[cfg(all(feature = "mimalloc", feature = "mimalloc-v3"))]
compile_error!("`mimalloc` links mimalloc's v2 line, so `mimalloc-v3` builds without it: `--no-default-features --features jemalloc,mimalloc-v3`");

#[cfg(feature = "mimalloc-secure")]
pub const NAME: &str = "mimalloc-secure";
#[cfg(all(feature = "mimalloc-debug", not(feature = "mimalloc-secure")))]
pub const NAME: &str = "mimalloc-debug";
#[cfg(feature = "mimalloc-v3")]
pub const NAME: &str = "mimalloc-v3";
#[cfg(not(any(
    feature = "mimalloc-secure",
    feature = "mimalloc-debug",
    feature = "mimalloc-v3"
)))]
pub const NAME: &str = "mimalloc";

static ERROR: Mutex<Option<String>> = Mutex::new(None);

/// Largest request the debug build is given: its segment checks walk a
/// huge block's 64 KiB slices on every call, so a 1 TiB block takes
/// minutes, and an aligned realloc to 8 TiB checks its fresh page reads
/// zero, byte by byte. Larger requests and reallocs are refused here, as
/// a clean failure (the release build takes them all).
const DEBUG_MAX_REQUEST: usize = 256 << 20;

/// Whether the debug build refuses a request (or a realloc) of `size`.
fn refused(size: usize) -> bool {
    NAME == "mimalloc-debug" && size > DEBUG_MAX_REQUEST
}

unsafe extern "C" fn on_error(code: c_int, _arg: *mut c_void) {
    // ENOMEM and EOVERFLOW are how a request that may fail fails; the others
    // (double free, corrupted free list, invalid pointer) are bugs.
    let what = match code {
        libc::ENOMEM | libc::EOVERFLOW => return,
        libc::EAGAIN => "double free (EAGAIN)",
        libc::EFAULT => "corrupted free list or metadata (EFAULT)",
        libc::EINVAL => "invalid pointer (EINVAL)",
        _ => "unknown error",
    };
    let mut slot = ERROR.lock().unwrap_or_else(|e| e.into_inner());
    slot.get_or_insert_with(|| format!("mimalloc reported {what}, errno {code}"));
}

pub struct Mimalloc {
    /// The purge delay the process started with; a program's `purge` op
    /// changes it for that program only.
    default_purge_delay: std::ffi::c_long,
}

impl Mimalloc {
    pub fn new() -> Mimalloc {
        // SAFETY: `on_error` has `mi_error_fun`'s C signature, ignores `arg` (null here) and
        // only takes a `Mutex`, so any thread may call it.
        unsafe { mi::mi_register_error(Some(on_error), std::ptr::null_mut()) };
        // A block as old as the process, as every real program has. Without
        // it, each program's last free hands the thread's segment back and
        // the next program's first call takes a fresh one: under the fuzz
        // builds' ASan tracking (`MI_TRACK_ASAN`) that poisons and unpoisons
        // the segment's shadow on every program (issue 27: 6 % of a fuzzing
        // run in `memset`, and page faults). Segments are still freed by
        // programs that outgrow one, by large and huge blocks and by threads.
        // SAFETY: `mi_malloc` has no precondition; the block is never freed
        // nor handed to the executor.
        let _anchor = unsafe { mi::mi_malloc(8) };
        Mimalloc {
            // SAFETY: no pointer involved; `mi_option_get` range-checks the option (15 is
            // `mi_option_purge_delay` in both v2 and v3).
            default_purge_delay: unsafe { mi::mi_option_get(PURGE_DELAY) },
        }
    }
}

impl Allocator for Mimalloc {
    /// Its locks are taken around a fork (ASan's and glibc's; mimalloc's
    /// and jemalloc's own fork handlers).
    fn fork_safe(&self) -> bool {
        true
    }

    /// The secure build's checks (`MI_SECURE=4`): a double free is found
    /// in the page's free lists, a free outside its segments by their
    /// cookies (or a fault reading one), and a freed block's overwritten link by its encoding
    /// (`corrupted free list entry`), each an error through
    /// `mi_register_error`, which [`Allocator::take_error`] takes. The
    /// other builds promise none.
    fn stops(&self) -> &'static [crate::allocator::Attack] {
        if cfg!(feature = "mimalloc-secure") {
            &crate::allocator::Attack::ALL
        } else {
            &[]
        }
    }

    fn name(&self) -> &str {
        NAME
    }

    /// `mi_process_info`: the process's resident and committed bytes as
    /// mimalloc counts them. On Linux both are its count of committed bytes
    /// (it reads no RSS there), and that count moves in arena steps: with
    /// overcommit mimalloc commits each arena whole as it reserves it
    /// (1 GiB), and a purge (`MADV_DONTNEED`) leaves the count as it was.
    /// So the figures cover every byte mimalloc holds and grow when it
    /// takes a new arena, not with each page it touches or returns.
    fn memory_figures(&self) -> Vec<(&'static str, u64)> {
        let (mut rss, mut commit, mut other) = (0usize, 0usize, 0usize);
        // SAFETY: each argument is a valid `size_t` out-parameter on this stack frame, which
        // `mi_process_info` only writes; sharing `other` among the unread ones is harmless.
        unsafe {
            libmimalloc_sys::mi_process_info(
                &mut other,
                &mut other,
                &mut other,
                &mut rss,
                &mut other,
                &mut commit,
                &mut other,
                &mut other,
            )
        };
        vec![
            ("mimalloc_rss", rss as u64),
            ("mimalloc_commit", commit as u64),
        ]
    }

    unsafe fn alloc(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        if refused(size) {
            return std::ptr::null_mut();
        }
        // SAFETY: any size may be asked; `align` is a power of two (`Allocator::alloc`'s contract).
        unsafe {
            match (malloc_serves(size, align), zeroed) {
                (true, false) => mi::mi_malloc(size),
                (true, true) => mi::mi_zalloc(size),
                (false, false) => mi::mi_malloc_aligned(size, align),
                (false, true) => mi::mi_zalloc_aligned(size, align),
            }
        }
        .cast()
    }

    unsafe fn calloc(&self, count: usize, size: usize) -> *mut u8 {
        if refused(count.saturating_mul(size)) {
            return std::ptr::null_mut();
        }
        // SAFETY: `mi_calloc` takes any count and size, and fails cleanly on overflow.
        unsafe { mi::mi_calloc(count, size) }.cast()
    }

    unsafe fn realloc(&self, p: *mut u8, _old: usize, align: usize, new_size: usize) -> *mut u8 {
        if refused(new_size) {
            return std::ptr::null_mut();
        }
        if malloc_serves(new_size, align) {
            // SAFETY: `p` is a live block of this allocator (`Allocator::realloc`'s contract).
            unsafe { mi::mi_realloc(p.cast(), new_size) }.cast()
        } else {
            // SAFETY: as above, and `align`, the block's alignment, is a power of two.
            unsafe { mi::mi_realloc_aligned(p.cast(), new_size, align) }.cast()
        }
    }

    fn realloc_to_zero(&self) -> ReallocToZero {
        ReallocToZero::Allocates
    }

    unsafe fn free(&self, p: *mut u8, _size: usize, _align: usize) {
        // SAFETY: `p` is a live block of this allocator (`Allocator::free`'s contract).
        unsafe { mi::mi_free(p.cast()) }
    }

    unsafe fn usable_size(&self, p: *mut u8, _size: usize, _align: usize) -> usize {
        // SAFETY: `p` is a live block of this allocator (`Allocator::usable_size`'s contract).
        unsafe { mi::mi_usable_size(p.cast()) }
    }

    /// The v2 line's classes (a port declares `mimalloc`); v3's are its own.
    fn size_classes(&self) -> Option<&'static str> {
        match NAME {
            "mimalloc-v3" => Some("mimalloc-v3"),
            _ => Some("mimalloc"),
        }
    }

    /// A remote free goes to the owner's page (or, the first into a full
    /// page, to the heap's delayed list); a forced `mi_heap_collect` takes
    /// both in, and a heap visit lists what is still in use. Forced: a
    /// normal collect leaves the heap's full pages alone (mimalloc 2.3's
    /// `mi_heap_collect_ex`, "normally don't visit full pages, issue
    /// #1220"), so a remote free on a full page's thread-free list would
    /// stay counted in use. A block in use that holds a live one is that
    /// one's (see below). v3 reworked its thread-local heaps, and the sys
    /// crate declares no default heap for it: not checked there.
    #[cfg(not(feature = "mimalloc-v3"))]
    fn in_use_after_collect(&self, ptrs: &[usize], live: &[usize]) -> Option<Vec<usize>> {
        let mut blocks: Vec<(usize, usize)> = Vec::new();
        let arg = &mut blocks as *mut Vec<(usize, usize)> as *mut c_void;
        // SAFETY: the default heap of the calling thread, which owns it;
        // the visitor only pushes onto `blocks`, alive for the call.
        let complete = unsafe {
            let heap = mi::mi_heap_get_default();
            mi::mi_heap_collect(heap, true);
            mi::mi_heap_visit_blocks(heap, true, Some(collect_block), arg)
        };
        complete.then(|| {
            // A block is larger than asked (a size class, an aligned
            // request served from a larger block), and a page freed and
            // carved again can start elsewhere: a new block can hold a
            // freed block's address past its own end. Seen in soaks as
            // flaky `remote-free-lost`: a block of 135,160 bytes, a live
            // 64-KiB block at its start, the freed one's address 128 KiB in.
            let mut live = live.to_vec();
            live.sort_unstable();
            let holds_live = |&(b, len): &(usize, usize)| {
                live.get(live.partition_point(|&l| l < b))
                    .is_some_and(|&l| l < b + len)
            };
            blocks.retain(|block| !holds_live(block));
            ptrs.iter()
                .copied()
                .filter(|&p| blocks.iter().any(|&(b, len)| b <= p && p < b + len))
                .collect()
        })
    }

    fn heaps(&self) -> Option<&dyn Heaps> {
        Some(self)
    }

    fn extras(&self) -> Option<&dyn Extras> {
        Some(self)
    }

    /// Every live block is in mimalloc's memory, and a block of a heap is
    /// owned by that heap. (Default-heap blocks may belong to another
    /// thread's heap, so only the region is checked for them.)
    fn validate(&self, live: &[LiveBlock]) -> Result<(), String> {
        for b in live {
            let p = b.ptr as *const c_void;
            let owned = match b.heap {
                // SAFETY: assumes `h` is a live heap of this thread: the executor clears a
                // block's heap on delete and drops its blocks on destroy (not enforced here).
                Some(h) => unsafe { heap_owns(h, p) },
                // SAFETY: `mi_is_in_heap_region` only compares `p` to mimalloc's regions, for
                // any address.
                None => unsafe { mi::mi_is_in_heap_region(p) },
            };
            if !owned {
                return Err(format!(
                    "mimalloc disowns live block {:#x} size {} (heap {:?})",
                    b.ptr, b.size, b.heap
                ));
            }
        }
        Ok(())
    }

    fn take_error(&self) -> Option<String> {
        ERROR.lock().unwrap_or_else(|e| e.into_inner()).take()
    }

    /// The next program starts with the process's purge delay.
    fn reset(&self) {
        // SAFETY: no pointer involved; `mi_option_set` range-checks the option and takes any
        // delay value.
        unsafe { mi::mi_option_set(PURGE_DELAY, self.default_purge_delay) };
    }

    /// `mi_collect(true)`: purges every range marked for a later purge
    /// (under [`FAR`], every range freed since the last one).
    fn trim(&self) {
        // SAFETY: no pointer involved; `mi_collect` only releases memory mimalloc holds free.
        unsafe { mi::mi_collect(true) };
    }
}

fn heap(id: HeapId) -> *mut mi::mi_heap_t {
    id as *mut mi::mi_heap_t
}

/// Whether heap `h` owns the live block `p`.
#[cfg(not(feature = "mimalloc-v3"))]
unsafe fn heap_owns(h: HeapId, p: *const c_void) -> bool {
    // SAFETY: `h` is a live heap of this thread, as both callers assume; any `p` may be asked.
    unsafe { mi::mi_heap_check_owned(heap(h), p) }
}

/// Whether heap `h` owns the live block `p`: v3's `mi_heap_contains`
/// (its `mi_heap_check_owned` is gone; the sys crate does not declare the
/// new one).
#[cfg(feature = "mimalloc-v3")]
unsafe fn heap_owns(h: HeapId, p: *const c_void) -> bool {
    extern "C" {
        fn mi_heap_contains(heap: *const mi::mi_heap_t, p: *const c_void) -> bool;
    }
    // SAFETY: `h` is a live heap of this thread, as both callers assume; any `p` may be asked.
    unsafe { mi_heap_contains(heap(h), p) }
}

impl Heaps for Mimalloc {
    fn new_heap(&self) -> Option<HeapId> {
        // SAFETY: `mi_heap_new` has no precondition; it returns a new heap of this thread, or
        // null.
        let h = unsafe { mi::mi_heap_new() };
        (!h.is_null()).then_some(h as HeapId)
    }

    unsafe fn alloc_in(&self, h: HeapId, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        // SAFETY: `h` is a live heap of this thread and `align` a power of two (`Heaps::alloc_in`).
        unsafe {
            match (malloc_serves(size, align), zeroed) {
                (true, false) => mi::mi_heap_malloc(heap(h), size),
                (true, true) => mi::mi_heap_zalloc(heap(h), size),
                (false, false) => mi::mi_heap_malloc_aligned(heap(h), size, align),
                (false, true) => mi::mi_heap_zalloc_aligned(heap(h), size, align),
            }
        }
        .cast()
    }

    unsafe fn realloc_in(&self, h: HeapId, p: *mut u8, r: Resize) -> *mut u8 {
        let (align, new_size) = (r.align, r.to);
        if malloc_serves(new_size, align) {
            // SAFETY: `p` is a live block of live heap `h`, on its thread (`Heaps::realloc_in`).
            unsafe { mi::mi_heap_realloc(heap(h), p.cast(), new_size) }.cast()
        } else {
            // SAFETY: as above, and `align`, the block's alignment, is a power of two.
            unsafe { mi::mi_heap_realloc_aligned(heap(h), p.cast(), new_size, align) }.cast()
        }
    }

    unsafe fn free_in(&self, _h: HeapId, p: *mut u8, _size: usize, _align: usize) {
        // SAFETY: `p` is a live block of this allocator (`Heaps::free_in`'s contract).
        unsafe { mi::mi_free(p.cast()) }
    }

    /// `mi_heap_rezalloc` / `mi_heap_recalloc` and their aligned forms, as
    /// [`Extras::realloc_zeroed`] picks them (`mi_rezalloc` would move the
    /// block to the default heap).
    unsafe fn realloc_zeroed_in(&self, h: HeapId, p: *mut u8, r: Resize) -> Option<*mut u8> {
        let (align, new_size) = (r.align, r.to);
        let (h, p) = (heap(h), p.cast());
        // SAFETY: as for `realloc_in` (`Heaps::realloc_zeroed_in`'s contract).
        let q = unsafe {
            match (malloc_serves(new_size, align), new_size.is_multiple_of(2)) {
                (true, false) => mi::mi_heap_rezalloc(h, p, new_size),
                (true, true) => mi::mi_heap_recalloc(h, p, new_size / 2, 2),
                (false, false) => mi::mi_heap_rezalloc_aligned(h, p, new_size, align),
                (false, true) => mi::mi_heap_recalloc_aligned(h, p, new_size / 2, 2, align),
            }
        };
        Some(q.cast())
    }

    /// `mi_expand` (the block stays where it is, in its heap) and
    /// `mi_free_size` take any heap's block.
    fn any_blocks_calls(&self) -> Option<&dyn Extras> {
        Some(self)
    }

    unsafe fn delete(&self, h: HeapId) {
        // SAFETY: `h` is a live heap of this thread, not used again (`Heaps::delete`'s contract).
        unsafe { mi::mi_heap_delete(heap(h)) }
    }

    unsafe fn destroy(&self, h: HeapId) {
        // SAFETY: `h` is live, of this thread; none of its blocks is used again (`Heaps::destroy`).
        unsafe { mi::mi_heap_destroy(heap(h)) }
    }

    fn collect(&self, h: HeapId, force: bool) {
        // SAFETY: assumes `h` came from `new_heap` on this thread and is not deleted yet: the
        // executor picks it from its live heaps; this safe fn cannot check it.
        unsafe { mi::mi_heap_collect(heap(h), force) }
    }

    /// `mi_realloc` (or its aligned form) of a heap's block, from any
    /// thread: a block that moves goes to the caller's default heap.
    unsafe fn remote_realloc_in(&self, _h: HeapId, p: *mut u8, r: Resize) -> Option<*mut u8> {
        let (old, align, new_size) = (r.old, r.align, r.to);
        // SAFETY: `p` is a live block with `old`, `align` (`Heaps::remote_realloc_in`'s contract).
        Some(unsafe { self.realloc(p, old, align, new_size) })
    }

    fn reallocs_remotely(&self) -> bool {
        true
    }

    fn visit(&self, h: HeapId) -> Option<Vec<(usize, usize)>> {
        let mut blocks = Vec::new();
        let arg = &mut blocks as *mut Vec<(usize, usize)> as *mut c_void;
        // SAFETY: `arg` is `&mut blocks`, alive for the call and touched only by
        // `collect_block`; assumes `h` is a live heap of this thread (the executor's, unchecked).
        let complete = unsafe { mi::mi_heap_visit_blocks(heap(h), true, Some(collect_block), arg) };
        complete.then_some(blocks)
    }

    fn contains(&self, h: HeapId, p: usize) -> Option<bool> {
        // SAFETY: any `p` may be asked about; assumes `h` is a live heap of this thread (the
        // executor passes only its live heaps; this safe fn cannot check it).
        Some(unsafe { heap_owns(h, p as *const c_void) })
    }
}

/// A fuzzing process's mimalloc purges when a program asks
/// ([`Extras::purge`]) or when the process has grown too much
/// ([`Allocator::trim`]), not on its timer: unless `MIMALLOC_PURGE_DELAY`
/// says otherwise, the process's purge delay becomes [`FAR`] before the
/// adapter reads it as the default each program starts with.
///
/// mimalloc's default delay (10 ms) purges freed pages on a clock, so
/// whether a program's frees meet a purge depended on how long its calls
/// took, and a replay could take another path than the run that filed it.
/// Under the fuzz builds' ASan tracking each purge also re-poisons and
/// re-faults the pages' shadow (issue 27: a grown `alloc_ops` corpus read
/// once, checked, took 0.75× the time without the timer). A program's
/// `purge` op still purges at once or after the delay it names, and the
/// drift replay, which measures what a real process keeps, does not call
/// this.
pub fn purge_when_asked() {
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_some() {
        return;
    }
    // SAFETY: no pointer involved; `mi_option_set` range-checks the option and takes any
    // delay value.
    unsafe { mi::mi_option_set(PURGE_DELAY, FAR.millis().into()) };
}

/// The fuzzing process's purge delay: later than any program or slice
/// lasts (mimalloc multiplies it by 10 for its arenas), so no free meets
/// the timer. Unlike "never" (-1), a freed range is still marked for a
/// later purge, which a forced collect then returns to the OS: with
/// "never" mimalloc does not mark them at all, and a process kept every
/// page it ever touched (heap_api on mimalloc: 3 GiB resident after a
/// minute of fuzzing, and libFuzzer's RSS limit filed a correct mimalloc
/// as `oom` in a two-hour soak).
const FAR: PurgeDelay = PurgeDelay::Millis(3_600_000);

/// `mi_option_purge_delay` in mimalloc's option enum (the sys crate does
/// not name it).
const PURGE_DELAY: mi::mi_option_t = 15;
