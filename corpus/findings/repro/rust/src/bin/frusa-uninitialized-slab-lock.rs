//! frusa 0.1.3: `Frusa::do_init` sets up its slabs in a page from the
//! fallback allocator's `alloc` and never initializes each slab's
//! `reclaim_lock`; it reads whatever the page held. Over a fallback whose
//! memory is not zero (any allocator that reuses memory, or ASan's malloc,
//! which fills with 0xbe), the first small allocation spins forever in
//! `rwlock::read_lock`. expected: SIGABRT (the watchdog below).

use std::alloc::{GlobalAlloc, Layout, System};
use std::time::Duration;

/// The system allocator, handing out memory that held something before.
struct Reused;

unsafe impl GlobalAlloc for Reused {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            unsafe { p.write_bytes(0xbe, layout.size()) };
        }
        p
    }

    unsafe fn dealloc(&self, p: *mut u8, layout: Layout) {
        unsafe { System.dealloc(p, layout) }
    }
}

static REUSED: Reused = Reused;
static FRUSA: frusa::Frusa2M = frusa::Frusa2M::new(&REUSED);

fn main() {
    let (done, finished) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let layout = Layout::from_size_align(8, 8).unwrap();
        let p = unsafe { FRUSA.alloc(layout) };
        unsafe { FRUSA.dealloc(p, layout) };
        done.send(()).unwrap();
    });
    if finished.recv_timeout(Duration::from_secs(5)).is_err() {
        eprintln!(
            "frusa: alloc(8) has not returned in 5 s (spinning on an uninitialized reclaim_lock)"
        );
        std::process::abort();
    }
    println!("alloc(8) returned");
}
