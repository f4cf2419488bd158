//! A hardware write watchpoint on one word of this thread's memory
//! (`perf_event_open`, `PERF_TYPE_BREAKPOINT`): every store to it traps
//! (`SIGTRAP`, synchronously, `TRAP_PERF`), and the handler keeps the
//! stack of the code that wrote and the byte watched as the store left it
//! ([`super::trap`]). Only the locating child of [`super`] arms one, for
//! one op.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};

use perf_event_open_sys as sys;

use super::trap;

/// The byte watched.
static WATCHED: AtomicUsize = AtomicUsize::new(0);

/// An armed watchpoint; dropping it disarms it.
pub struct Watch {
    _event: OwnedFd,
}

impl Watch {
    /// Traps every store to the 8-byte word holding byte `addr` made by
    /// this thread from now on. `Err` when the kernel refuses (no hardware
    /// breakpoints, `perf_event_paranoid`, a seccomp filter).
    pub fn arm(addr: usize) -> io::Result<Watch> {
        WATCHED.store(addr, Ordering::Release);
        trap::install(on_trap)?;
        let fd = breakpoint(sys::bindings::HW_BREAKPOINT_W, addr & !7);
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor this call owns.
        let event = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Watch { _event: event })
    }
}

/// A hardware breakpoint of `kind` (`HW_BREAKPOINT_W`: stores to the
/// 8-byte word at `addr`; `HW_BREAKPOINT_X`: running the instruction at
/// `addr`) on this thread, trapping with a synchronous `SIGTRAP`
/// (`TRAP_PERF`): its perf event's descriptor, or -1 (`errno` says why).
/// A system call and nothing else, so a signal handler may make one.
pub fn breakpoint(kind: u32, addr: usize) -> libc::c_int {
    let mut attr = sys::bindings::perf_event_attr {
        type_: sys::bindings::PERF_TYPE_BREAKPOINT,
        size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
        bp_type: kind,
        ..Default::default()
    };
    attr.__bindgen_anon_1.sample_period = 1;
    attr.__bindgen_anon_3.bp_addr = addr as u64;
    // A word for a store; an instruction breakpoint's is a long's size.
    attr.__bindgen_anon_4.bp_len = sys::bindings::HW_BREAKPOINT_LEN_8 as u64;
    attr.set_exclude_kernel(1);
    attr.set_exclude_hv(1);
    // A synchronous SIGTRAP to the thread that trapped, at the store (or
    // before the instruction).
    attr.set_sigtrap(1);
    attr.set_remove_on_exec(1);
    // SAFETY: `attr` is a whole, initialized `perf_event_attr` of the
    // size it says; pid 0 and cpu -1 watch this thread on any CPU.
    unsafe {
        sys::perf_event_open(
            &mut attr,
            0,
            -1,
            -1,
            sys::bindings::PERF_FLAG_FD_CLOEXEC as _,
        )
    }
}

extern "C" fn on_trap(
    _signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: this is an SA_SIGINFO handler, given the kernel's own.
    let (code, pc) = unsafe { trap::code_and_pc(info, context) };
    if code != trap::TRAP_PERF {
        return;
    }
    // SAFETY: the watched byte is in the word just stored to, mapped and
    // writable; a volatile read of one byte.
    let byte = unsafe { std::ptr::read_volatile(WATCHED.load(Ordering::Acquire) as *const u8) };
    trap::keep(pc, byte as usize);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[inline(never)]
    fn store_into(word: &mut u64, value: u64) {
        // SAFETY: `word` is a valid, aligned u64.
        unsafe { std::ptr::write_volatile(word, value) };
    }

    #[test]
    fn a_store_to_the_word_is_trapped_with_its_writer() {
        let _one = trap::tests::ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let mut word = Box::new(0u64);
        let before = trap::count();
        let watch = Watch::arm(&*word as *const u64 as usize).expect("perf_event_open refused");
        store_into(&mut word, 7);
        drop(watch);
        store_into(&mut word, 8);
        assert_eq!(trap::count(), before + 1, "one store while armed");
        let store = trap::kept().pop().unwrap();
        assert_eq!(store.saw, 7, "the byte as the store left it");
        let frames = &store.stack;
        let writer = store_into as *const () as usize;
        assert!(
            frames[0] > writer && frames[0] < writer + 64,
            "the store's PC {:#x} is in store_into at {writer:#x}",
            frames[0]
        );
        assert!(frames.len() > 1, "its callers too: {frames:x?}");
    }
}
