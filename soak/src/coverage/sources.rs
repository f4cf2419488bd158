//! Which source files are an allocator's own: what `allocsoak coverage`
//! reports on, apart from the harness's and allocsoak's files.

use std::path::PathBuf;

use cargo_metadata::Metadata;

use crate::project::Project;
use crate::provenance::package;

/// Where an allocator's code is: the folders (or files) of its sources,
/// as the coverage build's mapping names them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Sources {
    pub paths: Vec<PathBuf>,
}

impl Project {
    /// The sources `name` runs in the coverage build (whose dependency
    /// graph is `graph`), or why it has none to report on.
    pub fn sources(&self, graph: &Metadata, name: &str) -> Result<Sources, String> {
        if let Some(d) = self.declared().iter().find(|d| d.name == name) {
            let base = self.declared_base();
            if let Some(c) = &d.c {
                let paths = c.sources.iter().chain(&c.include).map(|s| base.join(s));
                return Ok(Sources {
                    paths: paths.collect(),
                });
            }
            let krate = d.krate.as_deref().unwrap_or_default();
            return match package(graph, krate) {
                Some(p) => Ok(Sources {
                    paths: vec![crate_dir(p)],
                }),
                None => Err(format!(
                    "its crate {krate} is not in the build's dependency graph; run `allocsoak build`"
                )),
            };
        }
        if let Some(spec) = name.strip_prefix("zoo:") {
            let base = spec
                .split_once('@')
                .map_or_else(|| ::zoo::default_base(spec), |(_, b)| b);
            let mut paths = vec![self.root().join("zoo/src")];
            // The base's sources too, where it has any: the zoo runs on it.
            if let Ok(more) = self.sources(graph, base) {
                paths.extend(more.paths);
            }
            return Ok(Sources { paths });
        }
        let bundled = |krate: &str, sub: &str| {
            package(graph, krate)
                .map(|p| Sources {
                    paths: vec![crate_dir(p).join(sub)],
                })
                .ok_or_else(|| format!("{krate} is not in the coverage build"))
        };
        match name {
            "mimalloc" => bundled("libmimalloc-sys", "c_src/mimalloc/v2"),
            "jemalloc" => bundled("tikv-jemalloc-sys", "jemalloc"),
            "arena" => bundled("rlsf", "src"),
            "system" => Err("the C library's malloc: allocsoak has no source of it to map".into()),
            "mimalloc-secure" | "mimalloc-debug" | "mimalloc-v3" => Err(format!(
                "{name} is a build of its own; coverage runs the default build's allocators (mimalloc, jemalloc, arena, zoo:, declared)"
            )),
            other if other.starts_with("dylib:") => Err(
                "a shared library's coverage needs its own build with clang's -fprofile-instr-generate -fcoverage-mapping; not supported yet".into(),
            ),
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
