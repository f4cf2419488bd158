//! Sanitizer reports as keyed, tolerable findings.
//!
//! Fuzz builds are instrumented in ASan's recover mode
//! (`-Zsanitizer-recover=address`, `-fsanitize-recover=address`) and run
//! with `halt_on_error=0`, so ASan returns after a report instead of
//! exiting, and hands the report's text to the callback the fuzz target
//! registers, which calls [`on_report`]. The fuzz target sends ASan's own
//! printing to /dev/null, so a tolerated report costs its symbolization
//! but no log: [`on_report`] prints the ones that end the run. The report is signed as triage
//! signs a log ([`report::Signature`]); when its tolerance key
//! (`asan: <title>`) is listed in `ALLOCSOAK_TOLERATE` it is counted and
//! the program ends quietly at the executor's next check ([`check`]: after
//! each op, and before any violation, which would be its consequence).
//! Any other report aborts the process right there, as ASan would have,
//! so the engine records the input.
//!
//! In recover mode a bad access still happens after its report, and a
//! write past a block corrupts the very metadata ASan guards (the next
//! program then dies in ASan's own checks). So the harness asks ASan
//! before it touches a block ([`crate::poison::accessible`]) and reads one
//! byte where the poison starts, which reports it, instead of writing there. An
//! allocator's own bad writes (an instrumented C allocator) still happen:
//! after a tolerated one the process may fail later, elsewhere.

use std::cell::{Cell, RefCell};
use std::ffi::{c_void, CStr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::thread::LocalKey;

use crate::allocator::os::ledger;
use crate::op::Target;
use crate::poison::{RegionIsPoisoned, ShadowMapping};
use crate::tolerance;
use crate::violation::{By, Report, Violation};

/// The ASan defaults a fuzz binary of `target` bakes in
/// (`__asan_default_options`), so a bare `cargo fuzz run` behaves like the
/// `allocsoak` runs. `ASAN_OPTIONS` set by the caller still wins.
///
/// - An impossible size must come back null (ASan would abort instead).
/// - ASan's own malloc (the `system` allocator in these builds) refuses
///   requests over 256 MiB, so a huge request it would serve does not cost
///   the run a memset of a gigabyte of shadow when freed, and never reaches
///   libFuzzer's malloc limit (the other allocators map their own memory,
///   which libFuzzer does not see).
/// - A freed block waits in ASan's quarantine until 64 MiB of others
///   have been freed, not ASan's 256: a process's RSS grows to about four
///   times its quarantine in blocks freed to each size class, and over a
///   slice of thousands of inputs the default reached libFuzzer's 2 GiB
///   limit on `system` alone (an out-of-memory group on a correct
///   allocator; the same inputs peak at 1.1 GiB with 64,
///   docs/benchmarks/2026-12-02-stop-60.md). The allocator under test's
///   freed blocks are the harness's to check, not the quarantine's.
/// - A report returns to the harness, which aborts unless the report is
///   tolerated (`halt_on_error=0`, and every report, not only the first at
///   each place: `suppress_equal_pcs=0`).
/// - `mt_ops` (and `workload`, whose threads start and end in every
///   input) leaves two checks to the other targets. LeakSanitizer
///   misreads its worker threads that outlive an input (thread-exit ops
///   restart them mid-input) as leaks: leaks are `alloc_ops`' and the
///   RSS-drift monitor's. And detecting a use of a stack frame after its
///   function returned gives every thread a fake stack, mapped when it
///   starts and unmapped when it exits: a third of what a worker's start
///   and exit cost, which `mt_ops` pays about once a program
///   (docs/benchmarks/2026-11-29-stop-52.md). Allocator code only `mt_ops`
///   runs (a thread's exit, its remote frees) goes without that check.
pub fn asan_defaults(target: Target) -> &'static CStr {
    match target {
        Target::MtOps | Target::Workload => c"allocator_may_return_null=1:max_allocation_size_mb=256:quarantine_size_mb=64:halt_on_error=0:suppress_equal_pcs=0:detect_leaks=0:detect_stack_use_after_return=0",
        _ => c"allocator_may_return_null=1:max_allocation_size_mb=256:quarantine_size_mb=64:halt_on_error=0:suppress_equal_pcs=0:detect_leaks=1",
    }
}

/// A tolerated report came in since the last [`check`] (on any thread).
static PENDING: AtomicBool = AtomicBool::new(false);

/// Set while the allocator under test loads ([`starting`]).
static STARTING: AtomicBool = AtomicBool::new(false);

