//! The OS calls that get an allocator memory, made to refuse on demand
//! ([`Extras::fail_os`]): they fail with `ENOMEM` while [`refuse`] says so
//! on the calling thread (an anonymous mapping, a break that grows) and
//! otherwise make the call, as `__wrap_<name>`. Two ways lead here:
//!
//! - a C allocator built from its sources (`[allocator.c]`): the build
//!   (`allocsoak-declared-c`'s `OS_CALLS`) renames the object's
//!   references to `mmap`, `mmap64`, `munmap` and `sbrk` to these, in
//!   every build;
//! - everything else linked into the fuzz binaries (jemalloc, a declared
//!   crate that maps its own memory, dlmalloc's `System`): they link with
//!   `--wrap=mmap,--wrap=mmap64,--wrap=munmap,--wrap=sbrk`
//!   (`fuzz_targets/build.rs`), which sends those references here.
//!   Whether this binary was linked so is [`wrapped`].
//!
//! A `dylib:` calls the C library as ever; so does the harness's own
//! memory (ASan's allocator maps by system call), and a thread other than
//! the program's.
//!
//! The same wrappers, and `__wrap_munmap`, keep the [`ledger`] of what
//! `diff_mimalloc`'s reference mapped.
//!
//! [`Extras::fail_os`]: crate::allocator::Extras::fail_os

pub mod ledger;

use std::cell::Cell;
use std::ffi::c_void;
use std::sync::OnceLock;

thread_local! {
    /// Set: the calls that get memory fail on this thread, the program's.
    /// A worker's would fail too if the flag were the process's, and the
    /// state it sets up at its first request would be missing in later
    /// programs (mimalloc 1.7.5, whose thread heap the OS refused, then
    /// crashed freeing a huge block on that thread): a finding no
    /// program reproduces.
    static REFUSING: Cell<bool> = const { Cell::new(false) };
}

/// Refuses (`true`) or serves again the calling thread's calls.
pub(super) fn refuse(refuse: bool) {
    REFUSING.set(refuse);
}

/// Whether this binary's own references to `mmap` come here (it was
/// linked with `--wrap=mmap`): a refused anonymous mapping, asked once.
pub(super) fn wrapped() -> bool {
    static WRAPPED: OnceLock<bool> = OnceLock::new();
    *WRAPPED.get_or_init(|| {
        let was = REFUSING.replace(true);
        // SAFETY: a fresh anonymous mapping, unmapped at once if made.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                4096,
                libc::PROT_READ,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
                -1,
                0,
            )
        };
        REFUSING.set(was);
        if p != libc::MAP_FAILED {
            // SAFETY: `p` is the mapping just made, 4096 bytes.
            unsafe { libc::munmap(p, 4096) };
        }
        p == libc::MAP_FAILED
    })
}

/// The C library's `mmap`, `munmap` and `sbrk` (or the sanitizer's
/// interceptor of them), by name at run time: in a binary linked with
/// `--wrap`, the names in this crate's code are the wrappers'.
struct Real {
    mmap: MmapFn,
    munmap: MunmapFn,
    sbrk: SbrkFn,
}

type MmapFn = unsafe extern "C" fn(
    *mut c_void,
    usize,
    libc::c_int,
    libc::c_int,
    libc::c_int,
    libc::off_t,
) -> *mut c_void;
type MunmapFn = unsafe extern "C" fn(*mut c_void, usize) -> libc::c_int;
type SbrkFn = unsafe extern "C" fn(libc::intptr_t) -> *mut c_void;

fn real() -> &'static Real {
    static REAL: OnceLock<Real> = OnceLock::new();
    REAL.get_or_init(|| {
        let find = |name: &std::ffi::CStr| {
            // SAFETY: `dlsym` with the global scope and a NUL-terminated name.
            let f = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr()) };
            assert!(!f.is_null(), "the C library has no {name:?}");
            f
        };
        let (mmap, munmap, sbrk) = (find(c"mmap"), find(c"munmap"), find(c"sbrk"));
        // SAFETY: the C library's functions of these names, with these
        // C signatures (`mmap(2)`, `munmap(2)`, `sbrk(2)`), pointer-sized.
        unsafe {
            Real {
                mmap: std::mem::transmute::<*mut c_void, MmapFn>(mmap),
                munmap: std::mem::transmute::<*mut c_void, MunmapFn>(munmap),
                sbrk: std::mem::transmute::<*mut c_void, SbrkFn>(sbrk),
            }
        }
    })
}

