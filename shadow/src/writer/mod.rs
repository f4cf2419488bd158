//! Who wrote the word: the allocator code that stored into a live block
//! it had handed out. A crash is keyed by its top frames; a live block's
//! changed contents have no crash, and the call that changed them can be
//! any of the entry points that reach the one store at fault (a free-list
//! push that writes a link into a block still handed out, reached from
//! `free`, from `realloc`'s free of the old block, from a heap's
//! collection). The writer's frame is what they share.
//!
//! In a checked replay of a single-threaded program the harness forks
//! once before the program runs ([`fork_for`]). The child waits. When the
//! parent finds a word changed by an op's calls (a violation with
//! [`crate::violation::Violation::wrong_byte`]), it asks the child ([`writer_of`]):
//! the child, an exact copy of the process from before the program, runs
//! the same ops to that one, arms a hardware watchpoint on the byte's word
//! ([`watchpoint`]) for that op's calls, and sends back every store to it
//! with its stack and the byte as it left it. The store that made the byte
//! wrong, where it held what it should, is the writer; its first
//! allocator frame keys the violation. A byte no store broke (a page the
//! allocator purged, a copy that fell short, so the byte never held the
//! old block's value) has none, and its violation keeps its calls' path.
//!
//! A wrong value the calls answered (a usable size past the block's end)
//! has no store to watch: the child single steps the op's calls instead
//! ([`stepper`]) and sends back each instruction after which a register
//! first held the value, with its stack ([`producer_of`]). When one
//! instruction of the allocator's made it appear, that one computed it
//! (an inlined helper that adds 8 to every length, reached from
//! `allocate` and `allocate_zeroed` alike), and it keys the violation as
//! a writer does (the executor's call guard decides).
//!
//! A wrong block or null a call returned has, in a C allocator, a
//! function that chose it: the child steps that call keeping every
//! return ([`returner_of`]), and the innermost function whose return the
//! answer was passed on from keys it (`umm_malloc_core`'s null, whether
//! `malloc`, `calloc` or `realloc` asked).
//!
//! The child never writes a file, a finding or a line: it ends with
//! `_exit` as soon as its op is done, or at its first violation.

mod answer;
mod stepper;
mod trap;
mod watchpoint;

use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Mutex, OnceLock};
use std::time::Duration;

use crate::op::Program;
use crate::violation::WrongByte;
use stepper::{Return, Seek};
use trap::Trap;

/// How long the parent waits for the child's answer: it runs the program
/// again up to the op.
const PATIENCE: Duration = Duration::from_secs(20);

/// The parent's side: the child waiting, and the pipes to it.
struct Child {
    pid: libc::pid_t,
    ask: std::fs::File,
    answer: std::fs::File,
}

/// The child's parent, for the program running now (the parent's side).
static CHILD: Mutex<Option<Child>> = Mutex::new(None);

/// The allocator's code the child steps through: found before the fork,
/// so the child builds no table between the parent's heap and its replay.
static CODE: OnceLock<Vec<std::ops::Range<usize>>> = OnceLock::new();

/// What the child was asked (the child's side): set once, in the child.
static ASKED: OnceLock<Question> = OnceLock::new();

/// Where the child looks: op `op_index` of the allocator under test
/// (`reference: false`) or of the reference side of a differential run.
#[derive(Clone, Copy, Debug)]
struct Question {
    op_index: usize,
    reference: bool,
    sought: Sought,
}

/// What the child looks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Sought {
    /// The stores to the word holding the byte at this address.
    Stores(usize),
    /// Where this value appears in a register.
    Value(usize),
    /// Every return the op's call of this ordinal (1 for its first call
    /// through [`stepped`]) made.
    Returns(usize),
}

impl Question {
    fn to_words(self) -> [u64; 4] {
        let (kind, operand) = match self.sought {
            Sought::Stores(addr) => (0, addr),
            Sought::Value(value) => (1, value),
            Sought::Returns(call) => (2, call),
        };
        [
            self.op_index as u64,
            self.reference as u64,
            kind,
            operand as u64,
        ]
    }

