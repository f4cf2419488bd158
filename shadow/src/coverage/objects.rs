//! The instrumented objects of this process: the executable and every
//! shared library with SanitizerCoverage counters of its own (a `dylib:`
//! allocator built with `-fsanitize=fuzzer-no-link`), each mapped from its
//! file with its symbol table. A runtime PC is named by the object whose
//! segments hold it ([`at`]), so the code a `dylib:` runs is keyed by its
//! own functions as the executable's is.
//!
//! The list is taken once, at its first use: in a replay, when the first
//! op begins, after the harness loaded the allocator (`harness::loaded`).

use std::ffi::{c_void, CStr};
use std::ops::Range;
use std::sync::OnceLock;

/// One loaded ELF object with counters (or the executable).
pub(super) struct Object {
    /// Its file, mapped for the whole process.
    pub bytes: &'static [u8],
    /// What the loader added to every link-time address.
    pub bias: usize,
    /// Its loaded segments' runtime address ranges.
    segments: Vec<Range<usize>>,
    /// Its functions, by link-time address.
    pub symbols: Symbols,
    /// Its SanitizerCoverage sections, when it has counters.
    pub sancov: Option<Sancov>,
}

/// Where an object's counters (`__sancov_cntrs`, one byte each) and their
/// PC table (`__sancov_pcs`, a (PC, flags) pair each) are, at link-time
/// addresses, and how many counters it has.
#[derive(Clone, Copy)]
pub(super) struct Sancov {
    pub counters: usize,
    pub pcs: usize,
    pub len: usize,
}

/// An object's functions, by address.
pub(super) struct Symbols {
    /// (start, end, mangled name), sorted by start.
    pub functions: Vec<(usize, usize, &'static str)>,
}

/// The objects, the executable first; empty when even the executable
/// cannot be read.
pub(super) fn objects() -> &'static [Object] {
    static OBJECTS: OnceLock<Vec<Object>> = OnceLock::new();
    OBJECTS.get_or_init(|| {
        loaded()
            .into_iter()
            .enumerate()
            // The executable always; a library only with counters.
            .filter_map(|(i, (path, bias, segments))| open(&path, bias, segments, i == 0))
            .collect()
    })
}

/// The object holding runtime address `pc`, and `pc` as that object's
/// link-time address.
pub(super) fn at(pc: usize) -> Option<(&'static Object, usize)> {
    objects()
        .iter()
        .find(|o| o.segments.iter().any(|s| s.contains(&pc)))
        .map(|o| (o, pc.wrapping_sub(o.bias)))
}

/// The object at `path`, mapped for good, when it is the `executable` or
/// has counters (a library without is unmapped again).
fn open(path: &str, bias: usize, segments: Vec<Range<usize>>, executable: bool) -> Option<Object> {
    let file = std::fs::File::open(path).ok()?;
    // SAFETY: a loaded object's file is not written while it is mapped
    // for execution (the kernel refuses writes to a running executable,
    // and a library rewritten in place would crash the process anyway);
    // the map is only read.
    let map = unsafe { memmap2::Mmap::map(&file) }.ok()?;
    if !executable && sancov(&object::File::parse(&*map).ok()?).is_none() {
        return None;
    }
    // Kept for the whole process: names are borrowed from it.
    let bytes: &'static [u8] = &Box::leak(Box::new(map))[..];
    let file = object::File::parse(bytes).ok()?;
    Some(Object {
        bytes,
        bias,
        segments,
        symbols: symbols(&file),
        sancov: sancov(&file),
    })
}

fn sancov(file: &object::File) -> Option<Sancov> {
    use object::{Object as _, ObjectSection};
    let counters = file.section_by_name("__sancov_cntrs")?;
    let pcs = file.section_by_name("__sancov_pcs")?;
    let len = counters.size() as usize;
    (len > 0 && pcs.size() as usize == len * 16).then_some(Sancov {
        counters: counters.address() as usize,
        pcs: pcs.address() as usize,
        len,
    })
}

fn symbols(file: &object::File<'static>) -> Symbols {
    use object::{Object as _, ObjectSymbol, SymbolKind};
    let mut functions: Vec<(usize, usize, &'static str)> = file
        .symbols()
        .filter(|s| s.kind() == SymbolKind::Text && s.size() > 0)
        .filter_map(|s| {
            let start = s.address() as usize;
            Some((start, start + s.size() as usize, s.name().ok()?))
        })
        .collect();
    functions.sort();
    Symbols { functions }
}

/// Each loaded object's file, load bias and loaded segments, the
/// executable first (`dl_iterate_phdr` visits it first, unnamed).
fn loaded() -> Vec<(String, usize, Vec<Range<usize>>)> {
    unsafe extern "C" fn each(
        info: *mut libc::dl_phdr_info,
        _size: usize,
        data: *mut c_void,
    ) -> libc::c_int {
        // SAFETY: `info` is the loader's record of one object, valid for
        // this call, its `dlpi_phdr` array `dlpi_phnum` long and its name
        // a C string (or null); `data` is the `Vec` passed below.
        unsafe {
            let info = &*info;
            let out = &mut *(data as *mut Vec<(String, usize, Vec<Range<usize>>)>);
            let name = match info.dlpi_name.is_null() {
                true => "",
                false => CStr::from_ptr(info.dlpi_name).to_str().unwrap_or(""),
            };
            let path = match (out.is_empty(), name) {
                (true, _) => "/proc/self/exe".to_string(),
                (false, "") => return 0,
                (false, name) => name.to_string(),
            };
            let bias = info.dlpi_addr as usize;
            let headers = std::slice::from_raw_parts(info.dlpi_phdr, info.dlpi_phnum as usize);
            let segments = headers
                .iter()
                .filter(|h| h.p_type == libc::PT_LOAD)
                .map(|h| {
                    let start = bias + h.p_vaddr as usize;
                    start..start + h.p_memsz as usize
                })
                .collect();
            out.push((path, bias, segments));
        }
        0
    }
    let mut out: Vec<(String, usize, Vec<Range<usize>>)> = Vec::new();
    // SAFETY: the callback writes only through `data`, a live `Vec`.
    unsafe { libc::dl_iterate_phdr(Some(each), &mut out as *mut _ as *mut c_void) };
    out
}

impl Symbols {
    /// The function whose code holds link-time address `pc`, by its index.
    pub fn function_at(&self, pc: usize) -> Option<usize> {
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
    pub fn name(&self, f: usize) -> String {
        let name = report::declared_name(self.functions[f].2);
        format!("{:#}", rustc_demangle::demangle(name))
    }
}
