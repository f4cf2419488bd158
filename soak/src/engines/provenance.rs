//! What each allocator name runs in a build, as `allocsoak build` prints
//! it: a crate with the version and features the build resolved, C sources
//! with their flags, and the mimalloc line, version and flags of
//! `diff_mimalloc`'s reference. Read from the build's resolved dependency
//! graph (`cargo metadata`), so it says what was built, not what was asked.

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::Result;
use cargo_metadata::{Metadata, Package};

use crate::engines::project::{Build, Project, C_FLAGS};
use crate::foundation::declared::Declared;

/// One allocator name and what it runs.
pub struct Provenance {
    pub name: String,
    pub runs: String,
}

impl Project {
    /// What `names` run in `build`, then the reference's line.
    pub fn provenance(&self, build: Build, names: &[String]) -> Result<Vec<Provenance>> {
        let graph = crate::foundation::cargo::resolve(
            &self.fuzz_dir().join("Cargo.toml"),
            Some(build.features()),
        )?;
        let mut out: Vec<Provenance> = names
            .iter()
            .map(|name| Provenance {
                name: name.clone(),
                runs: self.runs(&graph, name),
            })
            .collect();
        out.push(Provenance {
            name: "diff_mimalloc's reference".into(),
            runs: mimalloc(&graph),
        });
        Ok(out)
    }

    fn runs(&self, graph: &Metadata, name: &str) -> String {
        if let Some(d) = self.declared().iter().find(|d| d.name == name) {
            let mut runs = declared(graph, d, self.declared_base());
            if let (Some(_), Some(lock)) = (&d.krate, self.pinned()) {
                runs.push_str(&format!(", versions locked by {}", lock.display()));
            }
            return runs;
        }
        let (bugs, base) = match name.strip_prefix("zoo:") {
            Some(spec) => {
                let (bugs, base) = ::zoo::split_spec(spec);
                (Some(bugs), base)
            }
            None => (None, name),
        };
        let runs = match base {
            "system" => format!(
                "the process's malloc: ASan's in the libFuzzer build, glibc {}'s in builds without ASan",
                glibc()
            ),
            "glibc" => format!("glibc {}'s own malloc, resolved in libc past ASan", glibc()),
            "mimalloc" | "mimalloc-secure" | "mimalloc-debug" | "mimalloc-v3" => mimalloc(graph),
            "jemalloc" => match package(graph, "tikv-jemalloc-sys") {
                Some(p) => format!("jemalloc from {}", described(graph, p)),
                None => "jemalloc (not in this build)".into(),
            },
            "arena" => match package(graph, "rlsf") {
                Some(p) => format!("a fixed 8 MiB region served by {}", described(graph, p)),
                None => "a fixed region".into(),
            },
            other => match other.strip_prefix("dylib:") {
                Some(spec) => format!("the shared library {spec}, loaded at run time"),
                None => other.to_string(),
            },
        };
        match bugs {
            Some(bugs) => format!("allocsoak's planted bug {bugs} over {base}: {runs}"),
            None => runs,
        }
    }
}

/// A declared entry: its crate as resolved, or its C sources.
fn declared(graph: &Metadata, d: &Declared, base: &Path) -> String {
    if let Some(lib) = &d.dylib {
        return format!("the shared library {}, loaded at run time", lib.spec(base));
    }
    if let Some(c) = &d.c {
        let files: Vec<String> = c
            .sources
            .iter()
            .map(|s| base.join(s).display().to_string())
            .collect();
        let mut text = format!("C sources {}", files.join(" "));
        if !c.defines.is_empty() {
            text.push_str(&format!(", -D{}", c.defines.join(" -D")));
        }
        if !c.flags.is_empty() {
            text.push_str(&format!(", {}", c.flags.join(" ")));
        }
        return format!(
            "{text}; built by {} {C_FLAGS}; its `{}*` symbols private to its own object",
            clang(),
            c.prefix
        );
    }
    let Some(p) = declared_package(graph, d) else {
        return format!(
            "crate {} (not in this build's graph: run `allocsoak build`)",
            d.package_name().unwrap_or_default()
        );
    };
    // A wrapper of a native library allocsoak builds runs allocsoak's
    // build of it, whatever release of the wrapper (a binary holds one).
    let native = match (
        reaches(graph, p, "libmimalloc-sys"),
        reaches(graph, p, "tikv-jemalloc-sys"),
    ) {
        (true, _) => format!("; it runs allocsoak's own {}", mimalloc(graph)),
        (_, true) => match package(graph, "tikv-jemalloc-sys") {
            Some(j) => format!(
                "; it runs allocsoak's own jemalloc from {}",
                described(graph, j)
            ),
            None => String::new(),
        },
        _ => String::new(),
    };
    format!("crate {}{native}", described(graph, p))
}

