//! What a process does at a violation: ends the program ([`raise`]), or
//! goes on past it ([`record`], a violation that leaves the heap sound),
//! counting it when the soak's tolerate file lists its key and saving it
//! as a finding while fuzzing ([`crate::findings`]). The soak lists the
//! keys of the groups it has filed, so a known bug no longer ends the run
//! and the fuzzer gets past it to the bugs behind.

use std::cell::Cell;
use std::collections::{HashMap, HashSet};
use std::sync::{Mutex, OnceLock};

use crate::violation::Report;

/// What a `save <pattern>` line of the tolerate file starts with: a
/// violation that matches it is saved as a finding (a new key each time)
/// and the program ends quietly, while fuzzing; anywhere else it is not
/// tolerated. The soak lists the kinds of the groups it keys by code path
/// so: a new way to a known bug does not end the fuzz process, and its
/// replay at intake says whether it is that bug (a variant) or another.
pub const SAVE: &str = "save ";

/// The violation keys this process tolerates: read once from the file
/// `ALLOCSOAK_TOLERATE` names (the process's settings; one key, `prefix*`
/// pattern or `save` line per line), empty when unset. The soak writes it
/// with the keys of the groups it has filed, so a known bug no longer ends
/// the run and the fuzzer gets past it.
fn tolerated() -> &'static HashSet<String> {
    static KEYS: OnceLock<HashSet<String>> = OnceLock::new();
    KEYS.get_or_init(|| {
        let Some(path) = &crate::settings::get().tolerate else {
            return HashSet::new();
        };
        match std::fs::read_to_string(path) {
            Ok(text) => text
                .lines()
                .filter(|l| !l.is_empty())
                .map(str::to_string)
                .collect(),
            Err(e) => {
                eprintln!(
                    "allocsoak: ALLOCSOAK_TOLERATE={}: {e}",
                    path.to_string_lossy()
                );
                std::process::exit(2)
            }
        }
    })
}

/// Whether `key` is listed, or matches a listed pattern: a line ending in
/// `*` lists every key that starts with what precedes it
/// (`alignment in *` tolerates every alignment violation).
fn is_tolerated(key: &str) -> bool {
    let listed = tolerated();
    listed.contains(key) || listed.iter().any(|l| matches_pattern(l, key))
}

/// Whether a `prefix*` line matches `key`.
fn matches_pattern(line: &str, key: &str) -> bool {
    line.strip_suffix('*')
        .is_some_and(|prefix| key.starts_with(prefix))
}

/// Whether a `save` line ([`SAVE`]) matches `key`.
fn is_saved_past(key: &str) -> bool {
    tolerated().iter().any(|l| {
        l.strip_prefix(SAVE)
            .is_some_and(|pattern| pattern == key || matches_pattern(pattern, key))
    })
}

/// The payload a tolerated violation unwinds with; [`crate::harness`]
/// catches it and the program ends there.
pub struct Tolerated;

