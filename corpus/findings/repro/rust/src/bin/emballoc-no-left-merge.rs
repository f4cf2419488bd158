//! emballoc 0.3.0: `free` merges a block with the free block after it, never
//! the one before (its docs, step 12: "it is easier to just live with that
//! fragmentation"), though `free` already scans the entries from the start
//! to find the block. So a heap with everything freed can serve less than
//! it could at the start: alloc(1), realloc to 2 bytes, free leaves the
//! first 8 bytes as a free block of their own, and the largest block a
//! 4 KiB heap serves drops from 4072 to 4064 bytes for good. allocsoak
//! found it as a `capacity-leak` at the end of a 2-op program.
//! expected: exit 101 (the assert).

use std::alloc::{GlobalAlloc, Layout};

static HEAP: emballoc::Allocator<4096> = emballoc::Allocator::new();

/// The largest block of 16-byte alignment the heap serves now.
fn largest() -> usize {
    let (mut lo, mut hi) = (0, 4097);
    while hi - lo > 1 {
        let mid = lo + (hi - lo) / 2;
        let layout = Layout::from_size_align(mid, 16).unwrap();
        let p = unsafe { HEAP.alloc(layout) };
        if p.is_null() {
            hi = mid;
        } else {
            unsafe { HEAP.dealloc(p, layout) };
            lo = mid;
        }
    }
    lo
}

fn main() {
    let before = largest();
    unsafe {
        let one = Layout::from_size_align(1, 1).unwrap();
        let p = HEAP.alloc(one);
        let q = HEAP.realloc(p, one, 2);
        HEAP.dealloc(q, Layout::from_size_align(2, 1).unwrap());
    }
    let after = largest();
    println!(
        "largest block served: {before} at the start, {after} after alloc(1), realloc to 2, free"
    );
    assert_eq!(after, before, "capacity lost with nothing allocated");
}
