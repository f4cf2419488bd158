//! The `mallctl` calls the heap API makes, typed: each returns `None` or
//! `false` when jemalloc refuses (a nonzero return).

use std::ffi::{c_void, CString};
use std::mem::size_of;
use std::sync::OnceLock;

use tikv_jemalloc_sys as je;

/// `MALLCTL_ARENAS_ALL`: `arena.<i>` and `stats.arenas.<i>` name every arena.
pub const ARENAS_ALL: u32 = 4096;

fn name(n: &str) -> CString {
    CString::new(n).expect("mallctl names have no NUL")
}

/// The C integers a ctl reads or writes (`unsigned`, `ssize_t`,
/// `size_t`, `uint64_t`): every bit pattern is one of their values, so
/// jemalloc may write any bytes into one.
pub trait Integer: Default + Copy + sealed::Sealed {}

mod sealed {
    pub trait Sealed {}
}

macro_rules! integers {
    ($($t:ty),*) => {$(
        impl sealed::Sealed for $t {}
        impl Integer for $t {}
    )*};
}
integers!(u32, u64, usize, isize);

/// A read-only value: `arenas.create`, `tcache.create` (`unsigned`),
/// `thread.arena`, `opt.dirty_decay_ms` (`ssize_t`), `stats.resident` and
/// the other `stats.*` (`size_t`, in builds with stats).
pub fn read<T: Integer>(n: &str) -> Option<T> {
    let mut value = T::default();
    let mut len = size_of::<T>();
    // SAFETY: the name is NUL-terminated and `value` is `len` writable bytes, of which jemalloc
    // writes at most `len`; `T` is a C integer, valid for any bytes written.
    let rc = unsafe {
        je::mallctl(
            name(n).as_ptr(),
            (&mut value as *mut T).cast(),
            &mut len,
            std::ptr::null_mut(),
            0,
        )
    };
    (rc == 0 && len == size_of::<T>()).then_some(value)
}

/// `arenas.create`, `tcache.create`: a read-only `unsigned`.
pub fn read_unsigned(n: &str) -> Option<u32> {
    read(n)
}

/// A write-only value: `tcache.flush`, `tcache.destroy` (`unsigned`),
/// `arena.<i>.dirty_decay_ms` (`ssize_t`), `epoch` (`uint64_t`: refreshes
/// the `stats.*` snapshot).
pub fn write<T: Integer>(n: &str, mut value: T) -> bool {
    // SAFETY: the name is NUL-terminated; `value` is `size_of::<T>()` readable bytes, read only
    // if that is the ctl's size. The callers name ctls that take an integer, as `T` is (one that
    // takes a pointer, such as `arena.<i>.extent_hooks`, is never written here).
    let rc = unsafe {
        je::mallctl(
            name(n).as_ptr(),
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            (&mut value as *mut T).cast(),
            size_of::<T>(),
        )
    };
    rc == 0
}

/// Refreshes the snapshot every `stats.*` read gives (`epoch`).
pub fn refresh_stats() {
    write("epoch", 1u64);
}

/// `stats.arenas.<all>.<stat>`: the figure of every arena together, as of
/// the last [`refresh_stats`].
pub fn all_arenas<T: Integer>(stat: &str) -> Option<T> {
    read(&format!("stats.arenas.{ARENAS_ALL}.{stat}"))
}

/// `tcache.flush`, `tcache.destroy`: a write-only `unsigned`.
pub fn write_unsigned(n: &str, value: u32) -> bool {
    write(n, value)
}

/// Neither read nor write: `thread.tcache.flush`, `arena.<i>.purge`.
pub fn run(n: &str) -> bool {
    let null = std::ptr::null_mut();
    // SAFETY: the name is NUL-terminated and no value is passed; assumes `n` frees no block still
    // in use (`arena.<i>.reset`/`destroy` do: the heap code's duty, unchecked here).
    unsafe { je::mallctl(name(n).as_ptr(), null, std::ptr::null_mut(), null, 0) == 0 }
}

/// `arena.<i>.destroy`, `.reset`, `.purge`, `.decay`.
pub fn arena_verb(arena: u32, verb: &str) -> bool {
    run(&format!("arena.{arena}.{verb}"))
}

/// `arenas.lookup` (`unsigned` out, `void *` in): the arena that holds
/// `ptr`, `None` when jemalloc knows no block there (5.3 looks the pointer
/// up with `emap_full_alloc_ctx_try_lookup`, so a foreign pointer is a
/// clean refusal, not a crash). The name is translated once: the free
/// path calls this while deleted heaps hold blocks.
pub fn arena_of(ptr: usize) -> Option<u32> {
    static MIB: OnceLock<Option<[usize; 2]>> = OnceLock::new();
    let mib = MIB.get_or_init(|| {
        let mut mib = [0usize; 2];
        let mut len = mib.len();
        // SAFETY: the name is a NUL-terminated literal; `mib` has room for `len` (2) entries,
        // as many as jemalloc may write.
        let rc = unsafe {
            je::mallctlnametomib(name("arenas.lookup").as_ptr(), mib.as_mut_ptr(), &mut len)
        };
        (rc == 0 && len == mib.len()).then_some(mib)
    });
    let mib = mib.as_ref()?;
    let mut arena: u32 = 0;
    let mut len = size_of::<u32>();
    let mut p = ptr as *mut c_void;
    // SAFETY: `arenas.lookup` reads a `void *` (`p`, of that size) and writes an `unsigned`
    // (`arena`, `len` = 4); jemalloc 5.3 only looks `p` up, so any address is fine.
    let rc = unsafe {
        je::mallctlbymib(
            mib.as_ptr(),
            mib.len(),
            (&mut arena as *mut u32).cast(),
            &mut len,
            (&mut p as *mut *mut c_void).cast(),
            size_of::<*mut c_void>(),
        )
    };
    (rc == 0).then_some(arena)
}
