//! `SlowLeak`'s memory: 64 bytes kept for good every 32,000 calls (and
//! `LateRemoteLeak`'s, kept as it says); `HoardedFrees`' bytes, kept for
//! good at each free of its class.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Calls between two kept blocks. The alloc_ops programs make about 32
/// calls per op (bulk ops make hundreds), so that is about 64 bytes per
/// 1,000 ops of that workload: the rate the drift alarm must catch.
const CALLS: u64 = 32_000;
/// Bytes kept each time.
const BYTES: usize = 64;
/// The slab the kept blocks live in, mapped at the first.
const SLAB: usize = 1 << 30;

/// The blocks come from a slab of their own, written so they are
/// resident, and not from the zoo's base: a small block the base keeps
/// live would pin the heap around it (glibc cannot trim below it), and
/// the leak would read as far more than 64 bytes per 1,000 ops.
pub(super) struct SlowLeak {
    calls: AtomicU64,
    slab: OnceLock<usize>,
    kept: AtomicU64,
}

impl SlowLeak {
    pub(super) const fn new() -> SlowLeak {
        SlowLeak {
            calls: AtomicU64::new(0),
            slab: OnceLock::new(),
            kept: AtomicU64::new(0),
        }
    }

    /// Counts a call, and on every `CALLS`th keeps `BYTES` more.
    pub(super) fn call(&self) {
        if self.calls.fetch_add(1, Ordering::Relaxed) % CALLS == CALLS - 1 {
            self.keep();
        }
    }

    /// Keeps `BYTES` more, for good.
    pub(super) fn keep(&self) {
        let slab = *self.slab.get_or_init(|| reserve(SLAB));
        let n = self.kept.fetch_add(1, Ordering::Relaxed) as usize;
        if slab != 0 && (n + 1) * BYTES <= SLAB {
            // SAFETY: inside the slab this mapped, which nothing else uses.
            unsafe { std::ptr::write_bytes((slab + n * BYTES) as *mut u8, 0xa5, BYTES) };
        }
    }

    /// Blocks kept so far.
    pub(super) fn kept(&self) -> usize {
        self.kept.load(Ordering::Relaxed) as usize
    }
}

/// The class whose frees `HoardedFrees` hoards.
pub(super) const HOARDED: std::ops::RangeInclusive<usize> = 1025..=262_144;
/// The slab `HoardedFrees` keeps its bytes in (its pages are touched as
/// they are kept): past it, frees are no longer hoarded.
const HOARD: usize = 16 << 30;

/// `HoardedFrees`: bytes kept for good, as many as each hoarded free's.
pub(super) struct Hoard {
    slab: OnceLock<usize>,
    kept: AtomicU64,
}

impl Hoard {
    pub(super) const fn new() -> Hoard {
        Hoard {
            slab: OnceLock::new(),
            kept: AtomicU64::new(0),
        }
    }

    /// Keeps `bytes` more, for good, written so they are resident.
    pub(super) fn keep(&self, bytes: usize) {
        let slab = *self.slab.get_or_init(|| reserve(HOARD));
        let at = self.kept.fetch_add(bytes as u64, Ordering::Relaxed) as usize;
        if slab != 0 && at + bytes <= HOARD {
            // SAFETY: inside the slab this mapped, which nothing else uses; each range is
            // handed out once by the `fetch_add` above.
            unsafe { std::ptr::write_bytes((slab + at) as *mut u8, 0x5a, bytes) };
        }
    }
}

/// Maps `len` bytes of the zoo's own (nothing resident until written),
/// or 0 when the kernel refuses.
pub(super) fn reserve(len: usize) -> usize {
    // SAFETY: a new anonymous private mapping where the kernel picks (null hint, no
    // `MAP_FIXED`), so it replaces nothing; `MAP_FAILED` is checked below.
    let p = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_NORESERVE,
            -1,
            0,
        )
    };
    if p == libc::MAP_FAILED {
        0
    } else {
        p as usize
    }
}
