//! Proof that the allocators are compiled with coverage instrumentation:
//! the sanitizer-coverage counters in the bundled C allocators' static
//! archives, in a `dylib:` allocator's shared object, and in the linked
//! fuzz binary for the declared ones (their own crate's functions, or
//! their C sources' objects); and that the harness carries none.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use object::read::archive::ArchiveFile;
use object::{Object, ObjectSection, ObjectSymbol, SymbolKind};

use crate::engines::project::{Build, Project};
use crate::foundation::declared::Declared;

/// The section where `-fsanitize=fuzzer-no-link` puts 8-bit edge counters.
const COUNTERS: &str = "__sancov_cntrs";

/// Coverage counters in one static archive or shared object, and how many
/// of its objects carry them (a shared object is one object); whether any
/// has DWARF (`-g`), which names the helpers inlined into each function.
pub struct Counters {
    pub counters: u64,
    pub objects: usize,
    pub instrumented: usize,
    pub debug_info: bool,
}

/// Counts the coverage counters (one byte each) in a static archive, or in
/// one object file: a shared object, where the linker has gathered every
/// compiled file's counters into one section.
pub fn count(path: &Path) -> Result<Counters> {
    let data = std::fs::read(path).with_context(|| format!("failed to read {}", path.display()))?;
    let mut c = Counters {
        counters: 0,
        objects: 0,
        instrumented: 0,
        debug_info: false,
    };
    let Ok(ar) = ArchiveFile::parse(&*data) else {
        let obj = object::File::parse(&*data).with_context(|| {
            format!(
                "{} is neither an archive nor an object file",
                path.display()
            )
        })?;
        c.add(&obj);
        return Ok(c);
    };
    for member in ar.members() {
        let member = member?;
        if let Ok(obj) = object::File::parse(member.data(&*data)?) {
            c.add(&obj);
        }
    }
    Ok(c)
}

impl Counters {
    fn add(&mut self, obj: &object::File) {
        let size: u64 = obj
            .sections()
            .filter(|s| s.name() == Ok(COUNTERS))
            .map(|s| s.size())
            .sum();
        self.objects += 1;
        self.counters += size;
        self.instrumented += (size > 0) as usize;
        self.debug_info |= obj
            .section_by_name(".debug_info")
            .is_some_and(|s| s.size() > 0);
    }
}

/// Coverage counters in a linked binary, by whose code they sit in: a
/// Rust crate's functions (generic code the binary instantiated from it
/// too), or the C functions of one source file (by the file symbol the
/// linker keeps before each object's local symbols; a declared C
/// allocator's functions are all local). So they are counted in the build
/// that runs, never in a library file that may be stale or another
/// config's.
#[derive(Debug, Default)]
pub struct InBinary {
    pub crates: BTreeMap<String, u64>,
    pub files: BTreeMap<String, u64>,
}

/// Counts the counters of `binary` by crate and C source file: each
/// counter's PC (the `__sancov_pcs` table, relocated by the binary's
/// dynamic relocations in a position-independent executable) names its
/// function.
pub fn count_in_binary(binary: &Path) -> Result<InBinary> {
    let data =
        std::fs::read(binary).with_context(|| format!("failed to read {}", binary.display()))?;
    let file = object::File::parse(&*data)
        .with_context(|| format!("{} is not an object file", binary.display()))?;
    let Some(table) = file.section_by_name("__sancov_pcs") else {
        bail!(
            "{} has no coverage PC table; run `allocsoak build`",
            binary.display()
        );
    };
    let (start, size) = (table.address(), table.size());
    let mut pcs: Vec<u64> = table
        .data()?
        .chunks_exact(16)
        .map(|pair| u64::from_le_bytes(pair[..8].try_into().expect("8 bytes")))
        .collect();
    for (offset, relocation) in file.dynamic_relocations().into_iter().flatten() {
        if (start..start + size).contains(&offset) && (offset - start) % 16 == 0 {
            pcs[((offset - start) / 16) as usize] = relocation.addend() as u64;
        }
    }
    // (start, end, symbol, the file of a local symbol), sorted by start.
    let mut functions = Vec::new();
    let mut source: Option<String> = None;
    for symbol in file.symbols() {
        match symbol.kind() {
            SymbolKind::File => source = symbol.name().ok().map(String::from),
            SymbolKind::Text if symbol.size() > 0 => functions.push((
                symbol.address(),
                symbol.address() + symbol.size(),
                symbol.name().unwrap_or_default(),
                source.clone().filter(|_| symbol.is_local()),
            )),
            _ => {}
        }
    }
    functions.sort_by_key(|f| f.0);
    let mut counted = InBinary::default();
    for pc in pcs {
        let i = functions.partition_point(|f| f.0 <= pc);
        let Some((_, end, name, source)) = i.checked_sub(1).map(|i| &functions[i]) else {
            continue;
        };
        if pc >= *end {
            continue;
        }
        match (shadow::coverage::crate_of_symbol(name), source) {
            (Some(krate), _) => *counted.crates.entry(krate).or_default() += 1,
            (None, Some(file)) => *counted.files.entry(file.clone()).or_default() += 1,
            (None, None) => {}
        }
    }
    Ok(counted)
}

