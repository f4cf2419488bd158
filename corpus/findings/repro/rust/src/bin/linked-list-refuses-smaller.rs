//! linked_list_allocator 0.10.6: a request that would leave 1 to 15 bytes
//! of a hole behind is refused, even when the hole is the whole free heap
//! and larger requests from it succeed (since 0.10.4, which treats such a
//! hole as unsuitable rather than leak the remainder). On an empty 4 KiB
//! heap: alloc(4096) and alloc(4080) succeed, alloc(4088) returns null.
//! allocsoak found it as a null from `realloc` shrinking a 4 MiB block in an
//! 8 MiB heap by one byte at a time. expected: exit 101 (the assert).

use std::alloc::{GlobalAlloc, Layout};

#[repr(C, align(4096))]
struct Region([u8; 4096]);
static mut REGION: Region = Region([0; 4096]);

fn main() {
    let heap = unsafe {
        linked_list_allocator::LockedHeap::new(std::ptr::addr_of_mut!(REGION).cast(), 4096)
    };
    for size in [4096, 4080, 4088] {
        let layout = Layout::from_size_align(size, 8).unwrap();
        let p = unsafe { heap.alloc(layout) };
        println!("alloc({size}) on an empty 4 KiB heap: {p:?}");
        assert!(
            !p.is_null(),
            "alloc({size}) refused while the heap is empty and larger requests succeed"
        );
        unsafe { heap.dealloc(p, layout) };
    }
}
