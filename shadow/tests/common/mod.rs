#![allow(dead_code)]
//! Helpers shared by the integration tests.

use std::collections::BTreeMap;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::sync::{Mutex, MutexGuard};

use shadow::allocator::Allocator;
use shadow::{Program, Stats, Target};

/// Deterministic pseudo-random fuzz inputs (xorshift), so failures replay.
pub fn inputs(seed: u64, count: usize, max_len: usize) -> Vec<Vec<u8>> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut next = move || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x
    };
    (0..count)
        .map(|_| {
            let len = (next() as usize) % max_len;
            (0..len).map(|_| next() as u8).collect()
        })
        .collect()
}

/// Runs `program` and returns the violation line it panicked with, if any.
pub fn violation(program: &Program, allocator: &str) -> Option<String> {
    run(program, allocator).err()
}

/// [`shadow::allocator::by_name`], `zoo:` names too.
pub fn by_name(name: &str) -> Result<&'static dyn Allocator, String> {
    zoo::register();
    shadow::allocator::by_name(name)
}

/// Runs `program`: what it did, or the violation line it panicked with.
pub fn run(program: &Program, allocator: &str) -> Result<Stats, String> {
    let alloc = by_name(allocator).expect("allocator");
    let _one_at_a_time = exclusive(allocator);
    caught(program, alloc)
}

/// Holds `allocator` for the caller alone. Programs on one allocator run one
/// at a time: an allocator is one shared instance (a zoo keeps state across
/// calls, jemalloc's reset discards the arenas of deleted heaps), as in a
/// fuzz process.
pub fn exclusive(allocator: &str) -> MutexGuard<'static, ()> {
    static LOCKS: Mutex<BTreeMap<String, &'static Mutex<()>>> = Mutex::new(BTreeMap::new());
    let lock: &'static Mutex<()> = LOCKS
        .lock()
        .unwrap()
        .entry(allocator.to_string())
        .or_insert_with(|| Box::leak(Box::default()));
    lock.lock().unwrap_or_else(|e| e.into_inner())
}

/// Runs `program` on `alloc` (the caller holds it [`exclusive`]ly): what it
/// did, or the violation line it panicked with.
pub fn caught(program: &Program, alloc: &'static dyn Allocator) -> Result<Stats, String> {
    quiet_panics();
    catch_unwind(AssertUnwindSafe(|| shadow::run(program, alloc))).map_err(|e| {
        e.downcast_ref::<String>()
            .cloned()
            .or_else(|| e.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_default()
    })
}

/// [`caught`], which must end in a violation of `kind`: its line.
pub fn caught_as(program: &Program, alloc: &'static dyn Allocator, kind: &str) -> String {
    let line = caught(program, alloc)
        .err()
        .unwrap_or_else(|| panic!("no violation: {kind} went unseen"));
    assert_eq!(shadow::violation::kind_of(&line), Some(kind), "{line}");
    line
}

/// The kind of the violation `program` hits, if any.
pub fn kind(program: &Program, allocator: &str) -> Option<String> {
    violation(program, allocator).map(|line| {
        shadow::violation::kind_of(&line)
            .unwrap_or_else(|| panic!("not a violation line: {line}"))
            .to_string()
    })
}

pub fn program(text: &str) -> Program {
    text.parse()
        .unwrap_or_else(|e| panic!("bad program text: {e}"))
}

/// Runs `count` random programs of `target` on `allocator`; panics with the
/// first violation and the program that caused it, or when fewer than two
/// thirds of all ops ran: a skipped op checks nothing, and an allocator that
/// skips (nearly) everything would otherwise pass. (Correct allocators skip
/// 7 to 23 %: caps, and slot ops with nothing live.)
pub fn assert_clean(target: Target, allocator: &str, seed: u64, count: usize) {
    let (mut ops, mut skipped) = (0, 0);
    for data in inputs(seed, count, 2048) {
        let p = Program::decode(target, &data);
        match run(&p, allocator) {
            Ok(stats) => {
                ops += stats.ops;
                skipped += stats.skipped;
            }
            Err(v) => panic!("false alarm on {allocator}: {v}\nprogram:\n{p}"),
        }
    }
    let ran = ops - skipped;
    assert!(
        ran * 3 >= ops * 2,
        "{target} on {allocator}: only {ran} of {ops} ops ran, the rest were skipped"
    );
}

/// Keeps expected violation panics off the test output.
pub fn quiet_panics() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let default = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            // Expected violations are caught and asserted on; print the rest.
            let msg = info
                .payload()
                .downcast_ref::<String>()
                .map(String::as_str)
                .unwrap_or("");
            if !msg.starts_with("allocsoak violation") {
                default(info)
            }
        }))
    });
}

/// Declares `dlmalloc` and `rlsf` as soak.toml's `[[allocator]]` entries do
/// (the glue crate's `register`): they are examples of a declared
/// allocator, not bundled ones. Safe to call twice.
pub fn declare_examples() {
    use shadow::allocator::{declare, GlobalAllocAdapter};
    declare("dlmalloc", || {
        Box::new(GlobalAllocAdapter::new(
            "dlmalloc",
            dlmalloc::GlobalDlmalloc,
        ))
    });
    declare("rlsf", || {
        Box::new(GlobalAllocAdapter::new(
            "rlsf",
            rlsf::GlobalTlsf::<()>::new(),
        ))
    });
}

/// A realloc that always moves: a new block from `a`, the common prefix
/// copied, the old block freed.
///
/// # Safety
/// `p` is a live block of `a` of `old` bytes aligned to `align`.
pub unsafe fn moved(
    a: &dyn Allocator,
    p: *mut u8,
    old: usize,
    align: usize,
    new: usize,
) -> *mut u8 {
    // SAFETY: `align` is that of `p`'s block, which `a` served.
    let q = unsafe { a.alloc(new, align, false) };
    if !q.is_null() {
        // SAFETY: `p` holds `old` live bytes (this fn's contract) and `q`, a new
        // block apart from it, `new`.
        unsafe { std::ptr::copy_nonoverlapping(p, q, old.min(new)) };
        // SAFETY: this fn's contract: `p` is a live block of `a` with `old`,
        // `align`; freed once.
        unsafe { a.free(p, old, align) };
    }
    q
}