    fn from_words(words: &[usize]) -> Option<Question> {
        let [op_index, reference, kind, operand] = *words else {
            return None;
        };
        let sought = match kind {
            0 => Sought::Stores(operand),
            1 => Sought::Value(operand),
            _ => Sought::Returns(operand),
        };
        Some(Question {
            op_index,
            reference: reference != 0,
            sought,
        })
    }
}

/// Before `program` runs in a checked replay: forks the child that will
/// name a writer. In the child this returns only once asked, to run the
/// program to the op asked about; asked nothing (the parent's program
/// ended without a changed word), the child exits here. Programs that use
/// other threads have no child: it would have none of their workers.
pub fn fork_for(program: &Program) {
    drop_child();
    if ASKED.get().is_some() || program.ops.iter().any(|op| op.uses_other_threads()) {
        return;
    }
    let (Ok((ask_read, ask_write)), Ok((answer_read, answer_write))) = (pipe(), pipe()) else {
        return;
    };
    CODE.get_or_init(crate::coverage::allocator_code);
    // SAFETY: the child only reads a pipe, then runs the program's ops on
    // this thread, the only one it has (a program without other threads'
    // ops: the workers are parked, holding no lock) and leaves by `_exit`.
    match unsafe { libc::fork() } {
        -1 => {}
        0 => {
            drop((ask_write, answer_read));
            be_the_child(ask_read, answer_write);
        }
        pid => {
            drop((ask_read, answer_write));
            *lock() = Some(Child {
                pid,
                ask: ask_write.into(),
                answer: answer_read.into(),
            });
        }
    }
}

/// The parent's program ended: the child, unasked, exits.
pub fn drop_child() {
    let child = lock().take();
    if let Some(child) = child {
        reap(child.pid);
    }
}

/// The stack (runtime PCs, innermost first) of the store that broke the
/// byte `wrong` names during op `op_index` of one side (`reference`), as
/// the child saw it: the last store that left the byte wrong where it
/// held what it should just before (a realloc's new byte once its copy
/// put it there). `None` without a child, or when no store broke it (a
/// page purged, a copy that never reached the byte). The child is asked
/// once.
pub fn writer_of(op_index: usize, reference: bool, wrong: WrongByte) -> Option<Vec<usize>> {
    let stores = traps(&ask(Question {
        op_index,
        reference,
        sought: Sought::Stores(wrong.addr),
    })?);
    breaker(&stores, wrong).map(|store| store.stack)
}

/// The stacks (runtime PCs, innermost first) of the instructions after
/// which a register first held `value` during op `op_index` of one side
/// (`reference`), as the child saw it stepping the op's calls up to its
/// first violation, newest first. `None` without a child. The child is
/// asked once.
pub fn producer_of(op_index: usize, reference: bool, value: usize) -> Option<Vec<Vec<usize>>> {
    let appeared = traps(&ask(Question {
        op_index,
        reference,
        sought: Sought::Value(value),
    })?);
    Some(appeared.into_iter().rev().map(|t| t.stack).collect())
}

/// The `ret` (its runtime PC) of the innermost allocator function whose
/// return value the call of op `op_index` of one side (`reference`)
/// answered with `value`, as the child saw it stepping that call (the
/// op's last):
/// the function that chose the answer, where the entry points that pass
/// it on meet. `None` without a child, or when the answer came from no
/// allocator function's return ([`answer::answered_by`]). The child is asked
/// once.
pub fn returner_of(op_index: usize, reference: bool, value: usize) -> Option<usize> {
    // The op's last call is the one whose answer is wrong: the checks
    // flag it before they query the block.
    let call = CALLS.load(Ordering::Relaxed);
    let words = ask(Question {
        op_index,
        reference,
        sought: Sought::Returns(call),
    })?;
    let returns: Vec<Return> = words
        .chunks_exact(4)
        .filter_map(Return::from_words)
        .collect();
    answer::answered_by(&returns, value)
}

