//! Single steps this thread (x86-64's trap flag: a `SIGTRAP`,
//! `TRAP_TRACE`, after every instruction) and keeps each instruction after
//! which a register held a value that none held just before: where the
//! value was computed (or loaded back), with its stack ([`super::trap`]),
//! as a watchpoint keeps where a word was stored. A move from a register
//! that held it already is no new appearance. Only the locating child of
//! [`super`] steps, through one op's calls.
//!
//! It steps through the allocator's code only: a call from it into other
//! code (the sanitizer's `calloc` zeroing 32 MiB, libc's `memset`) runs at
//! full speed, the trap flag off, until a hardware breakpoint on the
//! return address ([`super::watchpoint::breakpoint`]) turns it back on.

use std::io;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicUsize, Ordering};

use perf_event_open_sys as sys;

use super::trap;

/// RFLAGS' trap flag.
const TRAP_FLAG: i64 = 0x100;

/// The value sought, and whether a register held it at the last step.
static SOUGHT: AtomicUsize = AtomicUsize::new(0);
static HELD: AtomicBool = AtomicBool::new(false);
/// The allocator's code (runtime addresses, sorted), as a pointer and a
/// length the handler reads; whether the last step was in it.
static CODE: AtomicPtr<Range<usize>> = AtomicPtr::new(std::ptr::null_mut());
static CODE_LEN: AtomicUsize = AtomicUsize::new(0);
static IN_CODE: AtomicBool = AtomicBool::new(false);
/// The breakpoint on the return address of a call stepped over (its perf
/// event's descriptor, -1 for none) and that address.
static OVER: AtomicI32 = AtomicI32::new(-1);
static OVER_AT: AtomicUsize = AtomicUsize::new(0);
/// The single steps taken.
static STEPS: AtomicUsize = AtomicUsize::new(0);

/// The general registers a value is computed into (not the stack
/// pointer).
const REGISTERS: [libc::c_int; 15] = [
    libc::REG_RAX,
    libc::REG_RBX,
    libc::REG_RCX,
    libc::REG_RDX,
    libc::REG_RSI,
    libc::REG_RDI,
    libc::REG_RBP,
    libc::REG_R8,
    libc::REG_R9,
    libc::REG_R10,
    libc::REG_R11,
    libc::REG_R12,
    libc::REG_R13,
    libc::REG_R14,
    libc::REG_R15,
];

/// This thread, stepping; dropping it stops. Steps on the thread that
/// started it, so it is dropped there.
pub struct Steps(());

impl Steps {
    /// Steps this thread from now on through `code` (the allocator's, see
    /// the module's doc), keeping where `value` appears. `Err` when the
    /// trap handler cannot be installed.
    pub fn start(value: usize, code: &'static [Range<usize>]) -> io::Result<Steps> {
        SOUGHT.store(value, Ordering::Release);
        HELD.store(false, Ordering::Release);
        IN_CODE.store(false, Ordering::Release);
        CODE.store(code.as_ptr().cast_mut(), Ordering::Release);
        CODE_LEN.store(code.len(), Ordering::Release);
        trap::install(on_step)?;
        set_trap_flag(true);
        Ok(Steps(()))
    }
}

impl Drop for Steps {
    fn drop(&mut self) {
        set_trap_flag(false);
        let over = OVER.swap(-1, Ordering::AcqRel);
        if over >= 0 {
            // SAFETY: the descriptor the handler opened and nothing else
            // closes.
            unsafe { libc::close(over) };
        }
    }
}

/// The single steps taken so far (by every [`Steps`]).
#[cfg(test)]
fn steps() -> usize {
    STEPS.load(Ordering::Acquire)
}

fn set_trap_flag(on: bool) {
    // SAFETY: pushes RFLAGS on this thread's stack, sets or clears its
    // trap flag (bit 8) there and pops it back: nothing else changes. The
    // asm uses the stack (no `nostack`), so the compiler keeps nothing in
    // the red zone across it.
    unsafe {
        if on {
            std::arch::asm!("pushfq", "or qword ptr [rsp], 0x100", "popfq");
        } else {
            std::arch::asm!("pushfq", "and qword ptr [rsp], -257", "popfq");
        }
    }
}

/// Whether `pc` is the allocator's code.
fn in_code(pc: usize) -> bool {
    let (ptr, len) = (
        CODE.load(Ordering::Acquire),
        CODE_LEN.load(Ordering::Acquire),
    );
    if ptr.is_null() {
        return false;
    }
    // SAFETY: `start` stored a `'static` slice's pointer and length.
    let code = unsafe { std::slice::from_raw_parts(ptr, len) };
    let i = code.partition_point(|r| r.start <= pc);
    i > 0 && pc < code[i - 1].end
}