thread_local! {
    static TOLERATING: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is unwinding from a tolerated violation (executors
/// then release their blocks as they drop).
pub fn tolerating() -> bool {
    TOLERATING.with(Cell::get)
}

/// Counts a violation the process went on past (tolerated, or saved as a
/// finding), and returns its count so far. Each power of two is printed
/// (`allocsoak tolerated: <count> × <key>`, or `recorded` for a finding
/// not yet filed) and written to the findings folder's counts file, which
/// the soak reads.
fn count(key: &str, tolerated: bool) -> u64 {
    static COUNTS: Mutex<Option<HashMap<String, u64>>> = Mutex::new(None);
    let mut counts = COUNTS.lock().unwrap_or_else(|e| e.into_inner());
    let counts = counts.get_or_insert_with(HashMap::new);
    let n = counts.entry(key.to_string()).or_insert(0);
    *n += 1;
    let n = *n;
    if n.is_power_of_two() {
        let how = if tolerated { "tolerated" } else { "recorded" };
        eprintln!("allocsoak {how}: {n} × {key}");
        crate::findings::write_counts(counts);
    }
    n
}

/// Counts `key` when it is tolerated; false when it is not.
pub(crate) fn count_tolerated(key: &str) -> bool {
    if tolerated().is_empty() || !is_tolerated(key) {
        return false;
    }
    count(key, true);
    true
}

/// Ends the program at a violation: panics with its line (after writing
/// its record where `ALLOCSOAK_RECORD` says), or, when its key is
/// tolerated, counts it and ends the program quietly ([`end_quietly`]);
/// while fuzzing, one a `save` line ([`SAVE`]) matches is saved as a
/// finding, counted, and ends the program quietly too (or the process,
/// [`past_in_doubt`]). Called through
/// [`crate::ending`], which first ends the program quietly at a tolerated
/// sanitizer report that came in before it.
pub fn raise(report: Report) -> ! {
    if went_past(&report, true) {
        past_in_doubt();
        end_quietly();
    }
    ends(&report);
    panic!("{report}")
}

/// Ends the program at a violation no process gets past, whatever the
/// tolerate file lists: a leak, which libFuzzer's own leak check ends the
/// fuzz process at anyway (so a replay of it must not go on past it).
pub fn raise_always(report: Report) -> ! {
    ends(&report);
    panic!("{report}")
}

/// [`raise`] for a violation met inside a sanitizer's report callback,
/// which must not unwind, and after which memory is in doubt whatever its
/// kind: returns when the process `can_go_on` and its own key is listed
/// (its group was filed; a `<kind> in *` pattern, which a replay lists for
/// the kinds that leave the heap sound, does not do) or a `save` line
/// matches it while fuzzing (the program then ends at the next check, or
/// the process at once: [`past_in_doubt`]); else prints its line and
/// aborts.
pub(crate) fn raise_in_report(report: Report, can_go_on: bool) {
    if can_go_on && went_past(&report, false) {
        return past_in_doubt();
    }
    ends(&report);
    eprintln!("{report}");
    std::process::abort()
}

/// The exit status of a process that ended past a violation that leaves
/// memory in doubt ([`past_in_doubt`]): neither a crash's nor one of libFuzzer's own
/// (70 timeout, 71 out of memory, 72 interrupted, 77 error) nor
/// honggfuzz's sanitizer status (103).
pub const EXIT_IN_DOUBT: i32 = 3;

/// Called once a violation that leaves memory in doubt was got past
/// (counted, or saved as a finding): a sanitizer report, or one of the
/// harness's own that ends the program ([`raise`]). With
/// `ALLOCSOAK_END_IN_DOUBT` set, ends the process at once. The
/// allocator's own memory is in doubt after it (a block handed out twice,
/// a free list written over, metadata overflowed), and every call after
/// it may only show what the first bug broke: a timeout, a deadly signal,
/// another report of the same corruption. Nothing runs past it, no block
/// is freed into that heap; a `-fork` child's parent starts a fresh one.
pub(crate) fn past_in_doubt() {
    if crate::settings::get().end_in_doubt {
        // SAFETY: `_exit` ends the process at once, without running
        // destructors or atexit handlers (a sanitizer may be mid-report,
        // other threads mid-call); it has no preconditions. What the
        // process got past is counted and saved already.
        unsafe { libc::_exit(EXIT_IN_DOUBT) };
    }
}

/// Whether the program gets past `report`: its key is tolerated (counted;
/// by a pattern too when `patterns`), or a `save` line matches it while
/// fuzzing (saved as a finding).
fn went_past(report: &Report, patterns: bool) -> bool {
    let key = report.key();
    if patterns && count_tolerated(&key) {
        return true;
    }
    if !patterns && tolerated().contains(&key) {
        count(&key, true);
        return true;
    }
    if crate::findings::active() && is_saved_past(&key) {
        let n = count(&key, false);
        crate::findings::save(report, &key, n);
        return true;
    }
    false
}

/// Leaves what the pipeline needs of a violation that ends the process:
/// its record (in a replay) and its ending (while fuzzing).
fn ends(report: &Report) {
    crate::tally::flush();
    crate::findings::write_record(report);
    let violation = &report.violation;
    crate::findings::write_ending(&report::Ending {
        key: report.key(),
        path_kind: violation
            .is_of_a_call()
            .then(|| violation.kind().to_string()),
    });
}

/// Unwinds out of the program with [`Tolerated`], which skips the panic
/// hook an engine aborts in; the executor releases its blocks as it drops.
pub fn end_quietly() -> ! {
    TOLERATING.with(|t| t.set(true));
    std::panic::resume_unwind(Box::new(Tolerated));
}

/// Records a violation that leaves the heap sound, and returns so the
/// program goes on with the block: when its key is tolerated (counted),
/// and, while fuzzing with a findings folder (`ALLOCSOAK_FINDINGS`), when
/// it is not (saved there with the input, a few inputs per key, and
/// counted): a sound violation never ends a fuzz process. Without a
/// findings folder (a replay) an untolerated one panics as [`raise`] does.
pub fn record(report: Report) {
    let key = report.key();
    if count_tolerated(&key) {
        return;
    }
    if crate::findings::active() {
        let n = count(&key, false);
        crate::findings::save(&report, &key, n);
        return;
    }
    crate::findings::write_record(&report);
    panic!("{report}")
}

/// Catches a tolerated violation's unwind out of `f`; any other panic goes on.
pub fn tolerate(f: impl FnOnce()) {
    if tolerated().is_empty() {
        return f();
    }
    let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(f));
    TOLERATING.with(|t| t.set(false));
    if let Err(payload) = result {
        if !payload.is::<Tolerated>() {
            std::panic::resume_unwind(payload);
        }
    }
}
