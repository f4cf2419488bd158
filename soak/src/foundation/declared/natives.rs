//! The native libraries allocsoak's own allocators are built from, which a
//! declared crate may reach too: `libmimalloc-sys` (the bundled mimalloc,
//! and `diff_mimalloc`'s reference) and `tikv-jemalloc-sys` (the bundled
//! jemalloc). Cargo links one build of a `links` library into a binary,
//! with the union of every dependent's features. So a declared crate that
//! reaches one runs allocsoak's build of it, and its features change
//! allocsoak's: the `mimalloc` crate's `secure` would make the reference
//! the secure build, and a crate that asks for no `v2` would run v2
//! unasked. Both would be silent, so a glue build is refused before
//! anything builds when its declared crates ask for a feature allocsoak's
//! build lacks, or could ask for one it has and do not (a release with a
//! `v2` feature that leaves it off means v3). A release that predates the
//! feature cannot ask for it: it runs allocsoak's build, accepted, and
//! `build` says so on its line (`engines/provenance.rs`).

use std::collections::BTreeSet;
use std::path::Path;

use anyhow::{bail, Context, Result};
use cargo_metadata::{Metadata, PackageId};

use crate::foundation::cargo::resolve;

use super::entry::Declared;
use super::glue::{self, Glue};

/// A native library allocsoak builds, and its features that change
/// nothing in the C code (Rust declarations only).
struct Native {
    package: &'static str,
    ours: &'static str,
    rust_only: &'static [&'static str],
}

const NATIVES: [Native; 2] = [
    Native {
        package: "libmimalloc-sys",
        ours: "allocsoak's mimalloc, diff_mimalloc's reference",
        rust_only: &["extended", "arena", "cty"],
    },
    Native {
        package: "tikv-jemalloc-sys",
        ours: "allocsoak's jemalloc",
        rust_only: &[],
    },
];

impl Glue {
    /// Fails, in one line naming the entry and the features to declare,
    /// when the declared crates reach a native library of [`NATIVES`] with
    /// C-side features other than the ones the plain fuzz targets built
    /// with `features` give it. `fuzz` is the plain fuzz package.
    pub fn check_natives(
        &self,
        fuzz: &Path,
        base: &Path,
        declared: &[Declared],
        features: &str,
    ) -> Result<()> {
        if declared.iter().all(|d| d.krate.is_none()) {
            return Ok(());
        }
        let ours = resolve(&fuzz.join("Cargo.toml"), Some(features))?;
        let theirs = resolve(&self.declared_only(fuzz, base, declared)?, None)
            .map_err(|e| super::lock::yanked_error(e, declared, &self.lock_file))?;
        for native in &NATIVES {
            let Some((id, asked)) = features_of(&theirs, native) else {
                continue;
            };
            let names: Vec<String> = declared
                .iter()
                .filter(|d| reaches(&theirs, d, &id))
                .map(|d| format!("`{}`", d.name))
                .collect();
            let (version, have) = match features_of(&ours, native) {
                Some((ours_id, have)) => (version_of(&ours, &ours_id), have),
                None => (None, BTreeSet::new()),
            };
            // Resolved against allocsoak's lock, a compatible release is
            // allocsoak's own; another one is a second build of one `links`
            // library, which cargo refuses.
            let theirs_version = version_of(&theirs, &id);
            if let (Some(v), Some(t)) = (&version, &theirs_version) {
                if v != t {
                    bail!(
                        "[[allocator]] {}: its crate needs {} {t}, allocsoak builds {v} ({}), and a binary links one build of it: declare a release of the crate built on {v}, or its C sources under another prefix ([allocator.c])",
                        names.join(", "),
                        native.package,
                        native.ours,
                    );
                }
            }
            let extra: BTreeSet<String> = asked.difference(&have).cloned().collect();
            let could: BTreeSet<String> = have
                .difference(&asked)
                .filter(|f| can_ask(&theirs, &id, native.package, f))
                .cloned()
                .collect();
            if extra.is_empty() && could.is_empty() {
                continue;
            }
            let leave_off = match extra.is_empty() {
                true => String::new(),
                false => format!(" and none that turn on [{}]", list(&extra)),
            };
            bail!(
                "[[allocator]] {}: its crate builds {} with the features [{}], allocsoak's own build of it ({}) with [{}], and a binary holds one build of it: declare the features that turn on [{}]{leave_off} there, or its C sources under another prefix ([allocator.c])",
                names.join(", "),
                native.package,
                list(&asked),
                native.ours,
                list(&have),
                list(&could),
            );
        }
        Ok(())
    }