/// Whether package `from` depends on package `name`, directly or not,
/// in the resolved graph.
fn reaches(graph: &Metadata, from: &Package, name: &str) -> bool {
    package(graph, name)
        .is_some_and(|to| crate::foundation::cargo::reaches(graph, [&from.id], &to.id))
}

/// The mimalloc the build links: line and version from the sources of the
/// resolved libmimalloc-sys, and its features.
fn mimalloc(graph: &Metadata) -> String {
    let Some(p) = package(graph, "libmimalloc-sys") else {
        return "no mimalloc in this build".into();
    };
    let features = features(graph, p);
    let line = if features.contains("v2") { "v2" } else { "v3" };
    let header = Path::new(p.manifest_path.as_std_path())
        .parent()
        .map(|d| d.join(format!("c_src/mimalloc/{line}/include/mimalloc.h")));
    let version = header
        .and_then(|h| std::fs::read_to_string(h).ok())
        .and_then(|text| {
            let n: u32 = text
                .lines()
                .find_map(|l| l.strip_prefix("#define MI_MALLOC_VERSION"))?
                .split_whitespace()
                .next()?
                .parse()
                .ok()?;
            Some(format!("{}.{}.{}", n / 10000, n / 100 % 100, n % 100))
        })
        .unwrap_or_else(|| "of unknown version".into());
    format!(
        "mimalloc {version} ({line} line) from {}; built by {} {C_FLAGS}",
        described(graph, p),
        clang()
    )
}

/// `name version, features [..]` of a resolved package.
fn described(graph: &Metadata, p: &Package) -> String {
    let features: Vec<String> = features(graph, p).into_iter().collect();
    match features.is_empty() {
        true => format!("{} {}, no features", p.name, p.version),
        false => format!(
            "{} {}, features [{}]",
            p.name,
            p.version,
            features.join(", ")
        ),
    }
}

/// The package a declared entry's crate resolved to: the glue's
/// dependency of that name (two releases of one package are two names),
/// else the package of its name.
pub(crate) fn declared_package<'a>(graph: &'a Metadata, d: &Declared) -> Option<&'a Package> {
    let name = d.krate.as_deref()?.replace('-', "_");
    let resolve = graph.resolve.as_ref()?;
    let glue: Vec<_> = graph
        .packages
        .iter()
        .filter(|p| crate::foundation::declared::Glue::is_package(&p.name))
        .map(|p| &p.id)
        .collect();
    let named = resolve
        .nodes
        .iter()
        .filter(|n| glue.contains(&&n.id))
        .flat_map(|n| &n.deps)
        .find(|dep| dep.name == name)
        .and_then(|dep| graph.packages.iter().find(|p| p.id == dep.pkg));
    named.or_else(|| package(graph, d.package_name()?))
}

pub(crate) fn package<'a>(graph: &'a Metadata, name: &str) -> Option<&'a Package> {
    let root = graph.resolve.as_ref()?;
    graph
        .packages
        .iter()
        .filter(|p| p.name.as_str() == name)
        .find(|p| root.nodes.iter().any(|n| n.id == p.id))
}

fn features(graph: &Metadata, p: &Package) -> BTreeSet<String> {
    graph
        .resolve
        .iter()
        .flat_map(|r| &r.nodes)
        .filter(|n| n.id == p.id)
        .flat_map(|n| n.features.iter().map(|f| f.to_string()))
        .collect()
}

/// The C library's version, as the fuzz targets link the same one.
fn glibc() -> String {
    // SAFETY: gnu_get_libc_version returns a static NUL-terminated string.
    let version = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
    version.to_string_lossy().into_owned()
}

fn clang() -> String {
    crate::engines::project::clang().unwrap_or_else(|_| "clang".into())
}