/// Whether a call that would get memory fails now; sets `errno` if so.
fn refused(gets_memory: bool) -> bool {
    let refused = gets_memory && REFUSING.get();
    if refused {
        // SAFETY: `__errno_location` returns the calling thread's `errno`, valid for writes.
        unsafe { *libc::__errno_location() = libc::ENOMEM };
    }
    refused
}

/// `mmap`, as the allocator calls it.
///
/// # Safety
/// As `mmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn __wrap_mmap(
    addr: *mut c_void,
    len: usize,
    prot: libc::c_int,
    flags: libc::c_int,
    fd: libc::c_int,
    offset: libc::off_t,
) -> *mut c_void {
    if refused(flags & libc::MAP_ANONYMOUS != 0) {
        return libc::MAP_FAILED;
    }
    // SAFETY: the caller's arguments, passed on as they came (this fn's contract).
    let p = unsafe { (real().mmap)(addr, len, prot, flags, fd, offset) };
    if p != libc::MAP_FAILED {
        ledger::mapped(p as usize, len);
    }
    p
}

/// `mmap64`, glibc's name for `mmap` under `_FILE_OFFSET_BITS=64`: the
/// same call on 64-bit Linux, where `off64_t` is `off_t`.
///
/// # Safety
/// As `mmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn __wrap_mmap64(
    addr: *mut c_void,
    len: usize,
    prot: libc::c_int,
    flags: libc::c_int,
    fd: libc::c_int,
    offset: libc::off64_t,
) -> *mut c_void {
    // SAFETY: the same call, `off64_t` being `off_t` here (this fn's contract).
    unsafe { __wrap_mmap(addr, len, prot, flags, fd, offset) }
}

/// `sbrk`, as the allocator calls it.
///
/// # Safety
/// As `sbrk(2)`.
#[no_mangle]
pub unsafe extern "C" fn __wrap_sbrk(increment: libc::intptr_t) -> *mut c_void {
    if refused(increment > 0) {
        return usize::MAX as *mut c_void;
    }
    // SAFETY: the caller's argument, passed on as it came (this fn's contract).
    let old = unsafe { (real().sbrk)(increment) };
    if old as usize != usize::MAX {
        let (old, by) = (old as usize, increment.unsigned_abs());
        match increment > 0 {
            true => ledger::mapped(old, by),
            false => ledger::unmapped(old.wrapping_sub(by), by),
        }
    }
    old
}

/// `munmap`, as the allocator calls it.
///
/// # Safety
/// As `munmap(2)`.
#[no_mangle]
pub unsafe extern "C" fn __wrap_munmap(addr: *mut c_void, len: usize) -> libc::c_int {
    // SAFETY: the caller's arguments, passed on as they came (this fn's contract).
    let done = unsafe { (real().munmap)(addr, len) };
    if done == 0 {
        ledger::unmapped(addr as usize, len);
    }
    done
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_anonymous_mapping_is_refused_while_refusing_and_made_after() {
        let anon = libc::MAP_PRIVATE | libc::MAP_ANONYMOUS;
        let rw = libc::PROT_READ | libc::PROT_WRITE;
        let null = std::ptr::null_mut();
        refuse(true);
        // SAFETY: a fresh anonymous mapping, refused.
        let p = unsafe { __wrap_mmap(null, 4096, rw, anon, -1, 0) };
        assert_eq!(p, libc::MAP_FAILED);
        assert_eq!(
            std::io::Error::last_os_error().raw_os_error(),
            Some(libc::ENOMEM)
        );
        refuse(false);
        // SAFETY: a fresh anonymous mapping, unmapped at once.
        let p = unsafe { __wrap_mmap(null, 4096, rw, anon, -1, 0) };
        assert_ne!(p, libc::MAP_FAILED);
        // SAFETY: `p` is the mapping just made, 4096 bytes.
        unsafe { libc::munmap(p, 4096) };
    }
}
