//! Which allocator code an op ran: the SanitizerCoverage counters
//! (`-sanitizer-coverage-inline-8bit-counters`, the `__sancov_cntrs`
//! section) that its allocator calls moved, named by the functions they sit
//! in (the PC table, `__sancov_pcs`, holds one PC per counter; the binary's
//! symbol table names it). A violation of what a call returned is keyed by
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
mod owner;

pub use owner::{crate_of_symbol, is_allocator_code, uncovered_crates};

use std::collections::BTreeSet;
use std::ffi::c_void;
use std::ops::Range;
use std::sync::{Mutex, OnceLock};

/// The counters and PC table of this process, where they are mapped.
struct Probe {
    /// The section's counters, one byte each.
    counters: *const u8,
    len: usize,
    /// `len` pairs of (PC, flags), as the loader relocated them.
    pcs: *const [usize; 2],
    /// What the loader added to every link-time address.
    bias: usize,
    /// The counters in the allocator's own functions, as runs of
    /// indices: the only ones copied around a call (25,108 of alloc_ops'
    /// 94,373, most of them the reference mimalloc's C).
    watched: Vec<Range<usize>>,
}

// SAFETY: the probe only holds addresses of sections that live as long as
// the process, and reads them (see `snapshot`).
unsafe impl Send for Probe {}
// SAFETY: a `Probe` is never changed after `find` builds it; shared, it only reads
// the sections (see `snapshot` and `pc`).
unsafe impl Sync for Probe {}

/// The counters before the current call, and the ones the op moved: by
/// its own calls, and by the queries the checks made of what they returned
/// (a usable size, a good size).
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

/// This process's executable, mapped.
fn exe() -> Option<&'static memmap2::Mmap> {
    static EXE: OnceLock<Option<memmap2::Mmap>> = OnceLock::new();
    EXE.get_or_init(|| {
        let file = std::fs::File::open("/proc/self/exe").ok()?;
        // SAFETY: the executable of a running process is not written to
        // (the kernel refuses writes to it: ETXTBSY).
        unsafe { memmap2::Mmap::map(&file) }.ok()
    })
    .as_ref()
}

/// Locates the sections through the executable's section headers.
fn find() -> Option<Probe> {
    use object::{Object, ObjectSection};
    let file = object::File::parse(&**exe()?).ok()?;
    let counters = file.section_by_name("__sancov_cntrs")?;
    let pcs = file.section_by_name("__sancov_pcs")?;
    let len = counters.size() as usize;
    if len == 0 || pcs.size() as usize != len * 16 {
        return None;
    }
    let bias = load_bias();
    let mut probe = Probe {
        counters: (counters.address() as usize + bias) as *const u8,
        len,
        pcs: (pcs.address() as usize + bias) as *const [usize; 2],
        bias,
        watched: Vec::new(),
    };
    probe.watched = probe.allocator_counters(symbols()?);
    Some(probe)
}