/// The exit status of a process whose harness could not start (a bad
/// allocator name, or a sanitizer report while the allocator loaded): an
/// error of the run, never a finding.
pub const EXIT_STARTUP: i32 = 2;

/// Marks the allocator's loading (`on`) and its end. A sanitizer report
/// meanwhile is the harness's start-up failing, not a call of a program:
/// typically a library whose globals ASan sees defined twice (its
/// `odr-violation`, a `dylib:` linked so that its symbols resolve into
/// the binary). The process prints one line saying so and exits with
/// [`EXIT_STARTUP`].
pub fn starting(on: bool) {
    STARTING.store(on, Ordering::Release);
}

/// The line a report during start-up ends the process with, and a hint
/// for the reports whose cause is known.
fn startup_failed(text: &str) -> String {
    let kind = report::Signature::from_log(text, "").map(|s| s.kind);
    let hint = match kind.as_deref() {
        Some("odr-violation") => {
            "the library defines a global the fuzz binary defines too; link it with -Wl,-Bsymbolic so it binds to its own (docs/allocators.md)"
        }
        _ => "the allocator's own start-up code failed before any program ran",
    };
    let summary = text
        .lines()
        .find_map(|l| l.split("SUMMARY: ").nth(1))
        .or_else(|| text.lines().find(|l| !l.trim().is_empty()))
        .unwrap_or("a sanitizer report")
        .trim();
    format!("allocsoak: start-up failed while loading the allocator ({summary}): {hint}")
}

thread_local! {
    /// The block this thread's current free, realloc or usable-size call
    /// was given (0 when none): a block the harness holds.
    static GIVEN: Cell<usize> = const { Cell::new(0) };
    /// The `impossible-success` of this thread's current call, when its
    /// request had to fail ([`must_fail`]).
    static MUST_FAIL: RefCell<Option<Report>> = const { RefCell::new(None) };
    /// Set while this thread's call may hand out a block ([`making`]).
    static MAKING: Cell<bool> = const { Cell::new(false) };
    /// A heap-buffer-overflow inside such a call, past a block other than
    /// the one it was given: that block's start and the report, held until
    /// the harness has looked at the block the call returned
    /// ([`take_made`]), or handled at the op's next [`check`].
    static MADE: RefCell<Option<(usize, String)>> = const { RefCell::new(None) };
}

/// Runs `f`, an allocator call on this thread that may hand out a block
/// (an alloc, a realloc). A report inside it of a heap block the call was
/// not given (ASan's `heap-buffer-overflow`) may be of the block it is
/// about to return: cut short, then filled or copied into for the size
/// asked for. It is held until the harness has looked at that block
/// ([`take_made`]). (A call made on a worker is not marked: its reports
/// are handled as they come.)
pub fn making<R>(f: impl FnOnce() -> R) -> R {
    marked(&MAKING, true, f)
}

/// Runs `f` with this thread's `mark` set to `value`, and restores the
/// outer value after it, also when `f` panics.
fn marked<T: Copy + 'static, R>(
    mark: &'static LocalKey<Cell<T>>,
    value: T,
    f: impl FnOnce() -> R,
) -> R {
    struct Restore<T: Copy + 'static>(&'static LocalKey<Cell<T>>, T);
    impl<T: Copy + 'static> Drop for Restore<T> {
        fn drop(&mut self) {
            self.0.set(self.1);
        }
    }
    let _restore = Restore(mark, mark.replace(value));
    f()
}

/// Takes the report held from the call that just returned block `p`
/// ([`making`]), when it is of that block.
pub fn take_made(p: usize) -> Option<String> {
    MADE.with_borrow_mut(|made| match made {
        Some((start, _)) if *start == p && p != 0 => made.take().map(|(_, text)| text),
        _ => None,
    })
}

/// Runs `f`, an allocator call whose request had to fail, on this thread.
/// A sanitizer report inside it is `report`, that call's
/// `impossible-success` (with the code the call ran so far as its path):
/// the allocator went on with a request it had to refuse and broke memory
/// doing it (copied an old block into the few bytes it returned), which
/// is one bug with the success the harness would have met on return.
/// `None` runs `f` unmarked.
pub fn must_fail<R>(report: Option<Report>, f: impl FnOnce() -> R) -> R {
    /// Restores the outer mark, also when the call panics.
    struct Restore(Option<Report>);
    impl Drop for Restore {
        fn drop(&mut self) {
            MUST_FAIL.set(self.0.take());
        }
    }
    if report.is_none() {
        return f();
    }
    let _restore = Restore(MUST_FAIL.replace(report));
    f()
}

