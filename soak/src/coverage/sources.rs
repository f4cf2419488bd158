//! Which source files are an allocator's own: what `allocsoak coverage`
//! reports on, apart from the harness's and allocsoak's files.

use std::path::{Path, PathBuf};

use cargo_metadata::Metadata;
use object::{Object, ObjectSection};

use crate::engines::project::Project;
use crate::engines::provenance::{declared_package, package};

/// Where an allocator's code is: the folders (or files) of its sources,
/// as the coverage build's mapping names them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sources {
    /// The report is limited to these; empty for a library, whose
    /// mapping holds its own files alone.
    pub paths: Vec<PathBuf>,
    /// A `dylib:` allocator's coverage build, run in place of the library
    /// the soak loaded.
    pub library: Option<Library>,
}

/// A `dylib:` allocator's coverage build (beside it, `<name>.coverage.so`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Library {
    /// The one object reported on.
    pub object: PathBuf,
    /// The allocator name that loads it: the soak's spec with this path.
    pub runs_as: String,
}

/// Where a `dylib:` allocator's coverage build is looked for: beside the
/// library, `liballoc.so` → `liballoc.coverage.so`.
fn coverage_library(library: &Path) -> PathBuf {
    let name = library.file_name().unwrap_or_default().to_string_lossy();
    let stem = name.strip_suffix(".so").unwrap_or(&name);
    library.with_file_name(format!("{stem}.coverage.so"))
}

/// The section clang's `-fcoverage-mapping` puts each function's mapping in.
const COVFUN: &str = "__llvm_covfun";

/// A `dylib:` allocator's coverage build, or why it cannot be reported on
/// (missing, stale, or built without the mapping), with the command that
/// makes it.
fn dylib_sources(spec: &str) -> Result<Sources, String> {
    let (path, _) = shadow::allocator::split_dylib_spec(spec);
    let library = Path::new(path);
    let cov = coverage_library(library);
    let build = format!(
        "build it from the library's sources with `{} -O1 -fPIC -shared -fprofile-instr-generate -fcoverage-mapping -o {} <sources>` (no -fsanitize)",
        crate::engines::project::clang().unwrap_or_else(|_| "clang".into()),
        cov.display()
    );
    let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
    let Some(built) = modified(&cov) else {
        return Err(format!(
            "its coverage build {} does not exist; {build}",
            cov.display()
        ));
    };
    if modified(library).is_some_and(|lib| lib > built) {
        return Err(format!(
            "its coverage build {} is older than {path}; re{build}",
            cov.display()
        ));
    }
    let data = std::fs::read(&cov).map_err(|e| format!("cannot read {}: {e}", cov.display()))?;
    let mapped = object::File::parse(&*data)
        .map(|o| o.sections().any(|s| s.name() == Ok(COVFUN) && s.size() > 0))
        .unwrap_or(false);
    if !mapped {
        return Err(format!(
            "{} has no coverage mapping; {build}",
            cov.display()
        ));
    }
    Ok(Sources {
        paths: Vec::new(),
        library: Some(Library {
            // The spec after the path: its `:prefix`, if any.
            runs_as: format!("dylib:{}{}", cov.display(), &spec[path.len()..]),
            object: cov,
        }),
    })
}

impl Project {
    /// The sources `name` runs in the coverage build (whose dependency
    /// graph is `graph`), or why it has none to report on.
    pub fn sources(&self, graph: &Metadata, name: &str) -> Result<Sources, String> {
        if let Some(d) = self.declared().iter().find(|d| d.name == name) {
            let base = self.declared_base();
            if let Some(lib) = &d.dylib {
                return dylib_sources(&lib.spec(base));
            }
            if let Some(c) = &d.c {
                let paths = c.sources.iter().chain(&c.include).map(|s| base.join(s));
                return Ok(Sources {
                    paths: paths.collect(),
                    library: None,
                });
            }
            return match declared_package(graph, d) {
                Some(p) => Ok(Sources {
                    paths: vec![crate_dir(p)],
                    library: None,
                }),
                None => Err(format!(
                    "its crate {} is not in the build's dependency graph; run `allocsoak build`",
                    d.package_name().unwrap_or_default()
                )),
            };
        }
        if let Some(spec) = name.strip_prefix("zoo:") {
            let (_, base) = ::zoo::split_spec(spec);
            let mut paths = vec![self.root().join("zoo/src")];
            // The base's sources too, where it has any: the zoo runs on it.
            if let Ok(more) = self.sources(graph, base) {
                paths.extend(more.paths);
            }
            return Ok(Sources {
                paths,
                library: None,
            });
        }
        let bundled = |krate: &str, sub: &str| {
            package(graph, krate)
                .map(|p| Sources {
                    paths: vec![crate_dir(p).join(sub)],
                    library: None,
                })
                .ok_or_else(|| format!("{krate} is not in the coverage build"))
        };
        match name {
            "mimalloc" | "mimalloc-secure" | "mimalloc-debug" => {
                bundled("libmimalloc-sys", "c_src/mimalloc/v2")
            }
            "mimalloc-v3" => bundled("libmimalloc-sys", "c_src/mimalloc/v3"),
            "jemalloc" => bundled("tikv-jemalloc-sys", "jemalloc"),
            "arena" => bundled("rlsf", "src"),
            "system" | "glibc" => {
                Err("the C library's malloc: allocsoak has no source of it to map".into())
            }
            other if other.starts_with("dylib:") => dylib_sources(&other["dylib:".len()..]),
            other => Err(format!("unknown allocator `{other}`")),
        }
    }
}

/// The folder of a resolved package's manifest.
fn crate_dir(p: &cargo_metadata::Package) -> PathBuf {
    p.manifest_path
        .parent()
        .map_or_else(PathBuf::new, |d| d.as_std_path().to_path_buf())
}