/// Whether `binary` has no counters in the harness's own crates
/// (`shadow`, `report`: fuzz_targets/rustc-wrapper builds them without)
/// and has them in the zoo's, which is an allocator. Generic code of
/// other harness crates that an allocator instantiates is the
/// allocator's, and counted.
fn harness_uncovered(binary: &Path) -> Result<bool> {
    let counted = count_in_binary(binary)?;
    let of = |krate: &str| counted.crates.get(krate).copied().unwrap_or(0);
    let (shadow, report, zoo) = (of("shadow"), of("report"), of("zoo"));
    println!(
        "instrumentation {} harness: shadow={shadow} report={report}; zoo={zoo}",
        binary.display()
    );
    if shadow + report > 0 {
        eprintln!("allocsoak: the harness was built with coverage; build with `allocsoak build` (it sets RUSTC_WRAPPER)");
    }
    Ok(shadow + report == 0 && zoo > 0)
}

/// `allocsoak instrumentation`: prints the counters of each of `dylibs`, or
/// without any, of the bundled C allocators' archives in the default build
/// and of the config's declared allocators in its `alloc_ops`.
/// `Ok(false)` when one of them has none.
pub fn check(project: &Project, dylibs: &[PathBuf]) -> Result<bool> {
    // Without `--dylib`: the bundled archives, and the libraries the
    // config declares (`[allocator.dylib]`), checked as `--dylib` checks.
    let (archives, libraries) = match dylibs {
        [] => {
            let declared = project
                .declared()
                .iter()
                .filter_map(|d| Some(project.declared_base().join(&d.dylib.as_ref()?.path)));
            (project.c_archives(Build::Asan)?, declared.collect())
        }
        _ => (Vec::new(), dylibs.to_vec()),
    };
    if archives.is_empty() && libraries.is_empty() {
        bail!("no C allocator archives in the build; run `just build` first");
    }
    let mut ok = true;
    for path in archives.iter().chain(&libraries) {
        ok &= print_counters(path, libraries.contains(path))?;
    }
    // In the plain build: a config's glue keeps its coverage, as a generic
    // allocator's code is instantiated there, and so do the instances of
    // shadow's generic adapters it makes (400 counters for soak.toml's).
    if dylibs.is_empty() {
        ok &= harness_uncovered(
            &project
                .plain()
                .binary(Build::Asan, shadow::Target::AllocOps),
        )?;
    }
    if dylibs.is_empty() && !project.declared().is_empty() {
        ok &= declared_covered(project)?;
    }
    Ok(ok)
}

/// Prints the counters of the archive or shared object at `path`, and for
/// a `library` how to build it when it has no counters or no debug info;
/// whether it has counters.
fn print_counters(path: &Path, library: bool) -> Result<bool> {
    let c = count(path)?;
    println!(
        "instrumentation {} counters={} objects={}/{}",
        path.display(),
        c.counters,
        c.instrumented,
        c.objects
    );
    if c.counters == 0 && library {
        eprintln!(
            "allocsoak: {} has no coverage counters; build it with {} -g -fsanitize=fuzzer-no-link,address -fsanitize-recover=address -shared -fPIC",
            path.display(),
            crate::engines::project::clang().unwrap_or_else(|_| "clang-<nightly's LLVM>".into())
        );
    }
    if !c.debug_info && library {
        eprintln!(
            "allocsoak: {} has no debug info; build it with -g, so a bug in a helper inlined into several entry points is one group and its reports give lines",
            path.display()
        );
    }
    Ok(c.counters > 0)
}

/// Prints the counters of each declared allocator that is not a library
/// in the config's `alloc_ops`; whether every C allocator has some.
fn declared_covered(project: &Project) -> Result<bool> {
    let binary = project.binary(Build::Asan, shadow::Target::AllocOps);
    let counted = count_in_binary(&binary)?;
    let mut ok = true;
    // A library's counters are its own, counted above.
    for d in project.declared().iter().filter(|d| d.dylib.is_none()) {
        let counters = declared_counters(d, &counted);
        println!(
            "instrumentation {} allocator={} counters={counters}",
            binary.display(),
            d.name
        );
        // A crate's own code may all be inlined into its callers (a
        // wrapper's `#[inline]` methods), or be another crate's (a
        // `-sys` crate's C): it has no functions to count. C sources
        // are compiled here, with coverage, and must have counters.
        match (&d.c, counters) {
            (Some(_), 0) => ok = false,
            (None, 0) => println!(
                "  (crate {} has no functions of its own in the binary: inlined into its callers, or its code is another crate's)",
                d.package_name().unwrap_or_default()
            ),
            _ => {}
        }
    }
    Ok(ok)
}

/// The counters of the declared allocator `d` among those `counted` in a
/// binary: its crate's, or its C sources' and its shim's.
fn declared_counters(d: &Declared, counted: &InBinary) -> u64 {
    // A C allocator's functions: its sources' local ones, and the
    // ones isolation made local, which the linker lists after its
    // shim's file symbol (`allocsoak-declared-c`).
    // A crate's symbols carry its package's name: two releases of
    // one package (`package`) are counted together.
    match (d.package_name(), &d.c) {
        (Some(krate), _) => counted
            .crates
            .get(&krate.replace('-', "_"))
            .copied()
            .unwrap_or(0),
        (None, Some(c)) => c
            .sources
            .iter()
            .filter_map(|s| s.file_name())
            .map(|f| f.to_string_lossy().into_owned())
            .chain([format!("allocsoak_c_{}.c", d.ident())])
            .filter_map(|f| counted.files.get(&f))
            .sum(),
        (None, None) => 0,
    }
}