/// Runs `f`, an allocator call given block `p`, a block the harness holds,
/// on this thread (a worker's call is marked on the worker). A report of
/// that very block (a double free, a usable-size query of a freed block)
/// then says so ([`report::HELD_BLOCK`]): the allocator freed it earlier,
/// behind the harness's back, and that earlier free is the bug, not this
/// call.
pub fn given<R>(p: usize, f: impl FnOnce() -> R) -> R {
    marked(&GIVEN, p, f)
}

/// Handles one sanitizer report (its full text, which the sanitizer did
/// not print: the fuzz target sends its reports to /dev/null). Returns
/// only when the report is tolerated; otherwise prints it and aborts. A
/// report of the very block this thread's call was [`given`] gets the
/// harness's line ([`report::HELD_BLOCK`]) before it is signed.
pub fn on_report(text: &str) {
    if STARTING.load(Ordering::Acquire) {
        eprintln!("{}", startup_failed(text));
        // SAFETY: `_exit` ends the process at once, without running
        // destructors or atexit handlers (ASan is mid-report here); it has
        // no preconditions.
        unsafe { libc::_exit(EXIT_STARTUP) };
    }
    // A report can come from a thread running its thread-local
    // destructors (an allocator's exit hook freeing a block twice), after
    // this thread's own state is gone: it is then no call's, held by none.
    let must_fail = MUST_FAIL.try_with(|m| m.borrow().clone()).ok().flatten();
    if let Some(mut report) = must_fail {
        report.path = crate::coverage::op_path_now();
        // A deadly signal ends the process whatever the harness does.
        let deadly = report::Signature::from_log(text, "")
            .is_some_and(|s| report::DEADLY.contains(&s.kind.as_str()));
        // Past it (its group filed, or saved while fuzzing): the program
        // ends quietly at the next check. Else it prints its line and
        // aborts.
        tolerance::raise_in_report(report, !deadly);
        PENDING.store(true, Ordering::Release);
        return;
    }
    let given = GIVEN.get();
    if MAKING.get() && MADE.try_with(|m| m.borrow().is_none()).unwrap_or(false) {
        let overflow =
            report::Signature::from_log(text, "").is_some_and(|s| s.kind == "heap-buffer-overflow");
        match report::reported_region(text) {
            Some(start) if overflow && start != given => {
                MADE.set(Some((start, text.to_string())));
                return;
            }
            _ => {}
        }
    }
    handle(text);
}

/// The reference allocator whose op is running (`diff_mimalloc`'s other
/// side), if one is: set by [`on_reference_side`]. The two sides run one
/// after the other, so one flag serves the process.
static ON_REFERENCE: Mutex<Option<&'static str>> = Mutex::new(None);

/// Runs `f`, an op of the reference allocator `name`: a sanitizer report
/// raised meanwhile says so ([`report::ON_REFERENCE`]), and is the
/// reference's bug, not the allocator under test's; what it maps meanwhile
/// is the reference's ([`ledger`]).
pub fn on_reference_side<R>(name: &'static str, f: impl FnOnce() -> R) -> R {
    struct Off;
    impl Drop for Off {
        fn drop(&mut self) {
            ledger::reference_side(false);
            *ON_REFERENCE.lock().unwrap_or_else(|e| e.into_inner()) = None;
        }
    }
    *ON_REFERENCE.lock().unwrap_or_else(|e| e.into_inner()) = Some(name);
    ledger::reference_side(true);
    let _off = Off;
    f()
}

/// [`on_report`] past the held reports: tolerated (the program ends at
/// the next [`check`]) or printed, and the process aborts.
fn handle(text: &str) {
    let given = GIVEN.get();
    let mut text = text.to_string();
    if let Some(at) = report::reported_address(&text).filter(|&at| given != 0 && at == given) {
        text.push_str(&format!("{} {at:#x}\n", report::HELD_BLOCK));
    }
    // `try_lock`: a report may come while the flag changes hands.
    if let Ok(Some(name)) = ON_REFERENCE.try_lock().map(|r| *r) {
        text.push_str(&format!(
            "{}{}{name}]\n",
            report::ON_REFERENCE,
            report::key::REFERENCE
        ));
    }
    let text = text.as_str();
    let key = report::Signature::from_log(text, "").and_then(|s| s.tolerance_key());
    match key {
        Some(key) if tolerance::count_tolerated(&key) => {
            tolerance::past_in_doubt();
            PENDING.store(true, Ordering::Release);
        }
        _ => {
            if let Some(key) = key {
                crate::findings::write_ending(&report::Ending {
                    key,
                    path_kind: None,
                });
            }
            crate::tally::flush();
            eprint!("{text}");
            std::process::abort()
        }
    }
}