/// Asks the child `question`: the words of its answer, `None` when it
/// gave none.
fn ask(question: Question) -> Option<Vec<usize>> {
    let mut child = lock().take()?;
    let asked = child.ask.write_all(as_bytes(&question.to_words())).is_ok();
    drop(child.ask);
    let traps = if asked {
        read_answer(&mut child.answer)
    } else {
        None
    };
    reap(child.pid);
    traps
}

/// Of `stores` to the byte, in order, the last that made it wrong where
/// it held the expected value before.
fn breaker(stores: &[Trap], wrong: WrongByte) -> Option<Trap> {
    let mut held = wrong.held_before;
    let mut breaker = None;
    for store in stores {
        let holds = store.saw as u8 == wrong.expected;
        if held && !holds {
            breaker = Some(store.clone());
        }
        held = holds;
    }
    breaker
}

/// Whether this process is the locating child ([`fork_for`]).
pub fn in_child() -> bool {
    ASKED.get().is_some()
}

/// The question, in the child, when it is about op `op_index` of one
/// side (`reference`).
fn asked_about(op_index: usize, reference: bool) -> Option<&'static Question> {
    ASKED
        .get()
        .filter(|q| q.op_index == op_index && q.reference == reference)
}

/// At op `op_index` of one side (`reference`): in the child, at the op it
/// was asked about, arms the watchpoint (none when the kernel refuses
/// it), or readies [`stepped`] for the op's calls. The child's answer goes
/// at [`end_in_child_after`].
pub fn arm(op_index: usize, reference: bool) {
    CALLS.store(0, Ordering::Relaxed);
    if let Some(q) = asked_about(op_index, reference) {
        *armed() = match q.sought {
            Sought::Stores(addr) => watchpoint::Watch::arm(addr)
                .ok()
                .map(|_watch| Armed::Watch { _watch }),
            Sought::Value(value) => Some(Armed::Value(value)),
            Sought::Returns(call) => Some(Armed::Returns(call)),
        };
    }
}

/// The op's calls through [`stepped`] so far (since its [`arm`]), counted
/// alike in the parent and the child: the parent asks about the returns
/// of its last one, and the child steps that one alone (a bulk op's
/// thousand calls, stepped whole, took 20 s). A question the harness asks
/// aside ([`stepped_aside`]) is not one.
static CALLS: AtomicUsize = AtomicUsize::new(0);

/// Runs `f`, one of the op's allocator calls on this thread (counted: a
/// call the op makes, or a query of what it answered): in the child
/// seeking a value, at its op, single stepped ([`stepper`]), so only the
/// calls' own instructions are seen (not the harness's around them); in
/// the child seeking returns, only the call asked about.
pub fn stepped<R>(f: impl FnOnce() -> R) -> R {
    let call = CALLS.fetch_add(1, Ordering::Relaxed) + 1;
    stepped_as(Some(call), f)
}

/// [`stepped`], for a question the harness asks the allocator aside from
/// the op's calls (its region, its heap check): not counted, and never
/// stepped for returns.
pub fn stepped_aside<R>(f: impl FnOnce() -> R) -> R {
    stepped_as(None, f)
}

fn stepped_as<R>(call: Option<usize>, f: impl FnOnce() -> R) -> R {
    if ASKED.get().is_none() {
        return f();
    }
    let seek = match *armed() {
        Some(Armed::Value(value)) => Seek::Appearances(value),
        Some(Armed::Returns(asked)) if call == Some(asked) => Seek::Returns,
        _ => return f(),
    };
    let code = CODE.get_or_init(crate::coverage::allocator_code);
    let steps = stepper::Steps::start(seek, code).ok();
    let result = f();
    drop(steps);
    result
}

