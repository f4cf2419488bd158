//! scudo 0.1.3 (scudo-sys 0.2.2's Scudo): a block aligned to 2 MiB or more
//! comes from the secondary allocator, whose chunk header keeps the bytes
//! past the request in a 20-bit field (`SizeOrUnusedBytes`, masked with
//! `(1 << 20) - 1` in `combined.h`). With that alignment they are more
//! than 1 MiB, so the field wraps and Scudo reads the block's size back
//! 1 MiB larger than asked: the crate's `dealloc`, a sized free, then
//! aborts ("invalid sized delete ... (1 vs 1048577)"). allocsoak found it
//! in its first 200 programs of alloc_ops: `alloc size=1 align=2097152`,
//! freed at the program's end.
//! expected: SIGABRT

use std::alloc::{GlobalAlloc, Layout};

fn main() {
    let layout = Layout::from_size_align(1, 2 << 20).unwrap();
    // SAFETY: a block of Scudo's, freed once with the layout it was asked with.
    unsafe {
        let p = scudo::GlobalScudoAllocator.alloc(layout);
        assert!(!p.is_null());
        scudo::GlobalScudoAllocator.dealloc(p, layout);
    }
}