/// Ends the program quietly when a tolerated report came in since the
/// last check.
pub fn check() {
    if let Some((_, text)) = MADE.take() {
        handle(&text);
    }
    if PENDING.swap(false, Ordering::AcqRel) {
        tolerance::end_quietly();
    }
}

/// Forgets a tolerated report not yet checked.
pub fn clear() {
    MADE.set(None);
    PENDING.store(false, Ordering::Release);
}

/// LeakSanitizer's `__lsan_ignore_object`: a heap block it must not
/// report as leaked.
pub type IgnoreObject = unsafe extern "C" fn(*const c_void);

static IGNORE_OBJECT: OnceLock<IgnoreObject> = OnceLock::new();

/// LeakSanitizer's `__lsan_do_recoverable_leak_check`: nonzero when it
/// finds leaks (and prints them).
pub type LeakCheck = unsafe extern "C" fn() -> std::ffi::c_int;

/// The sanitizer allocator's `__sanitizer_get_ownership`: nonzero for a
/// block it handed out and nobody freed yet.
pub type Owns = unsafe extern "C" fn(*const c_void) -> std::ffi::c_int;

static LEAKS: OnceLock<(LeakCheck, Owns)> = OnceLock::new();

/// Lets the harness ask ASan about memory before touching it (the fuzz
/// targets pass `__asan_region_is_poisoned`; without it every range is
/// taken as accessible), and LeakSanitizer which block a leak is
/// ([`given_back`]).
pub fn install(
    is_poisoned: RegionIsPoisoned,
    mapping: ShadowMapping,
    ignore_object: IgnoreObject,
    leak_check: LeakCheck,
    owns: Owns,
) {
    crate::poison::install(is_poisoned, mapping);
    let _ = IGNORE_OBJECT.set(ignore_object);
    let _ = LEAKS.set((leak_check, owns));
}

/// Blocks given back to the allocator that it had not freed when the call
/// returned, each with the leak it is if LeakSanitizer finds it lost; at
/// most [`GIVEN_BACK_KEPT`]. Addresses are kept inverted ([`Hidden`]):
/// LeakSanitizer scans this list too, and a plain address in it would
/// make the lost block reachable.
static GIVEN_BACK: Mutex<Vec<KeptLeak>> = Mutex::new(Vec::new());
const GIVEN_BACK_KEPT: usize = 1024;

/// A given-back block and the leak it is, in parts that hold only what
/// they say: words, text and lists. A [`Report`] kept whole carried stale
/// words in its unused bytes (an enum's beyond its variant's fields, an
/// `Option`'s payload), among them the lost block's address, which kept
/// the block reachable: a realloc's lost old block was never reported.
struct KeptLeak {
    block: Hidden,
    op_index: usize,
    op: String,
    api: &'static str,
    size: usize,
    align: usize,
    path: Vec<String>,
    /// [`By`]: which variant (0, 1, 2) and its names.
    by: usize,
    names: [String; 2],
    /// The [`Violation::Leak`]'s own parts.
    leaked: usize,
    call: &'static str,
}

impl KeptLeak {
    /// `leak`, a [`Violation::Leak`] of a call with a block, kept.
    fn new(p: usize, leak: Report) -> Option<KeptLeak> {
        let Violation::Leak {
            size: leaked, call, ..
        } = leak.violation
        else {
            return None;
        };
        let (size, align) = leak.site.block?;
        let (by, names) = match leak.by {
            By::Allocator(a) => (0, [a, String::new()]),
            By::Reference(r) => (1, [r, String::new()]),
            By::Versus {
                allocator,
                reference,
            } => (2, [allocator, reference]),
        };
        Some(KeptLeak {
            block: Hidden::new(p),
            op_index: leak.op_index,
            op: leak.op,
            api: leak.site.api,
            size,
            align,
            path: leak.path,
            by,
            names,
            leaked,
            call,
        })
    }

