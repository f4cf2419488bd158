//! A contention op's owner makes its calls in one job on its thread
//! (`race-remote-free`'s and `race-exit`'s allocations, `race-exit`'s
//! frees of its first half), and the checks still see what one call at a
//! time would: a call that writes into a block the job made before it, a
//! free that writes into the next block, a block handed out twice.

mod common;

use shadow::allocator::Allocator;

fn system() -> &'static dyn Allocator {
    common::by_name("system").unwrap()
}

/// `system`, but each request on a thread first flips a byte of the
/// block the thread's last request got, while it is live: a call that
/// writes into a block handed out before it.
struct Scribbler;

thread_local! {
    static LAST: std::cell::Cell<usize> = const { std::cell::Cell::new(0) };
}

impl Allocator for Scribbler {
    fn name(&self) -> &str {
        "scribbler"
    }

    unsafe fn alloc(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        let last = LAST.get();
        if last != 0 {
            // SAFETY: the planted bug, meant to be caught: `last` is this thread's
            // latest block (at least 1 byte), not freed on this thread (`free` clears it).
            unsafe { *(last as *mut u8) ^= 0xff };
        }
        // SAFETY: forwarded under the caller's `alloc` contract (size 0 asked as 1).
        let p = unsafe { system().alloc(size.max(1), align, zeroed) };
        LAST.set(p as usize);
        p
    }

    unsafe fn realloc(&self, p: *mut u8, old: usize, align: usize, new: usize) -> *mut u8 {
        // SAFETY: the caller's contract: `p` is a live block of ours with `old`, `align`.
        unsafe { common::moved(self, p, old, align, new) }
    }

    unsafe fn free(&self, p: *mut u8, size: usize, align: usize) {
        if LAST.get() == p as usize {
            LAST.set(0);
        }
        // SAFETY: the caller's contract: `p` came from `system` in `alloc`, with
        // `size.max(1)` and `align`.
        unsafe { system().free(p, size.max(1), align) }
    }
}

/// A contention op's owner makes all its calls in one job, and fills each
/// block before its next call: a call that writes into the block before
/// it is caught when that block is adopted, as one call at a time would
/// catch it.
#[test]
fn an_owners_call_that_writes_into_its_last_block_is_caught() {
    let program = common::program(
        "target mt_ops\nrace-remote-free freer=1 owner=0 size=400 align=8 count=4\n",
    );
    let scribbler: &'static dyn Allocator = &Scribbler;
    let line = common::caught_as(&program, scribbler, "contents");
    assert!(
        line.contains("while its thread allocated the op's next blocks"),
        "{line}"
    );
    // A block handed out twice in the job is the overlap, not a broken
    // pattern: the second is left unfilled (the zoo's double issue hands
    // the cached 40-byte block to every request of its class).
    let twice = common::program(
        "target mt_ops\nalloc size=40 align=8\nfree slot=0\n\
         race-remote-free freer=1 owner=0 size=40 align=8 count=4\n",
    );
    assert_eq!(
        common::kind(&twice, "zoo:double-issue").as_deref(),
        Some("overlap")
    );
}

/// `system`, but a free flips a byte of the block its thread allocated
/// next after the one freed, while that one is live: a free that writes
/// into a live neighbour.
struct FreeScribbler;

thread_local! {
    static MADE: std::cell::RefCell<Vec<usize>> = const { std::cell::RefCell::new(Vec::new()) };
}

impl Allocator for FreeScribbler {
    fn name(&self) -> &str {
        "free-scribbler"
    }

    unsafe fn alloc(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        // SAFETY: forwarded under the caller's `alloc` contract (size 0 asked as 1).
        let p = unsafe { system().alloc(size.max(1), align, zeroed) };
        MADE.with_borrow_mut(|made| made.push(p as usize));
        p
    }

    unsafe fn realloc(&self, p: *mut u8, old: usize, align: usize, new: usize) -> *mut u8 {
        // SAFETY: the caller's contract: `p` is a live block of ours with `old`, `align`.
        unsafe { common::moved(self, p, old, align, new) }
    }

    unsafe fn free(&self, p: *mut u8, size: usize, align: usize) {
        MADE.with_borrow_mut(|made| {
            if let Some(k) = made.iter().position(|&m| m == p as usize) {
                made.remove(k);
                if let Some(&next) = made.get(k) {
                    // SAFETY: the planted bug, meant to be caught: `next` is a block
                    // (at least 1 byte) this thread made and has not freed (`free` drops it).
                    unsafe { *(next as *mut u8) ^= 0xff };
                }
            }
        });
        // SAFETY: the caller's contract: `p` came from `system` in `alloc`, with
        // `size.max(1)` and `align`.
        unsafe { system().free(p, size.max(1), align) }
    }
}

/// A `race-exit`'s owner frees half its blocks in one job, each checked
/// before its free: a free that writes into the next block is caught
/// before that block's own free, as one call at a time would catch it.
#[test]
fn an_owners_free_that_writes_into_its_next_block_is_caught() {
    let program = common::program("target mt_ops\nrace-exit worker=0 size=400 align=8 count=4\n");
    let scribbler: &'static dyn Allocator = &FreeScribbler;
    let line = common::caught_as(&program, scribbler, "contents");
    assert!(line.contains("before free"), "{line}");
}
