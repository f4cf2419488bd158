//! A C allocator's own heap API, under mimalloc's names and argument
//! orders (`heap_new`, `heap_malloc(heap, size)`, `heap_delete`, ...).

use std::ffi::c_void;
use std::ptr;

use super::{malloc_serves, Dylib};
use crate::allocator::heaps::collect_block;
use crate::allocator::{Extras, HeapId, Heaps, Resize};

pub type HeapNew = unsafe extern "C" fn() -> *mut c_void;
pub type HeapEnd = unsafe extern "C" fn(*mut c_void);
pub type HeapMalloc = unsafe extern "C" fn(*mut c_void, usize) -> *mut c_void;
pub type HeapMallocAligned = unsafe extern "C" fn(*mut c_void, usize, usize) -> *mut c_void;
pub type HeapRealloc = unsafe extern "C" fn(*mut c_void, *mut c_void, usize) -> *mut c_void;
pub type HeapReallocAligned =
    unsafe extern "C" fn(*mut c_void, *mut c_void, usize, usize) -> *mut c_void;
pub type HeapCollect = unsafe extern "C" fn(*mut c_void, bool);
pub type HeapContains = unsafe extern "C" fn(*const c_void, *const c_void) -> bool;
/// `visitor(heap, area, block, block_size, arg)`: called for each area
/// with a null block, then for each live block; false stops the visit.
pub type BlockVisitor =
    unsafe extern "C" fn(*const c_void, *const c_void, *mut c_void, usize, *mut c_void) -> bool;
pub type HeapVisit = unsafe extern "C" fn(*const c_void, bool, BlockVisitor, *mut c_void) -> bool;

/// A C allocator's heap API (`None`: it has no function of that name).
/// Its blocks are freed with the allocator's `free`, as mimalloc's are.
#[repr(C)]
#[derive(Clone, Copy, Default)]
pub struct CHeapApi {
    /// `heap_new()`.
    pub new: Option<HeapNew>,
    /// `heap_delete(heap)`: ends the heap; its live blocks move to the
    /// default heap.
    pub delete: Option<HeapEnd>,
    /// `heap_destroy(heap)`: ends the heap and frees its blocks.
    pub destroy: Option<HeapEnd>,
    /// `heap_malloc(heap, size)`.
    pub malloc: Option<HeapMalloc>,
    /// `heap_zalloc(heap, size)`; without it, `heap_malloc` and zeroed here.
    pub zalloc: Option<HeapMalloc>,
    /// `heap_malloc_aligned(heap, size, align)`.
    pub malloc_aligned: Option<HeapMallocAligned>,
    /// `heap_zalloc_aligned(heap, size, align)`.
    pub zalloc_aligned: Option<HeapMallocAligned>,
    /// `heap_realloc(heap, p, newsize)`; without it, allocated in the heap,
    /// copied and freed here.
    pub realloc: Option<HeapRealloc>,
    /// `heap_realloc_aligned(heap, p, newsize, align)`.
    pub realloc_aligned: Option<HeapReallocAligned>,
    /// `heap_collect(heap, force)`.
    pub collect: Option<HeapCollect>,
    /// `heap_contains(heap, p)` (or `heap_check_owned`,
    /// `heap_contains_block`): whether the heap holds `p`.
    pub contains: Option<HeapContains>,
    /// `heap_visit_blocks(heap, visit_all, visitor, arg)`.
    pub visit_blocks: Option<HeapVisit>,
    /// `heap_rezalloc(heap, p, newsize)`: the heap's zeroed realloc, as
    /// the allocator's `rezalloc` (mimalloc's `mi_heap_rezalloc`).
    pub rezalloc: Option<HeapRealloc>,
    /// `heap_rezalloc_aligned(heap, p, newsize, align)`.
    pub rezalloc_aligned: Option<HeapReallocAligned>,
}

impl CHeapApi {
    /// Whether it has what every heap op needs: `heap_new`, `heap_delete`,
    /// `heap_destroy`, `heap_malloc` and `heap_malloc_aligned`. Without
    /// one of them, programs run on emulated heaps over the allocator's
    /// plain calls.
    pub fn whole(&self) -> bool {
        self.new.is_some()
            && self.delete.is_some()
            && self.destroy.is_some()
            && self.malloc.is_some()
            && self.malloc_aligned.is_some()
    }
}

fn heap(h: HeapId) -> *mut c_void {
    h as *mut c_void
}

/// Only used when [`CHeapApi::whole`] holds (`Dylib::heaps`), so the
/// `expect`s name functions it has.
impl Heaps for Dylib {
    fn new_heap(&self) -> Option<HeapId> {
        let new = self.more.heap.new.expect("whole heap API");
        // SAFETY: `heap_new` takes nothing and returns a heap or null.
        let h = unsafe { new() };
        (!h.is_null()).then_some(h as HeapId)
    }