    /// The leak, its address in.
    fn report(self) -> Report {
        let [first, second] = self.names;
        Report {
            op_index: self.op_index,
            op: self.op,
            site: crate::violation::Site::new(self.api, self.size, self.align),
            path: self.path,
            violation: Violation::Leak {
                ptr: self.block.get(),
                size: self.leaked,
                call: self.call,
            },
            by: match self.by {
                0 => By::Allocator(first),
                1 => By::Reference(first),
                _ => By::Versus {
                    allocator: first,
                    reference: second,
                },
            },
        }
    }
}

/// An address LeakSanitizer does not take for a pointer.
#[derive(Clone, Copy)]
struct Hidden(usize);

impl Hidden {
    fn new(p: usize) -> Hidden {
        Hidden(!p)
    }

    fn get(self) -> usize {
        !self.0
    }
}

/// In a replay, after a call the harness gave block `p` back to (a free,
/// a realloc that moved it): when the sanitizer's allocator still has `p`
/// (the allocator under test took it from the C heap and did not return
/// it there), keeps it with `leak`, its [`crate::violation::Violation::Leak`]
/// with that call's path, for [`lost_block`]. A cache of free blocks
/// keeps blocks this way too: only LeakSanitizer says which are lost.
pub fn given_back(p: usize, leak: impl FnOnce() -> Report) {
    let Some((_, owns)) = LEAKS.get() else {
        return;
    };
    if p == 0 || !crate::findings::recording() {
        return;
    }
    // SAFETY: the allocator looks the address up among its chunks; any
    // address is a valid question.
    if unsafe { owns(p as *const c_void) } != 0 {
        let mut kept = GIVEN_BACK.lock().unwrap_or_else(|e| e.into_inner());
        if kept.len() < GIVEN_BACK_KEPT {
            kept.extend(KeptLeak::new(p, leak()));
        }
    }
}

/// At a replayed program's end: the leak of the oldest block given back
/// (in this program or an earlier one of the replay) that the allocator
/// still has, when LeakSanitizer finds leaks and they are all such blocks
/// (its check is clean once they are taken out). LeakSanitizer names
/// where a lost block was allocated; this names the call that lost it,
/// so one bug is one group, whichever call made the block. A block is
/// kept until the allocator frees it: a pointer left on the stack can
/// hide a lost one from the program that lost it.
pub fn lost_block() -> Option<Report> {
    let (check, owns) = LEAKS.get()?;
    let mut kept = GIVEN_BACK.lock().unwrap_or_else(|e| e.into_inner());
    // SAFETY: as in `given_back`.
    kept.retain(|k| unsafe { owns(k.block.get() as *const c_void) } != 0);
    // SAFETY: LeakSanitizer's leak check reads the heap and the roots; it
    // may run at any point of the program.
    if kept.is_empty() || unsafe { check() } == 0 {
        return None;
    }
    let kept = std::mem::take(&mut *kept);
    for k in &kept {
        never_freed(k.block.get());
    }
    // SAFETY: as above.
    let only_them = unsafe { check() } == 0;
    let first = kept.into_iter().next().filter(|_| only_them)?;
    Some(first.report())
}

/// A block the harness will never free, as it cannot say what it is: one
/// an impossible request returned (no size it could free it with is
/// true). LeakSanitizer is told, so the violation already flagged is not
/// filed a second time as a leak.
pub fn never_freed(p: usize) {
    if let Some(ignore) = IGNORE_OBJECT.get() {
        // SAFETY: LSan looks the address up among the heap blocks it
        // knows and only marks one it finds (others are ignored).
        unsafe { ignore(p as *const c_void) };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn flag(target: Target, name: &str) -> Option<String> {
        let options = asan_defaults(target).to_str().unwrap();
        options.split(':').find_map(|kv| {
            let (k, v) = kv.split_once('=')?;
            (k == name).then(|| v.to_string())
        })
    }

    #[test]
    fn only_the_threaded_targets_leave_leaks_and_stack_use_after_return_to_the_others() {
        for target in Target::ALL {
            let mt = matches!(target, Target::MtOps | Target::Workload);
            let want_leaks = if mt { "0" } else { "1" };
            assert_eq!(
                flag(target, "detect_leaks").as_deref(),
                Some(want_leaks),
                "{target}"
            );
            // ASan's own default (on) everywhere else.
            let want_uar = mt.then_some("0");
            assert_eq!(
                flag(target, "detect_stack_use_after_return").as_deref(),
                want_uar,
                "{target}"
            );
            assert_eq!(
                flag(target, "allocator_may_return_null").as_deref(),
                Some("1"),
                "{target}"
            );
        }
    }
}
