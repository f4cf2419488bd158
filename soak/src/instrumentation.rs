//! Proof that the bundled C allocators are compiled with coverage
//! instrumentation: the sanitizer-coverage counters in their archives.

use std::path::Path;

use anyhow::{Context, Result};
use object::read::archive::ArchiveFile;
use object::{Object, ObjectSection};

/// The section where `-fsanitize=fuzzer-no-link` puts 8-bit edge counters.
const COUNTERS: &str = "__sancov_cntrs";

/// Coverage counters in one static archive, and how many of its objects
/// carry them.
pub struct Counters {
    pub counters: u64,
    pub objects: usize,
    pub instrumented: usize,
}

/// Counts the coverage counters in a static archive (one byte each).
pub fn count(archive: &Path) -> Result<Counters> {
    let data =
        std::fs::read(archive).with_context(|| format!("failed to read {}", archive.display()))?;
    let ar = ArchiveFile::parse(&*data)
        .with_context(|| format!("{} is not an archive", archive.display()))?;
    let mut c = Counters {
        counters: 0,
        objects: 0,
        instrumented: 0,
    };
    for member in ar.members() {
        let member = member?;
        let Ok(obj) = object::File::parse(member.data(&*data)?) else {
            continue;
        };
        c.objects += 1;
        let size: u64 = obj
            .sections()
            .filter(|s| s.name() == Ok(COUNTERS))
            .map(|s| s.size())
            .sum();
        c.counters += size;
        c.instrumented += (size > 0) as usize;
    }
    Ok(c)
}
