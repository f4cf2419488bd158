//! Single steps this thread (x86-64's trap flag: a `SIGTRAP`,
//! `TRAP_TRACE`, after every instruction) and keeps what it is asked to
//! ([`Seek`]): each instruction after which a register held a value that
//! none held just before (where the value was computed, or loaded back),
//! with its stack ([`super::trap`]), as a watchpoint keeps where a word was
//! stored (a move from a register that held it already is no new
//! appearance); or each return, with the value it returned
//! ([`Return`]). Only the locating child of [`super`] steps, through one
//! op's calls.
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
/// Whether returns are kept (else appearances), and the PC of the
/// instruction the last step ran (0: one not seen).
static RETURNS: AtomicBool = AtomicBool::new(false);
static LAST_PC: AtomicUsize = AtomicUsize::new(0);

/// What the steps keep.
#[derive(Clone, Copy, Debug)]
pub enum Seek {
    /// Each instruction after which a register held this value that none
    /// held just before ([`super::trap::kept`]).
    Appearances(usize),
    /// Each return from the allocator's code, and each return into it from
    /// other code ([`returns`]).
    Returns,
}

/// A return a step saw: the allocator's `ret` at `at` (0 for a return
/// into its code from other code), the value it returned (`rax`), the
/// stack pointer after it (a smaller one is a deeper call), and whether
/// it left the allocator's code (an entry point returning to its caller).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Return {
    pub at: usize,
    pub value: usize,
    pub depth: usize,
    pub out: bool,
}

impl Return {
    /// Its words on a pipe, and back.
    pub fn to_words(self) -> [u64; 4] {
        [
            self.at as u64,
            self.value as u64,
            self.depth as u64,
            self.out as u64,
        ]
    }

    pub fn from_words(words: &[usize]) -> Option<Return> {
        let [at, value, depth, out] = *words else {
            return None;
        };
        Some(Return {
            at,
            value,
            depth,
            out: out != 0,
        })
    }
}

/// The returns kept, as a ring (see [`super::trap`]'s): the last
/// [`RETURNS_KEPT`] are what the last call returned through.
const RETURNS_KEPT: usize = 256;
static RETURN_COUNT: AtomicUsize = AtomicUsize::new(0);
static RETURN_WORDS: [[AtomicUsize; 4]; RETURNS_KEPT] =
    [const { [const { AtomicUsize::new(0) }; 4] }; RETURNS_KEPT];

/// The returns kept so far, oldest first.
pub fn returns() -> Vec<Return> {
    let seen = RETURN_COUNT.load(Ordering::Acquire);
    (seen.saturating_sub(RETURNS_KEPT)..seen)
        .filter_map(|n| {
            let words = RETURN_WORDS[n % RETURNS_KEPT].each_ref();
            Return::from_words(&words.map(|w| w.load(Ordering::Relaxed)))
        })
        .collect()
}

/// Keeps the return the thread just made, from the `ret` at `at` (0: in
/// other code) with the registers it resumes with; only from the handler,
/// which never runs twice at once.
fn keep_return(registers: &[libc::greg_t], at: usize, out: bool) {
    let r = Return {
        at,
        value: registers[libc::REG_RAX as usize] as usize,
        depth: registers[libc::REG_RSP as usize] as usize,
        out,
    };
    let n = RETURN_COUNT.load(Ordering::Relaxed);
    for (word, value) in RETURN_WORDS[n % RETURNS_KEPT].iter().zip(r.to_words()) {
        word.store(value as usize, Ordering::Relaxed);
    }
    RETURN_COUNT.store(n + 1, Ordering::Release);
}

/// Whether the instruction at `pc`, one this thread just ran, is a near
/// return (`ret`, `ret imm16`, and either with a `rep` or `bnd` prefix).
fn is_return(pc: usize) -> bool {
    // SAFETY: `pc` is the address of an instruction the thread just ran,
    // so its first byte is mapped and readable; the second is read only
    // when the first is a prefix, which is part of the same instruction.
    unsafe {
        match *(pc as *const u8) {
            0xc3 | 0xc2 => true,
            0xf3 | 0xf2 => *((pc + 1) as *const u8) == 0xc3,
            _ => false,
        }
    }
}

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
    /// the module's doc), keeping what `seek` asks for. `Err` when the
    /// trap handler cannot be installed.
    pub fn start(seek: Seek, code: &'static [Range<usize>]) -> io::Result<Steps> {
        let (value, returns) = match seek {
            Seek::Appearances(value) => (value, false),
            Seek::Returns => (0, true),
        };
        SOUGHT.store(value, Ordering::Release);
        RETURNS.store(returns, Ordering::Release);
        LAST_PC.store(0, Ordering::Release);
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
        if RETURNS.load(Ordering::Relaxed) {
            // The callee's return, as one into the allocator's code.
            keep_return(registers, 0, false);
            LAST_PC.store(pc, Ordering::Relaxed);
        }
        return;
    }
    if code != trap::TRAP_TRACE {
        return;
    }
    STEPS.fetch_add(1, Ordering::Relaxed);
    let here = in_code(pc);
    if RETURNS.load(Ordering::Relaxed) {
        let last = LAST_PC.swap(pc, Ordering::Relaxed);
        let from_code = last != 0 && in_code(last);
        if last != 0 && (here || from_code) && is_return(last) {
            keep_return(registers, if from_code { last } else { 0 }, !here);
        }
    } else {
        let sought = SOUGHT.load(Ordering::Relaxed);
        let held = REGISTERS
            .iter()
            .any(|&r| registers[r as usize] as usize == sought);
        if held && !HELD.swap(held, Ordering::Relaxed) {
            trap::keep(pc, sought);
        } else {
            HELD.store(held, Ordering::Relaxed);
        }
    }
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
        let stepping = Steps::start(Seek::Appearances(computes(x)), code).unwrap();
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

    #[test]
    fn a_return_out_of_the_code_is_kept_with_its_value() {
        let _one = trap::tests::ONE_AT_A_TIME
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        let x = std::hint::black_box(0x1234_5678_9abc);
        let code = code_of_computes();
        let before = RETURN_COUNT.load(Ordering::Acquire);
        let stepping = Steps::start(Seek::Returns, code).unwrap();
        let got = computes(x);
        drop(stepping);
        let new = &returns()[..];
        let new = &new[new.len() - (RETURN_COUNT.load(Ordering::Acquire) - before)..];
        // `outside`'s return into `computes`, then `computes`' own out.
        let out: Vec<&Return> = new.iter().filter(|r| r.out).collect();
        assert!(
            out.len() == 1 && out[0].value == got && code[0].contains(&out[0].at),
            "{new:x?}"
        );
        let into = new
            .iter()
            .position(|r| r.at == 0)
            .expect("the callee's return");
        assert!(new[into].depth < out[0].depth, "{new:x?}");
    }
}