    /// A crate of the declared crates alone (`<glue>/natives/`), locked as
    /// the glue is, whose resolution shows what features they ask for.
    fn declared_only(
        &self,
        fuzz: &Path,
        base: &Path,
        declared: &[Declared],
    ) -> Result<std::path::PathBuf> {
        let dir = self.dir.join("natives");
        let mut deps = toml::Table::new();
        glue::declared_dependencies(&mut deps, base, declared)?;
        let mut doc = toml::Table::new();
        doc.insert("dependencies".into(), toml::Value::Table(deps));
        let manifest = format!(
            "# Generated by allocsoak: the declared crates alone, to see the features they ask for.\n[package]\nname = \"allocsoak-declared-natives\"\nversion = \"0.0.0\"\nedition = \"2021\"\npublish = false\n\n[lib]\npath = \"lib.rs\"\n\n[workspace]\n\n{}",
            toml::to_string(&doc)?
        );
        std::fs::create_dir_all(&dir)
            .with_context(|| format!("failed to create {}", dir.display()))?;
        self.lock(fuzz)?;
        let lock = self.dir.join("Cargo.lock");
        for (name, text) in [("Cargo.toml", manifest), ("lib.rs", String::new())] {
            std::fs::write(dir.join(name), text)
                .with_context(|| format!("failed to write {}", dir.join(name).display()))?;
        }
        std::fs::copy(&lock, dir.join("Cargo.lock"))
            .with_context(|| format!("failed to write {}", dir.join("Cargo.lock").display()))?;
        Ok(dir.join("Cargo.toml"))
    }
}

/// The version of package `id` in a resolved graph.
fn version_of(metadata: &Metadata, id: &PackageId) -> Option<String> {
    metadata
        .packages
        .iter()
        .find(|p| p.id == *id)
        .map(|p| p.version.to_string())
}

/// The package of `native` in a resolved graph and its C-side features.
fn features_of(metadata: &Metadata, native: &Native) -> Option<(PackageId, BTreeSet<String>)> {
    let package = metadata
        .packages
        .iter()
        .find(|p| p.name.as_str() == native.package)?;
    let node = metadata
        .resolve
        .as_ref()?
        .nodes
        .iter()
        .find(|n| n.id == package.id)?;
    let features = node
        .features
        .iter()
        .map(|f| f.to_string())
        .filter(|f| !native.rust_only.contains(&f.as_str()))
        .collect();
    Some((package.id.clone(), features))
}

/// Whether the declared entry's crate (or a dependency its entry names)
/// reaches `target` in the graph.
fn reaches(metadata: &Metadata, d: &Declared, target: &PackageId) -> bool {
    let names: BTreeSet<&str> = d
        .package_name()
        .into_iter()
        .chain(d.dependencies.keys().map(String::as_str))
        .collect();
    let starts = metadata
        .packages
        .iter()
        .filter(|p| names.contains(p.name.as_str()))
        .map(|p| &p.id);
    crate::foundation::cargo::reaches(metadata, starts, target)
}

/// Whether a package of the declared graph that depends on `native`
/// (package `id`) has a feature of its own that turns on the native's
/// `feature` (`libmimalloc-sys/v2`, `ffi/v2` under a renamed dependency,
/// `ffi?/v2`): then a declaration could ask for it, and leaving it off
/// asks for the other build.
fn can_ask(metadata: &Metadata, id: &PackageId, native: &str, feature: &str) -> bool {
    let Some(resolve) = &metadata.resolve else {
        return false;
    };
    resolve
        .nodes
        .iter()
        .filter_map(|n| {
            let dep = n.deps.iter().find(|d| d.pkg == *id)?;
            let package = metadata.packages.iter().find(|p| p.id == n.id)?;
            Some((package, dep.name.replace('_', "-")))
        })
        .any(|(package, dep)| {
            package.features.values().flatten().any(|value| {
                let Some((on, f)) = value.split_once('/') else {
                    return false;
                };
                let on = on.trim_end_matches('?').replace('_', "-");
                f == feature && (on == dep || on == native)
            })
        })
}

fn list(features: &BTreeSet<String>) -> String {
    match features.is_empty() {
        true => "none".into(),
        false => features.iter().cloned().collect::<Vec<_>>().join(", "),
    }
}
