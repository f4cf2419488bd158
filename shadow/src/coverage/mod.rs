//! Which allocator code an op ran: the SanitizerCoverage counters
//! (`-sanitizer-coverage-inline-8bit-counters`, the `__sancov_cntrs`
//! section) that its allocator calls moved, named by the functions they sit
//! in (the PC table, `__sancov_pcs`, holds one PC per counter; the symbol
//! table of the object it is in names it: the executable's, or a `dylib:`
//! allocator's own, see [`objects`]). A violation of what a call returned is keyed by
//! that path ([`crate::violation::Report::path`]), as a crash is keyed by
//! its stack: one bug reached through `alloc` and `alloc-zeroed`, in any
//! size tier or target, runs the same allocator functions.
//!
//! The probe is on only in a replay (`ALLOCSOAK_RECORD` set, see
//! [`crate::findings`]) of a binary that has the counters: copying them
//! around every call would cost the fuzzer most of its speed. Elsewhere
//! every function here is a no-op and paths are empty.
//!
//! Only the allocator's own functions count (the zoo's, crate `zoo`,
//! too): the harness (the `shadow` crate, which the fuzz builds leave
//! without counters anyway, the declared allocators' glue, the fuzz targets),
//! Rust's std, core and alloc (generic code the harness instantiates) and
//! the sanitizer runtime are left out.

mod inlined;
mod objects;
mod owner;

pub use owner::{crate_of_symbol, is_allocator_code, uncovered_crates};

use std::collections::BTreeSet;
use std::ops::Range;
use std::sync::{Mutex, OnceLock};

/// The counters of this process's instrumented objects that are in the
/// allocator's own functions: the only ones copied around a call (25,108
/// of alloc_ops' 94,373, most of them the reference mimalloc's C; all of a
/// `dylib:`'s). A snapshot is their bytes, run after run.
struct Probe {
    runs: Vec<Run>,
}

/// Consecutive counters of one object, with their PC table entries.
struct Run {
    /// The first counter, one byte each, `len` of them.
    counters: *const u8,
    /// `len` pairs of (PC, flags), as the loader relocated them.
    pcs: *const [usize; 2],
    len: usize,
    /// Where its first counter is in a snapshot.
    at: usize,
}

// SAFETY: the probe only holds addresses of sections that live as long as
// the process, and reads them (see `snapshot`).
unsafe impl Send for Probe {}
// SAFETY: a `Probe` is never changed after `find` builds it; shared, it only reads
// the sections (see `snapshot` and `pc`).
unsafe impl Sync for Probe {}

/// The counters before the current call, and the ones the op moved: by
/// its own calls, and by the queries the checks made of what they returned
/// (a usable size, a good size). Counters are named by their place in a
/// snapshot.
#[derive(Default)]
struct Op {
    before: Vec<u8>,
    after: Vec<u8>,
    moved: BTreeSet<usize>,
    queried: BTreeSet<usize>,
    /// A call is running: `before` is its start ([`op_path_now`]).
    calling: bool,
}

static OP: Mutex<Option<Op>> = Mutex::new(None);

fn probe() -> Option<&'static Probe> {
    static PROBE: OnceLock<Option<Probe>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            crate::settings::get().record.as_ref()?;
            find()
        })
        .as_ref()
}

/// The watched counters of every object with counters, where the loader
/// mapped them.
fn find() -> Option<Probe> {
    let mut runs = Vec::new();
    for object in objects::objects() {
        let Some(sancov) = object.sancov else {
            continue;
        };
        let counters = (sancov.counters + object.bias) as *const u8;
        let pcs = (sancov.pcs + object.bias) as *const [usize; 2];
        for run in allocator_counters(object, pcs, sancov.len) {
            let at = runs.last().map_or(0, |r: &Run| r.at + r.len);
            // SAFETY: `run` lies below `len`, the sections' length.
            let (counters, pcs) = unsafe { (counters.add(run.start), pcs.add(run.start)) };
            runs.push(Run {
                counters,
                pcs,
                len: run.len(),
                at,
            });
        }
    }
    (!runs.is_empty()).then_some(Probe { runs })
}

/// The runs of an object's counters whose code is in the allocator's own
/// functions (a function's counters are consecutive). Each function is
/// demangled and judged once, when its first counter is met: a replay
/// process pays this at its start.
fn allocator_counters(
    object: &objects::Object,
    pcs: *const [usize; 2],
    len: usize,
) -> Vec<Range<usize>> {
    let symbols = &object.symbols;
    let mut runs: Vec<Range<usize>> = Vec::new();
    let mut last: Option<(usize, bool)> = None;
    for i in 0..len {
        // SAFETY: `i < len`, and the PC table holds `len` pairs for the
        // whole process.
        let pc = unsafe { (*pcs.add(i))[0] }.wrapping_sub(object.bias);
        let mine = symbols.function_at(pc).is_some_and(|f| match last {
            Some((seen, mine)) if seen == f => mine,
            _ => {
                let mine = is_allocator_code(&symbols.name(f));
                last = Some((f, mine));
                mine
            }
        });
        match runs.last_mut() {
            Some(run) if mine && run.end == i => run.end = i + 1,
            _ if mine => runs.push(i..i + 1),
            _ => {}
        }
    }
    runs
}

