//! [`Mapped`] maps each block of 64 KiB or more with an `mmap` of its
//! own (as dlmalloc does its large requests) and keeps a count of the
//! bytes in use, refusing anything over 1 GiB up front; the rest comes
//! from the system allocator. `MAPPED_LEAKY` counts a mapped block's
//! bytes before it maps it, and forgets to take them back when the
//! mapping fails: a failure path only a refusing OS reaches (`os-fail`),
//! seen in its count (`kept-bytes`).

use std::alloc::{GlobalAlloc, Layout, System};
use std::ffi::c_void;
use std::sync::atomic::{AtomicUsize, Ordering};

extern "C" {
    fn mmap(addr: *mut c_void, len: usize, prot: i32, flags: i32, fd: i32, off: i64)
        -> *mut c_void;
    fn munmap(addr: *mut c_void, len: usize) -> i32;
}

const PROT_READ_WRITE: i32 = 0x1 | 0x2;
const MAP_PRIVATE_ANONYMOUS: i32 = 0x02 | 0x20;
const MAP_FAILED: *mut c_void = !0usize as *mut c_void;
/// Blocks this large or larger are mapped.
const MAPPED_FROM: usize = 64 << 10;
/// Requests over this are refused before anything is counted.
const LARGEST: usize = 1 << 30;

pub struct Mapped {
    leaks_on_failure: bool,
    used: AtomicUsize,
}

pub static MAPPED: Mapped = Mapped {
    leaks_on_failure: false,
    used: AtomicUsize::new(0),
};

pub static MAPPED_LEAKY: Mapped = Mapped {
    leaks_on_failure: true,
    used: AtomicUsize::new(0),
};

impl Mapped {
    /// Bytes in the blocks it handed out and has not had back.
    pub fn used(&self) -> usize {
        self.used.load(Ordering::Relaxed)
    }

    fn mapped(layout: Layout) -> bool {
        layout.size() >= MAPPED_FROM && layout.align() <= 4096
    }
}

unsafe impl GlobalAlloc for Mapped {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        if layout.size() > LARGEST {
            return std::ptr::null_mut();
        }
        self.used.fetch_add(layout.size(), Ordering::Relaxed);
        let p = match Mapped::mapped(layout) {
            true => {
                let p = mmap(
                    std::ptr::null_mut(),
                    layout.size(),
                    PROT_READ_WRITE,
                    MAP_PRIVATE_ANONYMOUS,
                    -1,
                    0,
                );
                if p == MAP_FAILED {
                    std::ptr::null_mut()
                } else {
                    p.cast()
                }
            }
            false => System.alloc(layout),
        };
        if p.is_null() && !(self.leaks_on_failure && Mapped::mapped(layout)) {
            self.used.fetch_sub(layout.size(), Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        match Mapped::mapped(layout) {
            true => {
                munmap(p.cast(), layout.size());
            }
            false => System.dealloc(p, layout),
        }
        self.used.fetch_sub(layout.size(), Ordering::Relaxed);
    }
}
