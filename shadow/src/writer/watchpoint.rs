//! A hardware write watchpoint on one word of this thread's memory
//! (`perf_event_open`, `PERF_TYPE_BREAKPOINT`): every store to it traps
//! (`SIGTRAP`, synchronously, `TRAP_PERF`), and the handler keeps the
//! stack of the code that wrote, as a crash handler keeps the crashing
//! one, and the byte watched as the store left it. Only the locating
//! child of [`super`] arms one, for one op.

use std::io;
use std::os::fd::{FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};

use perf_event_open_sys as sys;

/// Frames kept per store, innermost first (the store's own PC first).
pub const DEPTH: usize = 24;
/// Stores kept; past it, the latest overwrite the oldest, since the last
/// store is the one that left the word as the check found it.
const KEPT: usize = 64;

/// `si_code` of a trap a perf event sent (`<asm-generic/siginfo.h>`).
const TRAP_PERF: i32 = 6;

/// The stores seen, as a ring: `STORES` counts them all, store `n` lives
/// in slot `n % KEPT`, its frames in `FRAMES`, their number in `LENS`,
/// the watched byte after it in `BYTES`. Atomics, because the signal
/// handler writes them.
static STORES: AtomicUsize = AtomicUsize::new(0);
static LENS: [AtomicUsize; KEPT] = [const { AtomicUsize::new(0) }; KEPT];
static BYTES: [AtomicUsize; KEPT] = [const { AtomicUsize::new(0) }; KEPT];
static FRAMES: [[AtomicUsize; DEPTH]; KEPT] =
    [const { [const { AtomicUsize::new(0) }; DEPTH] }; KEPT];
/// The byte watched.
static WATCHED: AtomicUsize = AtomicUsize::new(0);

/// One store to the watched word.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Store {
    /// The watched byte as the store left it.
    pub byte: u8,
    /// The PCs of its frames (runtime addresses), innermost first: the
    /// store's own (the instruction after it), then return addresses.
    pub stack: Vec<usize>,
}

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
        install_handler()?;
        let mut attr = sys::bindings::perf_event_attr {
            type_: sys::bindings::PERF_TYPE_BREAKPOINT,
            size: std::mem::size_of::<sys::bindings::perf_event_attr>() as u32,
            bp_type: sys::bindings::HW_BREAKPOINT_W,
            ..Default::default()
        };
        attr.__bindgen_anon_1.sample_period = 1;
        attr.__bindgen_anon_3.bp_addr = (addr & !7) as u64;
        attr.__bindgen_anon_4.bp_len = sys::bindings::HW_BREAKPOINT_LEN_8 as u64;
        attr.set_exclude_kernel(1);
        attr.set_exclude_hv(1);
        // A synchronous SIGTRAP to the thread that stored, at the store.
        attr.set_sigtrap(1);
        attr.set_remove_on_exec(1);
        // SAFETY: `attr` is a whole, initialized `perf_event_attr` of the
        // size it says; pid 0 and cpu -1 watch this thread on any CPU.
        let fd = unsafe {
            sys::perf_event_open(
                &mut attr,
                0,
                -1,
                -1,
                sys::bindings::PERF_FLAG_FD_CLOEXEC as _,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: `fd` is a new descriptor this call owns.
        let event = unsafe { OwnedFd::from_raw_fd(fd) };
        Ok(Watch { _event: event })
    }
}

/// The stores trapped so far, oldest first.
pub fn stores() -> Vec<Store> {
    let seen = STORES.load(Ordering::Acquire);
    (seen.saturating_sub(KEPT)..seen)
        .map(|n| {
            let slot = n % KEPT;
            let len = LENS[slot].load(Ordering::Acquire);
            Store {
                byte: BYTES[slot].load(Ordering::Relaxed) as u8,
                stack: FRAMES[slot][..len]
                    .iter()
                    .map(|f| f.load(Ordering::Relaxed))
                    .collect(),
            }
        })
        .collect()
}

fn install_handler() -> io::Result<()> {
    // SAFETY: a zeroed `sigaction` is a valid empty one; the handler is
    // an `extern "C"` function of the SA_SIGINFO signature.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = on_trap as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(libc::SIGTRAP, &action, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

extern "C" fn on_trap(
    _signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: the kernel passes a valid `siginfo_t` and `ucontext_t` to an
    // SA_SIGINFO handler.
    let (code, pc) = unsafe {
        let context = &*(context as *const libc::ucontext_t);
        (
            (*info).si_code,
            context.uc_mcontext.gregs[libc::REG_RIP as usize] as usize,
        )
    };
    if code != TRAP_PERF {
        return;
    }
    let n = STORES.load(Ordering::Relaxed);
    let slot = n % KEPT;
    // SAFETY: the watched byte is in the word just stored to, mapped and
    // writable; a volatile read of one byte.
    let byte = unsafe { std::ptr::read_volatile(WATCHED.load(Ordering::Acquire) as *const u8) };
    BYTES[slot].store(byte as usize, Ordering::Relaxed);
    let mut frames = Unwound {
        slot,
        store_pc: pc,
        len: 0,
        from_store: false,
    };
    // SAFETY: `collect` matches `_Unwind_Trace_Fn` and only writes through
    // `arg`, the `Unwound` above. The trap is synchronous (a store the
    // thread made), so the unwinder runs as it would in a crash handler.
    unsafe { _Unwind_Backtrace(collect, &mut frames as *mut Unwound as *mut libc::c_void) };
    if !frames.from_store {
        // The unwinder did not get past the signal frame: the store alone.
        FRAMES[slot][0].store(pc, Ordering::Relaxed);
        frames.len = 1;
    }
    LENS[slot].store(frames.len, Ordering::Release);
    STORES.store(n + 1, Ordering::Release);
}

/// The stack the handler is unwinding: frames are kept from the store's
/// own (whose PC the signal context gives) outward.
struct Unwound {
    slot: usize,
    store_pc: usize,
    len: usize,
    from_store: bool,
}

extern "C" {
    fn _Unwind_Backtrace(
        trace: extern "C" fn(*mut libc::c_void, *mut libc::c_void) -> libc::c_int,
        arg: *mut libc::c_void,
    ) -> libc::c_int;
    fn _Unwind_GetIP(context: *mut libc::c_void) -> usize;
}

/// `_URC_NO_REASON` (go on) and `_URC_END_OF_STACK` (stop).
const GO_ON: libc::c_int = 0;
const STOP: libc::c_int = 5;

extern "C" fn collect(context: *mut libc::c_void, arg: *mut libc::c_void) -> libc::c_int {
    // SAFETY: `arg` is the `Unwound` `on_trap` passed; `context` is the
    // unwinder's, valid for this call.
    let (frames, ip) = unsafe { (&mut *(arg as *mut Unwound), _Unwind_GetIP(context)) };
    if !frames.from_store && ip == frames.store_pc {
        frames.from_store = true;
    }
    if frames.from_store {
        FRAMES[frames.slot][frames.len].store(ip, Ordering::Relaxed);
        frames.len += 1;
        if frames.len == DEPTH {
            return STOP;
        }
    }
    GO_ON
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
        let mut word = Box::new(0u64);
        let before = STORES.load(Ordering::Acquire);
        let watch = Watch::arm(&*word as *const u64 as usize).expect("perf_event_open refused");
        store_into(&mut word, 7);
        drop(watch);
        store_into(&mut word, 8);
        let stores = stores();
        assert_eq!(
            STORES.load(Ordering::Acquire),
            before + 1,
            "one store while armed"
        );
        let store = stores.last().unwrap();
        assert_eq!(store.byte, 7, "the byte as the store left it");
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
