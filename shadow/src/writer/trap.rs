//! What a `SIGTRAP` handler keeps of each trap it takes: the stack of the
//! code that trapped, as a crash handler keeps the crashing one, and one
//! word of what the trap saw. The watchpoint's traps ([`super::watchpoint`])
//! and the stepper's ([`super::stepper`]) are kept here alike; only one
//! of them is armed in the locating child, for one op.

use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};

/// `si_code` of a trap a perf event sent, and of a single step
/// (`<asm-generic/siginfo.h>`).
pub const TRAP_PERF: i32 = 6;
pub const TRAP_TRACE: i32 = 2;

/// Frames kept per trap, innermost first (the trapping PC first).
pub const DEPTH: usize = 24;
/// Traps kept; past it, the latest overwrite the oldest, since the last
/// trap is the one that left things as the check found them.
const KEPT: usize = 64;

/// The traps taken, as a ring: `TRAPS` counts them all, trap `n` lives in
/// slot `n % KEPT`, its frames in `FRAMES`, their number in `LENS`, the
/// word it saw in `SAW`. Atomics, because the signal handler writes them.
static TRAPS: AtomicUsize = AtomicUsize::new(0);
static LENS: [AtomicUsize; KEPT] = [const { AtomicUsize::new(0) }; KEPT];
static SAW: [AtomicUsize; KEPT] = [const { AtomicUsize::new(0) }; KEPT];
static FRAMES: [[AtomicUsize; DEPTH]; KEPT] =
    [const { [const { AtomicUsize::new(0) }; DEPTH] }; KEPT];

/// One trap.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Trap {
    /// What the handler saw (the watched byte as a store left it).
    pub saw: usize,
    /// The PCs of its frames (runtime addresses), innermost first: the
    /// trapping one's own (the instruction after the one that trapped),
    /// then return addresses.
    pub stack: Vec<usize>,
}

/// How many traps were taken so far.
pub fn count() -> usize {
    TRAPS.load(Ordering::Acquire)
}

/// The traps taken so far, oldest first (the last [`KEPT`]).
pub fn kept() -> Vec<Trap> {
    let seen = count();
    (seen.saturating_sub(KEPT)..seen)
        .map(|n| {
            let slot = n % KEPT;
            let len = LENS[slot].load(Ordering::Acquire);
            Trap {
                saw: SAW[slot].load(Ordering::Relaxed),
                stack: FRAMES[slot][..len]
                    .iter()
                    .map(|f| f.load(Ordering::Relaxed))
                    .collect(),
            }
        })
        .collect()
}

/// Makes `handler` this process's `SIGTRAP` handler (`SA_SIGINFO`).
pub fn install(
    handler: extern "C" fn(libc::c_int, *mut libc::siginfo_t, *mut libc::c_void),
) -> io::Result<()> {
    // SAFETY: a zeroed `sigaction` is a valid empty one; the handler is
    // an `extern "C"` function of the SA_SIGINFO signature.
    unsafe {
        let mut action: libc::sigaction = std::mem::zeroed();
        action.sa_sigaction = handler as *const () as usize;
        action.sa_flags = libc::SA_SIGINFO;
        libc::sigemptyset(&mut action.sa_mask);
        if libc::sigaction(libc::SIGTRAP, &action, std::ptr::null_mut()) != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The `si_code` and PC of the trap a `SIGTRAP` handler was given.
///
/// # Safety
/// `info` and `context` are what the kernel passed an `SA_SIGINFO`
/// handler.
pub unsafe fn code_and_pc(info: *mut libc::siginfo_t, context: *mut libc::c_void) -> (i32, usize) {
    // SAFETY: the caller passes the kernel's valid `siginfo_t` and
    // `ucontext_t`.
    unsafe {
        let context = &*(context as *const libc::ucontext_t);
        (
            (*info).si_code,
            context.uc_mcontext.gregs[libc::REG_RIP as usize] as usize,
        )
    }
}

/// Keeps a trap at `pc` (the signal context's) with what its handler
/// `saw`: unwinds from the handler and keeps the frames from `pc` out.
/// Only for a synchronous trap, from its handler.
pub fn keep(pc: usize, saw: usize) {
    let n = TRAPS.load(Ordering::Relaxed);
    let slot = n % KEPT;
    SAW[slot].store(saw, Ordering::Relaxed);
    let mut frames = Unwound {
        slot,
        trap_pc: pc,
        len: 0,
        from_trap: false,
    };
    // SAFETY: `collect` matches `_Unwind_Trace_Fn` and only writes through
    // `arg`, the `Unwound` above. The trap is synchronous (an instruction
    // the thread ran), so the unwinder runs as it would in a crash handler.
    unsafe { _Unwind_Backtrace(collect, &mut frames as *mut Unwound as *mut libc::c_void) };
    if !frames.from_trap {
        // The unwinder did not get past the signal frame: the PC alone.
        FRAMES[slot][0].store(pc, Ordering::Relaxed);
        frames.len = 1;
    }
    LENS[slot].store(frames.len, Ordering::Release);
    TRAPS.store(n + 1, Ordering::Release);
}

/// The stack the handler is unwinding: frames are kept from the trapping
/// PC (which the signal context gives) outward.
struct Unwound {
    slot: usize,
    trap_pc: usize,
    len: usize,
    from_trap: bool,
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
    // SAFETY: `arg` is the `Unwound` `keep` passed; `context` is the
    // unwinder's, valid for this call.
    let (frames, ip) = unsafe { (&mut *(arg as *mut Unwound), _Unwind_GetIP(context)) };
    if !frames.from_trap && ip == frames.trap_pc {
        frames.from_trap = true;
    }
    if frames.from_trap {
        FRAMES[frames.slot][frames.len].store(ip, Ordering::Relaxed);
        frames.len += 1;
        if frames.len == DEPTH {
            return STOP;
        }
    }
    GO_ON
}

#[cfg(test)]
pub mod tests {
    /// The tests that trap share the one `SIGTRAP` handler and ring.
    pub static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
}