    unsafe fn alloc_in(&self, h: HeapId, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        let api = &self.more.heap;
        let plain = malloc_serves(size, align);
        // SAFETY: `h` is a live heap and `align` one the API serves (this fn's contract).
        let p = unsafe {
            match (plain, zeroed, api.zalloc, api.zalloc_aligned) {
                (true, true, Some(f), _) => return f(heap(h), size).cast(),
                (false, true, _, Some(f)) => return f(heap(h), size, align).cast(),
                (true, ..) => api.malloc.expect("whole heap API")(heap(h), size),
                (false, ..) => api.malloc_aligned.expect("whole heap API")(heap(h), size, align),
            }
        };
        if zeroed && !p.is_null() {
            // SAFETY: `p` was just allocated with `size` and `align`, not yet handed out.
            unsafe { self.zero_whole(p.cast(), size, align) };
        }
        p.cast()
    }

    unsafe fn realloc_in(&self, h: HeapId, p: *mut u8, r: Resize) -> *mut u8 {
        let (old, align, new_size) = (r.old, r.align, r.to);
        let api = &self.more.heap;
        // SAFETY: `p` is a live block of live heap `h`, allocated with `old` and
        // `align` (this fn's contract).
        unsafe {
            match (
                malloc_serves(new_size, align),
                api.realloc,
                api.realloc_aligned,
            ) {
                (true, Some(f), _) => return f(heap(h), p.cast(), new_size).cast(),
                (false, _, Some(f)) => return f(heap(h), p.cast(), new_size, align).cast(),
                _ => {}
            }
        }
        // SAFETY: `h` is live and `align` one the API serves (this fn's contract).
        let q = unsafe { self.alloc_in(h, new_size, align, false) };
        if !q.is_null() {
            // SAFETY: `p` holds `old` bytes and `q`, a new block, `new_size`; `p` is
            // live until this free (this fn's contract).
            unsafe {
                ptr::copy_nonoverlapping(p, q, old.min(new_size));
                (self.free)(p.cast());
            }
        }
        q
    }

    unsafe fn free_in(&self, _h: HeapId, p: *mut u8, _size: usize, _align: usize) {
        // SAFETY: `p` is a live block of a heap, freed with the allocator's `free`
        // (this fn's contract).
        unsafe { (self.free)(p.cast()) }
    }

    /// `heap_rezalloc` / `heap_rezalloc_aligned`, as the plain zeroed
    /// realloc picks between `rezalloc` and `rezalloc_aligned`. Not the
    /// plain `rezalloc`: that reallocates into the default heap.
    unsafe fn realloc_zeroed_in(&self, h: HeapId, p: *mut u8, r: Resize) -> Option<*mut u8> {
        let (align, new_size) = (r.align, r.to);
        let api = &self.more.heap;
        // SAFETY: `p` is a live block of live heap `h`, with its alignment (this
        // fn's contract).
        unsafe {
            match (
                malloc_serves(new_size, align),
                api.rezalloc,
                api.rezalloc_aligned,
            ) {
                (true, Some(f), _) => Some(f(heap(h), p.cast(), new_size).cast()),
                (_, _, Some(f)) => Some(f(heap(h), p.cast(), new_size, align).cast()),
                _ => None,
            }
        }
    }

    /// `expand` (a block resized where it is stays in its heap) and
    /// `free_size` / `free_size_aligned`: a heap's blocks take the
    /// allocator's own calls.
    fn any_blocks_calls(&self) -> Option<&dyn Extras> {
        Some(self)
    }

    unsafe fn delete(&self, h: HeapId) {
        // SAFETY: `h` is live and not used again (this fn's contract).
        unsafe { self.more.heap.delete.expect("whole heap API")(heap(h)) }
    }

    unsafe fn destroy(&self, h: HeapId) {
        // SAFETY: `h` is live and none of its blocks is used again (this fn's contract).
        unsafe { self.more.heap.destroy.expect("whole heap API")(heap(h)) }
    }

    fn collect(&self, h: HeapId, force: bool) {
        if let Some(f) = self.more.heap.collect {
            // SAFETY: the executor collects only live heaps.
            unsafe { f(heap(h), force) }
        }
    }

    fn visit(&self, h: HeapId) -> Option<Vec<(usize, usize)>> {
        let f = self.more.heap.visit_blocks?;
        let mut blocks: Vec<(usize, usize)> = Vec::new();
        let arg = &mut blocks as *mut Vec<(usize, usize)> as *mut c_void;
        // SAFETY: `h` is a live heap; the visitor only pushes to `blocks`,
        // which outlives the call.
        let complete = unsafe { f(heap(h), true, collect_block::<c_void, c_void>, arg) };
        complete.then_some(blocks)
    }

    fn contains(&self, h: HeapId, p: usize) -> Option<bool> {
        let f = self.more.heap.contains?;
        // SAFETY: `h` is a live heap and `p` one of its live blocks.
        Some(unsafe { f(heap(h), p as *const c_void) })
    }
}