/// In the child seeking a value, at a violation that leaves the heap
/// sound: the value's (its op's first), so it answers and exits; so does
/// a child seeking returns once the call asked about has run. Elsewhere,
/// and in a child watching a word (which watches to the op's end), it
/// returns.
pub fn sound_violation_in_child() {
    let answered = match *armed() {
        Some(Armed::Value(_)) => true,
        // A violation before the call asked about (tolerated in the
        // parent, which went on to that call) is not its answer.
        Some(Armed::Returns(asked)) => CALLS.load(Ordering::Relaxed) >= asked,
        _ => false,
    };
    if answered {
        end_in_child();
    }
}

/// After op `op_index`'s calls on one side: in the child, at the op it
/// was asked about, sends its answer and exits ([`end_in_child`]).
pub fn end_in_child_after(op_index: usize, reference: bool) {
    if asked_about(op_index, reference).is_some() {
        end_in_child();
    }
}

/// In the child: after its op's calls (or at a violation, a panic, the
/// program's end) sends the stores it saw, none when it never got to the
/// op, and exits. Elsewhere it returns.
pub fn end_in_child() {
    if ASKED.get().is_none() {
        return;
    }
    let armed = armed().take();
    let mut words: Vec<u64> = Vec::new();
    match armed {
        Some(Armed::Returns(_)) => {
            for r in stepper::returns() {
                words.extend(r.to_words());
            }
        }
        Some(armed) => {
            // Disarmed before the traps are read.
            drop(armed);
            for trap in trap::kept() {
                words.push(trap.stack.len() as u64);
                words.push(trap.saw as u64);
                words.extend(trap.stack.iter().map(|&pc| pc as u64));
            }
        }
        None => {}
    }
    if let Some(mut out) = ANSWER.get().and_then(|f| f.try_clone().ok()) {
        let _ = out.write_all(as_bytes(&words));
    }
    // SAFETY: ends the child at once, running nothing of the parent's
    // (no atexit handler, no leak check, no libFuzzer artifact).
    unsafe { libc::_exit(0) }
}

/// What the child looks with at its op, once armed.
static ARMED: Mutex<Option<Armed>> = Mutex::new(None);

enum Armed {
    /// A watchpoint, disarmed when dropped.
    Watch { _watch: watchpoint::Watch },
    /// The value the op's calls are stepped for.
    Value(usize),
    /// The op's call of this ordinal is stepped for its returns.
    Returns(usize),
}

fn armed() -> std::sync::MutexGuard<'static, Option<Armed>> {
    ARMED.lock().unwrap_or_else(|e| e.into_inner())
}

/// The child's end of the answer pipe.
static ANSWER: OnceLock<std::fs::File> = OnceLock::new();

/// The child: waits for a question; asked none, exits.
fn be_the_child(ask: OwnedFd, answer: OwnedFd) {
    silence();
    let mut ask = std::fs::File::from(ask);
    let mut bytes = [0u8; 32];
    let question = match ask.read_exact(&mut bytes) {
        Ok(()) => Question::from_words(&std::array::from_fn::<usize, 4, _>(|i| {
            u64::from_ne_bytes(bytes[i * 8..i * 8 + 8].try_into().expect("8 bytes")) as usize
        })),
        Err(_) => None,
    };
    let Some(question) = question else {
        // SAFETY: as in `end_in_child`.
        unsafe { libc::_exit(0) }
    };
    let _ = ANSWER.set(answer.into());
    let _ = ASKED.set(question);
    // A panic the guard would catch, or one it would not, ends the child
    // with its answer, before any handler of the parent's runs. The old
    // hook is leaked, not dropped: freeing its box would put a block on
    // the heap's free lists that the parent's never had, and the child's
    // replay of the program would be handed other blocks than the
    // parent's (its watch on the wrong word, its steps down other paths).
    // Nothing else here allocates or frees (the question is read into
    // the stack, the code it steps was found before the fork): the
    // child's heap is the parent's as it was at the fork.
    std::mem::forget(std::panic::take_hook());
    std::panic::set_hook(Box::new(|_| end_in_child()));
}

