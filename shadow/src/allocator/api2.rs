//! Any `allocator_api2` allocator (the trait bump and arena allocators
//! implement: `allocate`, `grow`, `grow_zeroed`, `shrink`) as an allocator
//! under test.

use std::alloc::Layout;
use std::collections::HashMap;
use std::ptr::{self, NonNull};
use std::sync::Mutex;

use allocator_api2::alloc::Allocator as Api2;

use super::{Allocator, Extras, Resize, ZeroedFrom};

/// Wraps an `allocator_api2` allocator made by `make`. Such allocators are
/// rarely `Sync` (a bump arena is a `Cell` of chunks), so every call holds
/// a lock. When a program has freed everything, [`Allocator::reset`] drops
/// the allocator and makes a fresh one, as an arena's owner would: a bump
/// allocator never reuses freed memory, and the next program must not
/// start with a full arena.
///
/// Zero-size requests become one byte (as for `GlobalAlloc`); requests
/// `Layout` rejects fail cleanly without reaching the allocator.
///
/// A block's usable size is the length of the slice the allocator returned
/// for it: `Allocator::allocate`'s documentation, "The returned block may
/// have a larger size than specified by `layout.size()`", and the caller
/// may use all of it.
pub struct Api2Adapter<A> {
    name: &'static str,
    make: fn() -> A,
    inner: Mutex<Inner<A>>,
}

struct Inner<A> {
    alloc: A,
    /// Each live block's length, as its slice said.
    len: HashMap<usize, usize>,
}

impl<A> Inner<A> {
    /// Records the block a call returned (a slice), in place of `old`:
    /// its start, or null when the call failed (and `old` stays).
    fn returned(
        &mut self,
        old: Option<NonNull<u8>>,
        block: Result<NonNull<[u8]>, allocator_api2::alloc::AllocError>,
    ) -> *mut u8 {
        let Ok(block) = block else {
            return ptr::null_mut();
        };
        if let Some(old) = old {
            self.len.remove(&(old.as_ptr() as usize));
        }
        let p = block.cast::<u8>().as_ptr();
        self.len.insert(p as usize, block.len());
        p
    }
}

impl<A> Api2Adapter<A>
where
    A: Send,
    for<'a> &'a A: Api2,
{
    pub fn new(name: &'static str, make: fn() -> A) -> Self {
        Api2Adapter {
            name,
            make,
            inner: Mutex::new(Inner {
                alloc: make(),
                len: HashMap::new(),
            }),
        }
    }

    fn with<R>(&self, f: impl FnOnce(&mut Inner<A>) -> R) -> R {
        f(&mut self.inner.lock().unwrap_or_else(|e| e.into_inner()))
    }

    /// `grow` / `grow_zeroed` / `shrink` as the sizes ask. Null: failed,
    /// and the block is as it was.
    ///
    /// # Safety
    /// `p` is a live block of this allocator, allocated with `old`, `align`.
    unsafe fn resize(
        &self,
        p: *mut u8,
        old: usize,
        align: usize,
        new: usize,
        zero: bool,
    ) -> *mut u8 {
        let (Some(from), Some(to)) = (layout(old, align), layout(new, align)) else {
            return ptr::null_mut();
        };
        let Some(p) = NonNull::new(p) else {
            return ptr::null_mut();
        };
        let q = self.with(|i| {
            let a = &i.alloc;
            // SAFETY: `p` is a block of `a` with layout `from` (this fn's contract; `reset` swaps
            // `a` only once no block is live), and each call gets the size order it requires.
            let block = unsafe {
                if to.size() > from.size() && zero {
                    a.grow_zeroed(p, from, to)
                } else if to.size() > from.size() {
                    a.grow(p, from, to)
                } else {
                    a.shrink(p, from, to)
                }
            };
            i.returned(Some(p), block)
        });
        // A block of size 0 holds one byte the caller never owned, which
        // grow_zeroed leaves as it was: the caller's byte 0 is new.
        if zero && old == 0 && new > 0 && !q.is_null() {
            // SAFETY: `q` is the non-null block just returned, at least `new` > 0 bytes long.
            unsafe { *q = 0 };
        }
        q
    }
}

fn layout(size: usize, align: usize) -> Option<Layout> {
    Layout::from_size_align(size.max(1), align).ok()
}

impl<A> Allocator for Api2Adapter<A>
where
    A: Send,
    for<'a> &'a A: Api2,
{
    fn name(&self) -> &str {
        self.name
    }

    unsafe fn alloc(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        let Some(l) = layout(size, align) else {
            return ptr::null_mut();
        };
        self.with(|i| {
            let block = match zeroed {
                false => (&i.alloc).allocate(l),
                true => (&i.alloc).allocate_zeroed(l),
            };
            i.returned(None, block)
        })
    }

    unsafe fn realloc(&self, p: *mut u8, old: usize, align: usize, new_size: usize) -> *mut u8 {
        // SAFETY: `p` is a live block with `old`, `align` (`Allocator::realloc`'s contract).
        unsafe { self.resize(p, old, align, new_size, false) }
    }

    unsafe fn free(&self, p: *mut u8, size: usize, align: usize) {
        if let (Some(l), Some(p)) = (layout(size, align), NonNull::new(p)) {
            self.with(|i| {
                i.len.remove(&(p.as_ptr() as usize));
                // SAFETY: `p` is a live block of `i.alloc` with layout `l`, its size and alignment
                // (`Allocator::free`'s contract; `reset` swaps the allocator only once none is).
                unsafe { (&i.alloc).deallocate(p, l) }
            })
        }
    }

    /// The length of the slice the allocator returned for the block.
    unsafe fn usable_size(&self, p: *mut u8, size: usize, _align: usize) -> usize {
        self.with(|i| i.len.get(&(p as usize)).copied().unwrap_or(size))
    }

    fn extras(&self) -> Option<&dyn Extras> {
        Some(self)
    }

    fn reset(&self) {
        self.with(|i| {
            i.alloc = (self.make)();
            i.len.clear();
        })
    }
}

/// `grow_zeroed` is the API's zeroed realloc.
impl<A> Extras for Api2Adapter<A>
where
    A: Send,
    for<'a> &'a A: Api2,
{
    unsafe fn realloc_zeroed(&self, p: *mut u8, r: Resize) -> Option<*mut u8> {
        let (old, align, new_size) = (r.old, r.align, r.to);
        // SAFETY: `p` is a live block with `old`, `align` (`Extras::realloc_zeroed`'s contract).
        Some(unsafe { self.resize(p, old, align, new_size, true) })
    }

    /// `Allocator::grow_zeroed`'s documentation: "Bytes
    /// old_layout.size()..old_size will either be preserved or zeroed
    /// [...]. Bytes old_size..new_size are zeroed": of a block allocated
    /// zeroed, preserved bytes are zero.
    fn zeroed_from(&self) -> ZeroedFrom {
        ZeroedFrom::Written
    }
}
