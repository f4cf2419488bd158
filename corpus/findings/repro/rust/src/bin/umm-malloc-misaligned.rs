//! umm-malloc 0.3.2: its GlobalAlloc promises 8-byte alignment ("All
//! allocations from this allocator are aligned by 8 bytes", MIN_ALIGN = 8)
//! and hands `Layout { align: 8 }` requests to umm_malloc, whose blocks
//! start 4 bytes into an 8-byte block (a 4-byte header of two u16 block
//! numbers; umm_malloc_cfg.h: "each allocated buffer is aligned by 4
//! bytes"). Over a heap that starts on an 8-byte boundary, as umm_malloc's
//! README asks ("aligned on the natural boundary size of the processor"),
//! every block is 4 bytes off 8. allocsoak found it as `alignment` on its
//! first program: `bulk-alloc size=1 align=8 count=1`. Here umm-malloc is
//! the global allocator, as its README sets it up. expected: exit 101 (exit 101
//! rather than a panic: a panic's backtrace would allocate from the same heap).

use std::alloc::{alloc, dealloc, Layout};

// Linked for its #[global_allocator] (a crate nothing names is not linked).
extern crate umm_malloc;

#[repr(C, align(8))]
struct Heap([u8; 64 << 10]);
static mut HEAP: Heap = Heap([0; 64 << 10]);

// umm_malloc's own way to name its heap (init-if-uninitialized runs umm_init on
// the first call, which reads these), so the heap is ready before main runs.
#[no_mangle]
static mut UMM_MALLOC_CFG_HEAP_ADDR: *mut u8 = std::ptr::addr_of_mut!(HEAP).cast();
#[no_mangle]
static UMM_MALLOC_CFG_HEAP_SIZE: u32 = 64 << 10;

fn main() {
    let layout = Layout::from_size_align(8, 8).unwrap();
    let p = unsafe { alloc(layout) };
    println!(
        "alloc(size 8, align 8) from umm-malloc: {p:?} ({} mod 8)",
        p as usize % 8
    );
    let aligned = p as usize % 8 == 0;
    unsafe { dealloc(p, layout) };
    if !aligned {
        eprintln!("umm-malloc served an align-8 request with a block that is not 8-aligned");
        std::process::exit(101);
    }
}
