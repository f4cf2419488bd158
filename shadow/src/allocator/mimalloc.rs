//! C mimalloc through libmimalloc-sys (`extended`): the aligned family, the
//! heap API, `mi_usable_size`, and `mi_register_error`.
//!
//! The secure and debug flavors are compile-time (the sys crate links one
//! copy per build), so the name of this adapter is the flavor of the build.

use std::ffi::{c_int, c_void};
use std::sync::Mutex;

use libmimalloc_sys as mi;

use super::{malloc_serves, Allocator, HeapId, Heaps, LiveBlock, ReallocToZero};

#[cfg(feature = "mimalloc-secure")]
pub const NAME: &str = "mimalloc-secure";
#[cfg(all(feature = "mimalloc-debug", not(feature = "mimalloc-secure")))]
pub const NAME: &str = "mimalloc-debug";
#[cfg(not(any(feature = "mimalloc-secure", feature = "mimalloc-debug")))]
pub const NAME: &str = "mimalloc";

static ERROR: Mutex<Option<String>> = Mutex::new(None);

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

pub struct Mimalloc;

impl Mimalloc {
    pub fn new() -> Mimalloc {
        unsafe { mi::mi_register_error(Some(on_error), std::ptr::null_mut()) };
        Mimalloc
    }
}

impl Allocator for Mimalloc {
    fn name(&self) -> &str {
        NAME
    }

    unsafe fn alloc(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        match (malloc_serves(size, align), zeroed) {
            (true, false) => mi::mi_malloc(size),
            (true, true) => mi::mi_zalloc(size),
            (false, false) => mi::mi_malloc_aligned(size, align),
            (false, true) => mi::mi_zalloc_aligned(size, align),
        }
        .cast()
    }

    unsafe fn calloc(&self, count: usize, size: usize) -> *mut u8 {
        mi::mi_calloc(count, size).cast()
    }

    unsafe fn realloc(&self, p: *mut u8, _old: usize, align: usize, new_size: usize) -> *mut u8 {
        if malloc_serves(new_size, align) {
            mi::mi_realloc(p.cast(), new_size).cast()
        } else {
            mi::mi_realloc_aligned(p.cast(), new_size, align).cast()
        }
    }

    fn realloc_to_zero(&self) -> ReallocToZero {
        ReallocToZero::Allocates
    }

    unsafe fn free(&self, p: *mut u8, _size: usize, _align: usize) {
        mi::mi_free(p.cast())
    }

    unsafe fn usable_size(&self, p: *mut u8, _size: usize, _align: usize) -> usize {
        mi::mi_usable_size(p.cast())
    }

    fn size_classes(&self) -> Option<&'static str> {
        Some("mimalloc")
    }

    fn heaps(&self) -> Option<&dyn Heaps> {
        Some(self)
    }

    /// Every live block is in mimalloc's memory, and a block of a heap is
    /// owned by that heap. (Default-heap blocks may belong to another
    /// thread's heap, so only the region is checked for them.)
    fn validate(&self, live: &[LiveBlock]) -> Result<(), String> {
        for b in live {
            let p = b.ptr as *const c_void;
            let owned = match b.heap {
                Some(h) => unsafe { mi::mi_heap_check_owned(heap(h), p) },
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
}

fn heap(id: HeapId) -> *mut mi::mi_heap_t {
    id as *mut mi::mi_heap_t
}

unsafe extern "C" fn collect_block(
    _heap: *const mi::mi_heap_t,
    _area: *const mi::mi_heap_area_t,
    block: *mut c_void,
    size: usize,
    arg: *mut c_void,
) -> bool {
    if !block.is_null() {
        (*(arg as *mut Vec<(usize, usize)>)).push((block as usize, size));
    }
    true
}

impl Heaps for Mimalloc {
    fn new_heap(&self) -> Option<HeapId> {
        let h = unsafe { mi::mi_heap_new() };
        (!h.is_null()).then_some(h as HeapId)
    }

    unsafe fn alloc_in(&self, h: HeapId, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        if zeroed {
            mi::mi_heap_zalloc_aligned(heap(h), size, align).cast()
        } else {
            mi::mi_heap_malloc_aligned(heap(h), size, align).cast()
        }
    }

    unsafe fn realloc_in(
        &self,
        h: HeapId,
        p: *mut u8,
        _old: usize,
        align: usize,
        new_size: usize,
    ) -> *mut u8 {
        mi::mi_heap_realloc_aligned(heap(h), p.cast(), new_size, align).cast()
    }

    unsafe fn free_in(&self, _h: HeapId, p: *mut u8, _size: usize, _align: usize) {
        mi::mi_free(p.cast())
    }

    unsafe fn delete(&self, h: HeapId) {
        mi::mi_heap_delete(heap(h))
    }

    unsafe fn destroy(&self, h: HeapId) {
        mi::mi_heap_destroy(heap(h))
    }

    fn collect(&self, h: HeapId, force: bool) {
        unsafe { mi::mi_heap_collect(heap(h), force) }
    }

    fn visit(&self, h: HeapId) -> Option<Vec<(usize, usize)>> {
        let mut blocks = Vec::new();
        let arg = &mut blocks as *mut Vec<(usize, usize)> as *mut c_void;
        let complete = unsafe { mi::mi_heap_visit_blocks(heap(h), true, Some(collect_block), arg) };
        complete.then_some(blocks)
    }

    fn contains(&self, h: HeapId, p: usize) -> Option<bool> {
        Some(unsafe { mi::mi_heap_check_owned(heap(h), p as *const c_void) })
    }
}