impl Probe {
    /// The watched counters now, run after run.
    fn snapshot(&self, into: &mut Vec<u8>) {
        into.clear();
        for run in &self.runs {
            // SAFETY: `counters` is the start of `len` bytes in a writable
            // section mapped for the whole process; any byte is a valid u8.
            // Instrumented code on other threads may bump a counter while
            // it is read (plain byte stores the compiler inserted, outside
            // Rust's model, which libFuzzer reads the same way): a torn
            // view only misses or adds that one counter.
            let counters = unsafe { std::slice::from_raw_parts(run.counters, run.len) };
            into.extend_from_slice(counters);
        }
    }

    /// The places where two snapshots differ, compared a chunk at a time
    /// (few chunks differ in one call), so a replay of many programs stays
    /// fast.
    fn moved<'a>(before: &'a [u8], after: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
        const CHUNK: usize = 256;
        before
            .chunks(CHUNK)
            .zip(after.chunks(CHUNK))
            .enumerate()
            .filter(|(_, (b, a))| b != a)
            .flat_map(move |(c, (b, a))| {
                (0..b.len())
                    .filter(move |&k| a[k] != b[k])
                    .map(move |k| c * CHUNK + k)
            })
    }

    /// The runtime address of the code of the counter at snapshot place `i`.
    fn pc(&self, i: usize) -> usize {
        let run = &self.runs[self.runs.partition_point(|r| r.at <= i) - 1];
        // SAFETY: `i` is a place in a snapshot, so `i - run.at < run.len`,
        // and the PC table holds that many pairs from `pcs` for the whole
        // process.
        unsafe { (*run.pcs.add(i - run.at))[0] }
    }
}

/// Starts an op: forgets what earlier ops ran.
pub fn begin_op() {
    if probe().is_some() {
        let mut op = OP.lock().unwrap_or_else(|e| e.into_inner());
        let op = op.get_or_insert_with(Op::default);
        op.moved.clear();
        op.queried.clear();
    }
}

/// Runs `f`, an allocator call, and adds what it ran to the op's path.
pub fn around<R>(f: impl FnOnce() -> R) -> R {
    moving(false, f)
}

/// Runs `f`, a query a check makes of what the op's calls returned, and
/// adds what it ran to the op's queries: in the path only of a violation
/// of that query's answer ([`op_path`]).
pub fn around_query<R>(f: impl FnOnce() -> R) -> R {
    moving(true, f)
}

fn moving<R>(query: bool, f: impl FnOnce() -> R) -> R {
    let Some(probe) = probe() else {
        return f();
    };
    // The buffers are kept from call to call: allocated and freed around
    // every call, they were most of a replay's time under ASan. The lock
    // is not held while the allocator runs.
    {
        let mut op = OP.lock().unwrap_or_else(|e| e.into_inner());
        let op = op.get_or_insert_with(Op::default);
        probe.snapshot(&mut op.before);
        op.calling = true;
    }
    let result = f();
    let mut op = OP.lock().unwrap_or_else(|e| e.into_inner());
    let op = op.get_or_insert_with(Op::default);
    let mut after = std::mem::take(&mut op.after);
    probe.snapshot(&mut after);
    let moved: Vec<usize> = Probe::moved(&op.before, &after).collect();
    let into = if query {
        &mut op.queried
    } else {
        &mut op.moved
    };
    into.extend(moved);
    op.after = after;
    op.calling = false;
    result
}

/// Which of an op's allocator code a path is
/// ([`crate::violation::Violation::path_of`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PathOf {
    /// The op's own calls.
    Calls,
    /// The queries its checks made (a usable size, a good size): the code
    /// that gave the answer, whichever call made the block. The calls'
    /// when the queries ran none.
    Queries,
    /// Both.
    Both,
}

/// The allocator's own functions the op ran so far (its calls, its
/// checks' queries or both: `of`), sorted; empty when the probe is off.
pub fn op_path(of: PathOf) -> Vec<String> {
    path(of, false)
}

/// [`op_path`] of the op's calls, the one running now included as far as
/// it got: for a finding met inside an allocator call (a sanitizer report
/// in a call that had to fail).
pub fn op_path_now() -> Vec<String> {
    path(PathOf::Calls, true)
}

fn path(of: PathOf, now: bool) -> Vec<String> {
    names_of(moved(of, now), |_, _| true)
}

/// The snapshot places of the counters the op moved so far (see
/// [`path`]).
fn moved(of: PathOf, now: bool) -> Vec<usize> {
    let Some(probe) = probe() else {
        return Vec::new();
    };
    let op = OP.lock().unwrap_or_else(|e| e.into_inner());
    op.as_ref().map_or_else(Vec::new, |op| {
        let queries = match of {
            PathOf::Queries if op.queried.is_empty() => PathOf::Calls,
            of => of,
        };
        let calls = op.moved.iter().filter(|_| queries != PathOf::Queries);
        let queried = op.queried.iter().filter(|_| queries != PathOf::Calls);
        let mut moved: Vec<usize> = calls.chain(queried).copied().collect();
        if now && op.calling {
            let mut counters = Vec::new();
            probe.snapshot(&mut counters);
            moved.extend(Probe::moved(&op.before, &counters));
        }
        moved
    })
}