extern "C" fn on_step(
    _signal: libc::c_int,
    info: *mut libc::siginfo_t,
    context: *mut libc::c_void,
) {
    // SAFETY: this is an SA_SIGINFO handler, given the kernel's own.
    let (code, pc) = unsafe { trap::code_and_pc(info, context) };
    // SAFETY: the kernel's `ucontext_t` for this signal, which the handler
    // may change: the registers the thread resumes with.
    let registers = unsafe { &mut (*(context as *mut libc::ucontext_t)).uc_mcontext.gregs };
    if code == trap::TRAP_PERF && pc == OVER_AT.load(Ordering::Acquire) {
        // Back from a call stepped over: step again.
        let over = OVER.swap(-1, Ordering::AcqRel);
        if over >= 0 {
            // SAFETY: the descriptor opened below, closed once.
            unsafe { libc::close(over) };
        }
        registers[libc::REG_EFL as usize] |= TRAP_FLAG;
        IN_CODE.store(true, Ordering::Release);
        return;
    }
    if code != trap::TRAP_TRACE {
        return;
    }
    STEPS.fetch_add(1, Ordering::Relaxed);
    let sought = SOUGHT.load(Ordering::Relaxed);
    let held = REGISTERS
        .iter()
        .any(|&r| registers[r as usize] as usize == sought);
    if held && !HELD.swap(held, Ordering::Relaxed) {
        trap::keep(pc, sought);
    } else {
        HELD.store(held, Ordering::Relaxed);
    }
    let here = in_code(pc);
    if !here && IN_CODE.load(Ordering::Acquire) {
        // SAFETY: the stack pointer of this thread, which points into its
        // mapped stack.
        let returns_to = unsafe { *(registers[libc::REG_RSP as usize] as *const usize) };
        if in_code(returns_to) {
            // Called out of the allocator's code: run the callee unstepped
            // until it returns (stepped on when the breakpoint cannot be
            // had).
            let over = super::watchpoint::breakpoint(sys::bindings::HW_BREAKPOINT_X, returns_to);
            if over >= 0 {
                OVER.store(over, Ordering::Release);
                OVER_AT.store(returns_to, Ordering::Release);
                registers[libc::REG_EFL as usize] &= !TRAP_FLAG;
            }
        }
    }
    IN_CODE.store(here, Ordering::Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Stands for the allocator's code: computes the value, after a call
    /// into other code.
    #[inline(never)]
    fn computes(x: usize) -> usize {
        let x = outside(x);
        std::hint::black_box(x).wrapping_mul(7).wrapping_add(3)
    }

    /// Other code, long to step through.
    #[inline(never)]
    fn outside(x: usize) -> usize {
        (0..100_000).fold(x, |a, i| std::hint::black_box(a ^ i)) ^ 0x1_8a88
    }

    /// `computes`' code: from its start to the next function's.
    fn code_of_computes() -> &'static [Range<usize>] {
        let start = computes as *const () as usize;
        // Past its end, but short of `outside` (laid out after it or
        // before it).
        let end = match outside as *const () as usize {
            o if o > start => o,
            _ => start + 64,
        };
        Box::leak(vec![Range { start, end }].into_boxed_slice())
    }

    #[test]
    fn the_instruction_that_computed_the_value_is_kept() {
        let _one = trap::tests::ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let x = std::hint::black_box(0x1234_5678_9abc);
        let code = code_of_computes();
        let (before, steps_before) = (trap::count(), steps());
        // The value sought is only passed on: no register of this
        // function's holds it while `computes` computes it again.
        let stepping = Steps::start(computes(x), code).unwrap();
        let got = computes(x);
        drop(stepping);
        assert_eq!(got, computes(x));
        let traps = trap::kept();
        let new = &traps[traps.len() - (trap::count() - before)..];
        assert!(
            new.iter().any(|t| code[0].contains(&(t.stack[0] - 1))),
            "{:#x?}: {new:x?}",
            code[0]
        );
        let last = new.last().unwrap();
        assert!(last.stack.len() > 1, "its callers too: {last:x?}");
        // `outside` ran unstepped: its loop alone is 100,000 iterations.
        let taken = steps() - steps_before;
        assert!(taken < 5_000, "{taken} steps");
    }
}
