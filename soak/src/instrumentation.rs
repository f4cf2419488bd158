//! Proof that a C allocator is compiled with coverage instrumentation: the
//! sanitizer-coverage counters in its static archive (the bundled ones) or
//! its shared object (a `dylib:` allocator).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use object::read::archive::ArchiveFile;
use object::{Object, ObjectSection};

use crate::project::{Build, Project};

/// The section where `-fsanitize=fuzzer-no-link` puts 8-bit edge counters.
const COUNTERS: &str = "__sancov_cntrs";

/// Coverage counters in one static archive or shared object, and how many
/// of its objects carry them (a shared object is one object).
pub struct Counters {
    pub counters: u64,
    pub objects: usize,
    pub instrumented: usize,
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
    }
}

/// `allocsoak instrumentation`: prints the counters of each of `dylibs`, or
/// without any, of the bundled C allocators' archives in the default build
/// and of the config's declared allocators (each crate's rlib, each C
/// allocator's archive).
/// `Ok(false)` when one of them has none.
pub fn check(project: &Project, dylibs: &[PathBuf]) -> Result<bool> {
    let paths = match dylibs {
        [] => {
            let mut archives = project.c_archives(Build::Asan)?;
            archives.extend(project.declared_archives(Build::Asan)?);
            archives
        }
        _ => dylibs.to_vec(),
    };
    if paths.is_empty() {
        bail!("no C allocator archives in the build; run `just build` first");
    }
    let mut ok = true;
    for path in &paths {
        let c = count(path)?;
        println!(
            "instrumentation {} counters={} objects={}/{}",
            path.display(),
            c.counters,
            c.instrumented,
            c.objects
        );
        if c.counters == 0 && !dylibs.is_empty() {
            eprintln!(
                "allocsoak: {} has no coverage counters; build it with {} -fsanitize=fuzzer-no-link,address -fsanitize-recover=address -shared -fPIC",
                path.display(),
                crate::project::clang().unwrap_or_else(|_| "clang-<nightly's LLVM>".into())
            );
        }
        ok &= c.counters > 0;
    }
    Ok(ok)
}
