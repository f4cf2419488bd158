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
//! Only the allocator's own functions count: the harness (the `shadow`
//! crate but the zoo, the declared allocators' glue, the fuzz targets),
//! Rust's std, core and alloc (generic code the harness instantiates) and
//! the sanitizer runtime are left out.

use std::collections::BTreeSet;
use std::ffi::c_void;
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
}

// SAFETY: the probe only holds addresses of sections that live as long as
// the process, and reads them (see `snapshot`).
unsafe impl Send for Probe {}
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
}

static OP: Mutex<Option<Op>> = Mutex::new(None);

fn probe() -> Option<&'static Probe> {
    static PROBE: OnceLock<Option<Probe>> = OnceLock::new();
    PROBE
        .get_or_init(|| {
            std::env::var_os("ALLOCSOAK_RECORD")?;
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
    Some(Probe {
        counters: (counters.address() as usize + bias) as *const u8,
        len,
        pcs: (pcs.address() as usize + bias) as *const [usize; 2],
        bias,
    })
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
    /// The counters now.
    fn snapshot(&self, into: &mut Vec<u8>) {
        into.resize(self.len, 0);
        // SAFETY: `counters` is the start of a writable section of `len`
        // bytes mapped for the whole process; any byte is a valid u8.
        // Instrumented code on other threads may bump a counter while it is
        // read (plain byte stores the compiler inserted, outside Rust's
        // model, which libFuzzer reads the same way): a torn view only
        // misses or adds that one counter.
        unsafe { std::ptr::copy_nonoverlapping(self.counters, into.as_mut_ptr(), self.len) };
    }

    /// The counter indices where two snapshots differ: compared a chunk
    /// at a time (few chunks differ in one call), so a replay of many
    /// programs stays fast.
    fn moved<'a>(before: &'a [u8], after: &'a [u8]) -> impl Iterator<Item = usize> + 'a {
        const CHUNK: usize = 256;
        before
            .chunks(CHUNK)
            .zip(after.chunks(CHUNK))
            .enumerate()
            .filter(|(_, (b, a))| b != a)
            .flat_map(|(c, (b, a))| {
                (0..b.len())
                    .filter(move |&k| a[k] != b[k])
                    .map(move |k| c * CHUNK + k)
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
    // The buffers are kept from call to call: 80 KB allocated and freed
    // around every call is most of a replay's time under ASan.
    let (mut before, mut after) = {
        let mut op = OP.lock().unwrap_or_else(|e| e.into_inner());
        let op = op.get_or_insert_with(Op::default);
        (
            std::mem::take(&mut op.before),
            std::mem::take(&mut op.after),
        )
    };
    probe.snapshot(&mut before);
    let result = f();
    probe.snapshot(&mut after);
    let mut op = OP.lock().unwrap_or_else(|e| e.into_inner());
    let op = op.get_or_insert_with(Op::default);
    let into = if query {
        &mut op.queried
    } else {
        &mut op.moved
    };
    into.extend(Probe::moved(&before, &after));
    (op.before, op.after) = (before, after);
    result
}

/// The allocator's own functions the op's calls ran so far, and its
/// checks' queries when `queries`, sorted; empty when the probe is off.
pub fn op_path(queries: bool) -> Vec<String> {
    let Some(probe) = probe() else {
        return Vec::new();
    };
    let moved: Vec<usize> = {
        let op = OP.lock().unwrap_or_else(|e| e.into_inner());
        op.as_ref().map_or_else(Vec::new, |op| {
            let queried = op.queried.iter().filter(|_| queries);
            op.moved.iter().chain(queried).copied().collect()
        })
    };
    let Some(symbols) = symbols() else {
        return Vec::new();
    };
    let names: BTreeSet<&str> = moved
        .into_iter()
        .filter_map(|i| symbols.function_at(probe.pc(i)))
        .filter(|name| is_allocator_code(name))
        .collect();
    names.into_iter().map(str::to_string).collect()
}

/// The executable's functions, by address.
struct Symbols {
    /// (start, end, demangled name without hash), sorted by start.
    functions: Vec<(usize, usize, String)>,
}

fn symbols() -> Option<&'static Symbols> {
    static SYMBOLS: OnceLock<Option<Symbols>> = OnceLock::new();
    SYMBOLS
        .get_or_init(|| {
            use object::{Object, ObjectSymbol, SymbolKind};
            let file = object::File::parse(&**exe()?).ok()?;
            let mut functions: Vec<(usize, usize, String)> = file
                .symbols()
                .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
                .filter_map(|s| {
                    let name = s.name().ok()?;
                    let start = s.address() as usize;
                    let name = format!("{:#}", rustc_demangle::demangle(name));
                    Some((start, start + s.size() as usize, name))
                })
                .collect();
            functions.sort();
            Some(Symbols { functions })
        })
        .as_ref()
}

impl Symbols {
    fn function_at(&self, pc: usize) -> Option<&str> {
        let i = self
            .functions
            .partition_point(|f| f.0 <= pc)
            .checked_sub(1)?;
        let (start, end, name) = &self.functions[i];
        (*start <= pc && pc < *end).then_some(name.as_str())
    }
}

/// Whether `name` is the allocator's code, not the harness's, Rust's
/// libraries' or a runtime's. Trait impls read `<Type as Trait>::f`, so a
/// name is judged by the path it starts with; the zoo, though it lives in
/// `shadow`, is an allocator.
pub fn is_allocator_code(name: &str) -> bool {
    const NOT: [&str; 12] = [
        "std::",
        "core::",
        "alloc::",
        "hashbrown::",
        "libfuzzer_sys::",
        "arbitrary::",
        "allocator_api2::",
        "allocsoak_declared::",
        "fuzz_targets",
        "report::",
        "serde",
        "__",
    ];
    let name = name.trim_start_matches('<');
    if name.starts_with("shadow::") {
        return name.starts_with("shadow::allocator::zoo::");
    }
    !NOT.iter().any(|p| name.starts_with(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_harness_and_rusts_libraries_are_not_the_allocator() {
        for name in [
            "<shadow::allocator::zoo::Zoo as shadow::allocator::Allocator>::alloc",
            "<shadow::allocator::zoo::Zoo>::align_ignored",
            "mi_heap_malloc_zero_aligned_at",
            "_mi_page_malloc",
            "<dlmalloc::GlobalDlmalloc as core::alloc::global::GlobalAlloc>::alloc",
            "rlsf::tlsf::Tlsf<u32, u32, 24, 8>::allocate",
        ] {
            assert!(is_allocator_code(name), "{name}");
        }
        for name in [
            "<shadow::allocator::system::System as shadow::allocator::Allocator>::alloc",
            "shadow::executor::Executor::step",
            "core::ptr::drop_glue::<shadow::allocator::zoo::Zoo>",
            "<std::collections::hash::map::HashMap<usize, usize>>::insert",
            "__asan_memcpy",
            "allocsoak_declared::install",
            "<<shadow::workers::WorkerPool>::run<usize, <shadow::executor::Executor>::call::{closure#0}> as core::ops::function::FnOnce<()>>::call_once::{shim:vtable#0}",
        ] {
            assert!(!is_allocator_code(name), "{name}");
        }
    }

    #[test]
    fn without_counters_the_probe_is_off() {
        // Tests run without ALLOCSOAK_RECORD and without instrumentation.
        begin_op();
        assert_eq!(around(|| 7), 7);
        assert_eq!(around_query(|| 8), 8);
        assert!(op_path(true).is_empty());
    }
}