/// The executable's load bias (its first program header list, which
/// `dl_iterate_phdr` visits first).
fn load_bias() -> usize {
    unsafe extern "C" fn first(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> libc::c_int {
        // SAFETY: `info` is the loader's record of one object, valid for
        // this call; `data` is the `usize` passed below.
        unsafe { *(data as *mut usize) = (*info).dlpi_addr as usize };
        1
    }
    let mut bias = 0usize;
    // SAFETY: the callback writes only through `data`, a live `usize`.
    unsafe { libc::dl_iterate_phdr(Some(first), &mut bias as *mut usize as *mut c_void) };
    bias
}

impl Probe {
    /// The runs of counters whose code is in the allocator's own
    /// functions (a function's counters are consecutive). Each function
    /// is demangled and judged once, when its first counter is met: a
    /// replay process pays this at its start.
    fn allocator_counters(&self, symbols: &Symbols) -> Vec<Range<usize>> {
        let mut runs: Vec<Range<usize>> = Vec::new();
        let mut last: Option<(usize, bool)> = None;
        for i in 0..self.len {
            let mine = symbols.function_at(self.pc(i)).is_some_and(|f| match last {
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

    /// The watched counters now, run after run.
    fn snapshot(&self, into: &mut Vec<u8>) {
        into.clear();
        for run in &self.watched {
            // SAFETY: `counters` is the start of a writable section of
            // `len` bytes mapped for the whole process, and every run lies
            // below `len`; any byte is a valid u8. Instrumented code on
            // other threads may bump a counter while it is read (plain byte
            // stores the compiler inserted, outside Rust's model, which
            // libFuzzer reads the same way): a torn view only misses or adds
            // that one counter.
            let counters =
                unsafe { std::slice::from_raw_parts(self.counters.add(run.start), run.len()) };
            into.extend_from_slice(counters);
        }
    }

    /// The counter indices where two snapshots differ, compared a chunk
    /// at a time (few chunks differ in one call), so a replay of many
    /// programs stays fast.
    fn moved<'a>(&'a self, before: &'a [u8], after: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
        const CHUNK: usize = 256;
        let mut at = 0;
        self.watched.iter().flat_map(move |run| {
            let (b, a) = (&before[at..at + run.len()], &after[at..at + run.len()]);
            at += run.len();
            b.chunks(CHUNK)
                .zip(a.chunks(CHUNK))
                .enumerate()
                .filter(|(_, (b, a))| b != a)
                .flat_map(move |(c, (b, a))| {
                    (0..b.len())
                        .filter(move |&k| a[k] != b[k])
                        .map(move |k| run.start + c * CHUNK + k)
                })
        })
    }

    /// The link-time address of counter `i`'s code.
    fn pc(&self, i: usize) -> usize {
        // SAFETY: `i < len` (a counter that moved), and the PC table holds
        // `len` pairs for the whole process.
        let pc = unsafe { (*self.pcs.add(i))[0] };
        pc.wrapping_sub(self.bias)
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
    let moved: Vec<usize> = probe.moved(&op.before, &after).collect();
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
    let Some(probe) = probe() else {
        return Vec::new();
    };
    let moved: Vec<usize> = {
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
                moved.extend(probe.moved(&op.before, &counters));
            }
            moved
        })
    };
    let Some(symbols) = symbols() else {
        return Vec::new();
    };
    // Each counter names its function and the helpers inlined into it
    // that its code came from, as a stack names inlined frames.
    let mut names: BTreeSet<String> = BTreeSet::new();
    for i in moved {
        let pc = probe.pc(i);
        if let Some(f) = symbols.function_at(pc) {
            names.insert(symbols.name(f));
            names.extend(inlined::names_at(pc));
        }
    }
    names.into_iter().collect()
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
    let at = pc.checked_sub(load_bias() + 1)?;
    let inlined = match bare {
        true => inlined::innermost_at(at),
        false => inlined::names_at(at).into_iter().next(),
    };
    if let Some(inlined) = inlined {
        return Some(inlined);
    }
    let symbols = symbols()?;
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

/// The runtime address ranges of the executable's functions that are the
/// allocator's code ([`is_allocator_code`]), sorted, adjacent ones
/// joined: what the stepper of [`crate::writer`] steps through (it steps
/// over the rest). Empty without a symbol table.
pub fn allocator_code() -> Vec<Range<usize>> {
    let Some(symbols) = symbols() else {
        return Vec::new();
    };
    let bias = load_bias();
    let mut code: Vec<Range<usize>> = Vec::new();
    for (f, &(start, end, _)) in symbols.functions.iter().enumerate() {
        if !is_allocator_code(&symbols.name(f)) {
            continue;
        }
        let (start, end) = (start + bias, end + bias);
        match code.last_mut() {
            Some(last) if last.end >= start => last.end = last.end.max(end),
            _ => code.push(start..end),
        }
    }
    code
}

/// The executable's functions, by address.
struct Symbols {
    /// (start, end, mangled name), sorted by start.
    functions: Vec<(usize, usize, &'static str)>,
}

fn symbols() -> Option<&'static Symbols> {
    static SYMBOLS: OnceLock<Option<Symbols>> = OnceLock::new();
    SYMBOLS
        .get_or_init(|| {
            use object::{Object, ObjectSymbol, SymbolKind};
            let file = object::File::parse(&**exe()?).ok()?;
            let mut functions: Vec<(usize, usize, &'static str)> = file
                .symbols()
                .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
                .filter_map(|s| {
                    let start = s.address() as usize;
                    Some((start, start + s.size() as usize, s.name().ok()?))
                })
                .collect();
            functions.sort();
            Some(Symbols { functions })
        })
        .as_ref()
}

impl Symbols {
    /// The function whose code holds `pc`, by its index.
    fn function_at(&self, pc: usize) -> Option<usize> {
        let i = self
            .functions
            .partition_point(|f| f.0 <= pc)
            .checked_sub(1)?;
        let (start, end, _) = self.functions[i];
        (start <= pc && pc < end).then_some(i)
    }

    /// Function `f`'s name, demangled, without its hash, and as its
    /// author wrote it when `declared-c` renamed it
    /// ([`report::declared_name`]).
    fn name(&self, f: usize) -> String {
        let name = report::declared_name(self.functions[f].2);
        format!("{:#}", rustc_demangle::demangle(name))
    }
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