/// The functions the counters at snapshot places `moved` are in, those
/// `within` keeps (an object and a function of its symbol table), sorted.
fn names_of(moved: Vec<usize>, within: impl Fn(&objects::Object, usize) -> bool) -> Vec<String> {
    let Some(probe) = probe() else {
        return Vec::new();
    };
    // Each counter names its function and the helpers inlined into it
    // that its code came from, as a stack names inlined frames.
    let mut names: BTreeSet<String> = BTreeSet::new();
    for i in moved {
        let Some((object, pc)) = objects::at(probe.pc(i)) else {
            continue;
        };
        if let Some(f) = object
            .symbols
            .function_at(pc)
            .filter(|&f| within(object, f))
        {
            names.insert(object.symbols.name(f));
            names.extend(inlined::names_at(object, pc));
        }
    }
    names.into_iter().collect()
}

/// The path of the op's calls within the allocator's C function whose
/// `ret` is at runtime PC `ret` (see [`crate::writer::returner_of`]): the
/// function that returned, and the helpers inlined into it that ran.
/// Empty for a Rust function, whose helpers are inlined into its entry
/// points (the whole path's inlined names say more of it), and for code
/// not the allocator's.
pub fn returner_path(ret: usize) -> Vec<String> {
    let Some((object, at)) = objects::at(ret) else {
        return Vec::new();
    };
    let Some(returner) = object.symbols.function_at(at) else {
        return Vec::new();
    };
    let name = object.symbols.name(returner);
    if !is_allocator_code(&name) || name.contains("::") {
        return Vec::new();
    }
    names_of(moved(PathOf::Calls, false), |o, f| {
        std::ptr::eq(o, object) && f == returner
    })
}

/// The allocator function a frame's runtime PC is in (a store's own PC,
/// or a return address): the innermost inlined one when its code came
/// from a helper, as a symbolizer names a stack's top frame; `None` when
/// the PC is not the allocator's code ([`is_allocator_code`]). `bare`:
/// a helper the debug info names without a path counts too, by its
/// crate ([`inlined::innermost_at`]); else only those a path names can
/// (which are the ones in the paths of the calls that ran them).
fn allocator_frame(pc: usize, bare: bool) -> Option<String> {
    // The byte before a return address (or the PC after a store) is in
    // the call (the store) itself.
    let (object, at) = objects::at(pc.checked_sub(1)?)?;
    let inlined = match bare {
        true => inlined::innermost_at(object, at),
        false => inlined::names_at(object, at).into_iter().next(),
    };
    if let Some(inlined) = inlined {
        return Some(inlined);
    }
    let symbols = &object.symbols;
    let name = symbols.name(symbols.function_at(at)?);
    is_allocator_code(&name).then_some(name)
}

/// The allocator function that made a store, from its stack (runtime PCs,
/// innermost first, see [`crate::writer`]): its first allocator frame,
/// named as the paths of the calls that ran it name it, so a writer's
/// group and a path's join.
pub fn writer(stack: &[usize]) -> Option<String> {
    stack.iter().find_map(|&pc| allocator_frame(pc, false))
}

/// The allocator function whose instruction made a value appear in a
/// register, from that instruction's stack (see [`crate::writer`]): its
/// own frame only, since a function the allocator called (libc's, the
/// sanitizer's) computed nothing of the allocator's answer; the innermost
/// inlined helper's, bare-named ones too (`planted::block`, inlined into
/// both of the entry points that return its length); `None` when it is
/// not the allocator's code.
pub fn producer(stack: &[usize]) -> Option<String> {
    allocator_frame(*stack.first()?, true)
}

/// The runtime address ranges of the objects' functions that are the
/// allocator's code ([`is_allocator_code`]), sorted, adjacent ones
/// joined: what the stepper of [`crate::writer`] steps through (it steps
/// over the rest). Empty without a symbol table.
pub fn allocator_code() -> Vec<Range<usize>> {
    let mut functions: Vec<Range<usize>> = Vec::new();
    for object in objects::objects() {
        let symbols = &object.symbols;
        for (f, &(start, end, _)) in symbols.functions.iter().enumerate() {
            if is_allocator_code(&symbols.name(f)) {
                functions.push(start + object.bias..end + object.bias);
            }
        }
    }
    functions.sort_by_key(|r| r.start);
    let mut code: Vec<Range<usize>> = Vec::new();
    for f in functions {
        match code.last_mut() {
            Some(last) if last.end >= f.start => last.end = last.end.max(f.end),
            _ => code.push(f),
        }
    }
    code
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn without_counters_the_probe_is_off() {
        // Tests run without ALLOCSOAK_RECORD and without instrumentation.
        begin_op();
        assert_eq!(around(|| 7), 7);
        assert_eq!(around_query(|| 8), 8);
        assert!(op_path(PathOf::Both).is_empty());
    }
}