/// The child says nothing: its standard output and error go nowhere.
fn silence() {
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        // SAFETY: `dup2` onto the standard descriptors, from a descriptor
        // open for this call.
        unsafe {
            libc::dup2(null.as_raw_fd(), 1);
            libc::dup2(null.as_raw_fd(), 2);
        }
    }
}

/// The child's answer: the words it sent, `None` when it sent nothing
/// in [`PATIENCE`].
fn read_answer(answer: &mut std::fs::File) -> Option<Vec<usize>> {
    let mut bytes = Vec::new();
    let deadline = std::time::Instant::now() + PATIENCE;
    loop {
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        let mut poll = libc::pollfd {
            fd: answer.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one valid pollfd.
        let ready = unsafe { libc::poll(&mut poll, 1, left.as_millis() as libc::c_int) };
        if ready <= 0 {
            return None;
        }
        let mut chunk = [0u8; 4096];
        match answer.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => bytes.extend_from_slice(&chunk[..n]),
            Err(_) => return None,
        }
    }
    Some(words(&bytes))
}

/// The traps an answer's words carry (see [`end_in_child`]).
fn traps(words: &[usize]) -> Vec<Trap> {
    let mut traps = Vec::new();
    let mut rest = words;
    while let [len, saw, tail @ ..] = rest {
        let len = (*len).min(tail.len());
        traps.push(Trap {
            saw: *saw,
            stack: tail[..len].to_vec(),
        });
        rest = &tail[len..];
    }
    traps
}

/// Ends the child (it may still be running the program) and waits for it.
fn reap(pid: libc::pid_t) {
    // SAFETY: `pid` is our child, not yet waited for.
    unsafe {
        libc::kill(pid, libc::SIGKILL);
        libc::waitpid(pid, std::ptr::null_mut(), 0);
    }
}

fn lock() -> std::sync::MutexGuard<'static, Option<Child>> {
    CHILD.lock().unwrap_or_else(|e| e.into_inner())
}

fn pipe() -> std::io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both are new descriptors this call owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// The words a pipe carried (see [`as_bytes`]).
fn words(bytes: &[u8]) -> Vec<usize> {
    bytes
        .chunks_exact(8)
        .map(|w| u64::from_ne_bytes(w.try_into().unwrap()) as usize)
        .collect()
}

fn as_bytes(words: &[u64]) -> &[u8] {
    // SAFETY: any u64 slice is readable as its bytes.
    unsafe { std::slice::from_raw_parts(words.as_ptr() as *const u8, std::mem::size_of_val(words)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn store(byte: u8, pc: usize) -> Trap {
        Trap {
            saw: byte as usize,
            stack: vec![pc],
        }
    }

    const LIVE: WrongByte = WrongByte {
        addr: 0,
        expected: 0x5a,
        held_before: true,
    };
    const COPIED: WrongByte = WrongByte {
        held_before: false,
        ..LIVE
    };

    #[test]
    fn the_breaker_is_the_store_that_made_the_byte_wrong() {
        // A live byte overwritten: the first store broke it.
        assert_eq!(breaker(&[store(0, 1)], LIVE), Some(store(0, 1)));
        // Put back, then broken again: the last break.
        let stores = [store(0, 1), store(0x5a, 2), store(7, 3)];
        assert_eq!(breaker(&stores, LIVE), Some(store(7, 3)));
        // A realloc's new byte: filled, copied, then a link stored into it.
        let stores = [store(0xbe, 1), store(0x5a, 2), store(9, 3)];
        assert_eq!(breaker(&stores, COPIED), Some(store(9, 3)));
        // Filled and never copied: no store broke what it never held.
        assert_eq!(breaker(&[store(0xbe, 1)], COPIED), None);
        assert_eq!(breaker(&[], LIVE), None);
    }
}
