//! `arena`: TLSF (rlsf's `Tlsf`) over one fixed 8 MiB region, the bundled
//! allocator that can run out. It declares its region
//! ([`Allocator::arena`]), so a request it cannot fit may fail, and counts
//! its free bytes by walking its own blocks, so capacity it loses shows.

use std::alloc::Layout;
use std::mem::MaybeUninit;
use std::ptr::NonNull;
use std::sync::{Mutex, MutexGuard};

use rlsf::Tlsf;

use super::{Allocator, Arena};

/// Bytes of the region: small enough that programs (up to 64 MiB live)
/// fill it, large enough for every size tier below 8 MiB.
pub const ARENA_SIZE: usize = if cfg!(miri) { 64 << 10 } else { 8 << 20 };

/// Blocks up to `(32 << 19) - 32` bytes (16 MiB, more than the region),
/// 32 second-level classes per power of two.
type Pool = Tlsf<'static, u32, u32, 19, 32>;

/// A TLSF over a region of [`ARENA_SIZE`] bytes of its own, behind a lock.
pub struct FixedArena {
    tlsf: Mutex<Pool>,
    /// The region TLSF manages: its start and the length it reported,
    /// which its block walk needs.
    start: usize,
    len: usize,
}

impl FixedArena {
    /// A fresh region, all of it free. `by_name("arena")` makes one per
    /// process; a test that needs a region no other test touches makes
    /// its own.
    pub fn new() -> FixedArena {
        // Leaked: the region lives as long as the allocator, which `by_name`
        // keeps for the process.
        // One allocation, not a vector filled byte by byte: under Miri,
        // 8 Mi writes of nothing take minutes.
        let region: &'static mut [MaybeUninit<u8>] = Box::leak(Box::new_uninit_slice(ARENA_SIZE));
        let ptr = NonNull::from(region);
        let mut tlsf = Pool::new();
        // Safety: the region is ours alone and outlives the pool.
        let len = unsafe { tlsf.insert_free_block_ptr(NonNull::new(ptr.as_ptr() as _).unwrap()) }
            .expect("an 8 MiB region is large enough for a pool")
            .get();
        FixedArena {
            tlsf: Mutex::new(tlsf),
            start: ptr.as_ptr() as *mut u8 as usize,
            len,
        }
    }

    fn tlsf(&self) -> MutexGuard<'_, Pool> {
        self.tlsf.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Bytes in free blocks, their headers included, by a walk of every block.
    fn free_bytes(&self) -> usize {
        let tlsf = self.tlsf();
        let region = std::ptr::slice_from_raw_parts_mut(self.start as *mut u8, self.len);
        // Safety: the start and length `insert_free_block_ptr` was given and returned.
        unsafe { tlsf.iter_blocks(NonNull::new(region).unwrap()) }
            .filter(|b| !b.is_occupied())
            .map(|b| b.size())
            .sum()
    }
}

impl Default for FixedArena {
    fn default() -> Self {
        FixedArena::new()
    }
}

/// Zero-size requests become one byte, as in [`super::GlobalAllocAdapter`].
fn layout(size: usize, align: usize) -> Option<Layout> {
    Layout::from_size_align(size.max(1), align).ok()
}

impl Allocator for FixedArena {
    fn name(&self) -> &str {
        "arena"
    }

    unsafe fn alloc(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        let Some(l) = layout(size, align) else {
            return std::ptr::null_mut();
        };
        let Some(p) = self.tlsf().allocate(l) else {
            return std::ptr::null_mut();
        };
        if zeroed {
            // SAFETY: `p` is the block just allocated, of at least `l.size()` bytes.
            unsafe { std::ptr::write_bytes(p.as_ptr(), 0, l.size()) };
        }
        p.as_ptr()
    }

    unsafe fn realloc(&self, p: *mut u8, _old: usize, align: usize, new_size: usize) -> *mut u8 {
        let (Some(l), Some(p)) = (layout(new_size, align), NonNull::new(p)) else {
            return std::ptr::null_mut();
        };
        // SAFETY: `p` is a live block of this pool allocated with `align`, the alignment of `l`
        // (`Allocator::realloc`'s contract).
        unsafe { self.tlsf().reallocate(p, l) }.map_or(std::ptr::null_mut(), NonNull::as_ptr)
    }

    unsafe fn free(&self, p: *mut u8, _size: usize, align: usize) {
        if let Some(p) = NonNull::new(p) {
            // SAFETY: `p` is a live block of this pool allocated with `align` (`Allocator::free`'s
            // contract).
            unsafe { self.tlsf().deallocate(p, align) }
        }
    }

    unsafe fn usable_size(&self, p: *mut u8, size: usize, _align: usize) -> usize {
        match NonNull::new(p) {
            // SAFETY: `p` is a live block of this pool (`Allocator::usable_size`'s contract).
            Some(p) => unsafe { Pool::allocation_usable_size(p) },
            None => size,
        }
    }

    fn arena(&self) -> Option<Arena> {
        Some(Arena {
            size: ARENA_SIZE,
            free: Some(self.free_bytes()),
        })
    }
}
