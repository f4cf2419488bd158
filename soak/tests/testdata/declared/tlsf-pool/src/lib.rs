//! A `GlobalAlloc` over rlsf's TLSF in one 4 MiB pool behind a lock, as
//! an embedded heap's author writes one, and the walk of the blocks it
//! holds in use that rlsf gives (`Tlsf::iter_blocks`, feature
//! `unstable`): declared as `walk`, a block a program gave back that the
//! walk still lists is a `kept-block`.

use std::alloc::{GlobalAlloc, Layout, System};
use std::ptr::{self, NonNull};
use std::sync::{Mutex, MutexGuard};

use rlsf::Tlsf;

/// The pool's size.
pub const POOL: usize = 4 << 20;

/// Blocks up to 128 MiB in 8 second-level classes: more than the pool.
type Inner = Tlsf<'static, u32, u32, 24, 8>;

pub struct TlsfPool {
    heap: Mutex<Option<Heap>>,
}

struct Heap {
    tlsf: Inner,
    /// The pool's start; it lives for the rest of the process.
    start: usize,
}

// SAFETY: the TLSF's pointers point into the pool, which lives for the
// rest of the process; both are used only under the lock.
unsafe impl Send for Heap {}

impl Heap {
    fn new() -> Heap {
        let layout = Layout::from_size_align(POOL, 4096).unwrap();
        // SAFETY: `layout` has a nonzero size. The pool is never freed.
        let start = unsafe { System.alloc(layout) };
        assert!(!start.is_null(), "no memory for the pool");
        let mut heap = Heap {
            tlsf: Inner::new(),
            start: start as usize,
        };
        // SAFETY: the pool is ours alone and outlives the TLSF.
        unsafe { heap.tlsf.insert_free_block_ptr(heap.pool()) }.expect("the pool fits");
        heap
    }

    fn pool(&self) -> NonNull<[u8]> {
        NonNull::new(ptr::slice_from_raw_parts_mut(self.start as *mut u8, POOL)).unwrap()
    }
}

impl TlsfPool {
    pub const fn new() -> TlsfPool {
        TlsfPool {
            heap: Mutex::new(None),
        }
    }

    fn heap(&self) -> MutexGuard<'_, Option<Heap>> {
        let mut heap = self.heap.lock().unwrap_or_else(|e| e.into_inner());
        heap.get_or_insert_with(Heap::new);
        heap
    }

    /// The blocks in use, `(start, size)`, header included, as rlsf walks
    /// the pool.
    pub fn blocks(&self) -> Vec<(usize, usize)> {
        let guard = self.heap();
        let heap = guard.as_ref().unwrap();
        // SAFETY: the pool is the one block the TLSF was given.
        unsafe { heap.tlsf.iter_blocks(heap.pool()) }
            .filter(|b| b.is_occupied())
            .map(|b| (b.as_ptr().as_ptr() as *mut u8 as usize, b.size()))
            .collect()
    }
}

impl Default for TlsfPool {
    fn default() -> Self {
        TlsfPool::new()
    }
}

unsafe impl GlobalAlloc for TlsfPool {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let mut heap = self.heap();
        let tlsf = &mut heap.as_mut().unwrap().tlsf;
        tlsf.allocate(layout).map_or(ptr::null_mut(), NonNull::as_ptr)
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        let mut heap = self.heap();
        let tlsf = &mut heap.as_mut().unwrap().tlsf;
        tlsf.deallocate(NonNull::new_unchecked(p), layout.align())
    }

    unsafe fn realloc(&self, p: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let new = Layout::from_size_align_unchecked(new_size, layout.align());
        let mut heap = self.heap();
        let tlsf = &mut heap.as_mut().unwrap().tlsf;
        tlsf.reallocate(NonNull::new_unchecked(p), new)
            .map_or(ptr::null_mut(), NonNull::as_ptr)
    }
}
