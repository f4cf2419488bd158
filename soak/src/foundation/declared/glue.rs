//! The glue: the build-local crate a config's declared allocators are
//! linked into the fuzz targets (and the drift replay) through.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

use super::entry::Declared;

/// The build-local crate that links the declared allocators into the fuzz
/// targets: `<root>/target/allocsoak/declared/<config>-<hash>/`, one per
/// config file, so the checkout itself stays as it was.
pub struct Glue {
    pub dir: PathBuf,
    /// Where the config's lock file is, whose versions win when it is
    /// there (`lock.rs`).
    pub lock_file: PathBuf,
}

impl Glue {
    /// The glue's fuzz binary of `target`: `alloc_ops-<config>-<hash>`, so
    /// glue builds share the plain build's folder without clobbering its
    /// binaries or each other's.
    pub fn binary_name(&self, target: shadow::Target) -> String {
        format!("{}-{}", target.name(), self.id())
    }

    /// The glue's RSS drift replay binary: `drift-<config>-<hash>`.
    pub fn drift_binary_name(&self) -> String {
        format!("drift-{}", self.id())
    }

    /// The glue's Miri replay binary: `miri-<config>-<hash>`.
    pub fn miri_binary_name(&self) -> String {
        format!("miri-{}", self.id())
    }

    fn id(&self) -> String {
        self.dir
            .file_name()
            .map_or("declared".into(), |f| f.to_string_lossy().into_owned())
    }

    /// The glue's package name, `allocsoak-declared-<hash>`: one per
    /// config. Glues share the build folder, and cargo keys a build
    /// script's binary and output by package; under one name, a glue's
    /// build could run another config's build script and compile its C
    /// sources.
    fn package(&self) -> String {
        let id = self.id();
        format!("{PACKAGE_PREFIX}{}", id.rsplit('-').next().unwrap_or(&id))
    }

    /// Whether `package` is a glue's ([`Glue::package`]).
    pub fn is_package(package: &str) -> bool {
        package.starts_with(PACKAGE_PREFIX)
    }
}

/// How every glue's package name starts.
const PACKAGE_PREFIX: &str = "allocsoak-declared-";

/// Where the config's lock file is, when it has one: `<config dir>/<config
/// stem>.lock`.
pub fn lock_file_of(config_path: &Path) -> PathBuf {
    let stem = config_path
        .file_stem()
        .map_or("config".into(), |s| s.to_string_lossy());
    config_path.with_file_name(format!("{stem}.lock"))
}

/// The library name of every glue crate (its package name is the glue's
/// own: [`Glue::package`]).
const LIB: &str = "allocsoak_declared";

impl Glue {
    /// Where the glue of the config at `config_path` lives.
    pub fn at(root: &Path, config_path: &Path) -> Glue {
        let path = std::fs::canonicalize(config_path).unwrap_or_else(|_| config_path.to_path_buf());
        let stem = path
            .file_stem()
            .map_or("config".into(), |s| s.to_string_lossy().into_owned());
        let hash = crate::foundation::state::stable_hash(path.to_string_lossy().as_bytes());
        Glue {
            dir: root
                .join("target/allocsoak/declared")
                .join(format!("{stem}-{hash:016x}")),
            lock_file: lock_file_of(&path),
        }
    }

    /// Writes the crate for `declared` (paths relative to `base`, the config
    /// file's folder), touching only files whose text changed so cargo
    /// rebuilds only what it must.
    pub fn write(&self, root: &Path, base: &Path, declared: &[Declared]) -> Result<()> {
        let fuzz = root.join("fuzz_targets");
        let mut files: Vec<(PathBuf, String)> = vec![
            (
                self.dir.join("Cargo.toml"),
                manifest(self, root, base, declared)?,
            ),
            (self.dir.join("src/lib.rs"), lib_rs(base, declared)),
        ];
        for target in shadow::Target::ALL {
            let name = target.name();
            files.push((
                self.dir.join(format!("targets/{name}.rs")),
                format!(
                    "#![cfg_attr(not(feature = \"honggfuzz\"), no_main)]\nallocsoak_fuzz::target!({target:?}, {}::register);\n",
                    LIB
                ),
            ));
        }
        for (bin, module) in [("drift", "drift"), ("miri", "miri")] {
            files.push((
                self.dir.join(format!("targets/{bin}.rs")),
                format!("fn main() {{\n    allocsoak_fuzz::{module}::main({LIB}::register)\n}}\n"),
            ));
        }
        let c: Vec<&Declared> = declared.iter().filter(|d| d.c.is_some()).collect();
        files.push((self.dir.join("build.rs"), build_rs(root, base, &c)));
        for (path, text) in files {
            if std::fs::read_to_string(&path).ok().as_deref() == Some(text.as_str()) {
                continue;
            }
            let dir = path.parent().expect("glue files sit in a folder");
            std::fs::create_dir_all(dir)
                .with_context(|| format!("failed to create {}", dir.display()))?;
            let tmp = path.with_extension("tmp");
            std::fs::write(&tmp, text)
                .and_then(|_| std::fs::rename(&tmp, &path))
                .with_context(|| format!("failed to write {}", path.display()))?;
        }
        // The versions the checkout's fuzz targets were tested with, and
        // the config's lock file's; cargo adds the declared crates.
        self.lock(&fuzz)
    }
}

/// The glue's `Cargo.toml`: its package, features, dependencies (the
/// harness's and the declared crates') and binaries, one per target.
fn manifest(glue: &Glue, root: &Path, base: &Path, declared: &[Declared]) -> Result<String> {
    let deps = dependencies(root, base, declared)?;
    let features: toml::Table = toml::toml! {
        default = ["libfuzzer", "mimalloc", "jemalloc"]
        libfuzzer = ["dep:libfuzzer-sys", "allocsoak-fuzz/libfuzzer"]
        honggfuzz = ["dep:honggfuzz", "allocsoak-fuzz/honggfuzz"]
        mimalloc = ["allocsoak-fuzz/mimalloc"]
        mimalloc-secure = ["allocsoak-fuzz/mimalloc-secure"]
        mimalloc-debug = ["allocsoak-fuzz/mimalloc-debug"]
        mimalloc-v3 = ["allocsoak-fuzz/mimalloc-v3"]
        drift = ["allocsoak-fuzz/drift"]
        miri = ["allocsoak-fuzz/miri"]
        jemalloc = ["allocsoak-fuzz/jemalloc"]
    };
    let mut doc = toml::Table::new();
    doc.insert(
        "package".into(),
        toml::Value::Table(toml::toml! {
            name = (glue.package())
            version = "0.0.0"
            edition = "2021"
            publish = false
            description = "Generated by allocsoak from a config's [[allocator]] entries; rewritten on every build"
            [metadata]
            cargo-fuzz = true
        }),
    );
    doc.insert("features".into(), toml::Value::Table(features));
    doc.insert("dependencies".into(), toml::Value::Table(deps));
    if declared.iter().any(|d| d.c.is_some()) {
        let mut build = toml::Table::new();
        build.insert("cc".into(), "1".into());
        build.insert(
            "allocsoak-declared-c".into(),
            path_dep(root.join("declared-c"), true),
        );
        doc.insert("build-dependencies".into(), toml::Value::Table(build));
    }
    doc.insert("bin".into(), toml::Value::Array(bins(glue)));
    let mut lib = toml::Table::new();
    lib.insert("name".into(), LIB.into());
    lib.insert("path".into(), "src/lib.rs".into());
    doc.insert("lib".into(), toml::Value::Table(lib));
    doc.insert(
        "profile".into(),
        toml::Value::Table(toml::toml! { [release] debug = 1 }),
    );
    doc.insert("workspace".into(), toml::Value::Table(toml::Table::new()));
    Ok(format!(
        "# Generated by allocsoak from a config's [[allocator]] entries; do not edit.\n{}",
        toml::to_string(&doc)?
    ))
}

/// The glue's `[dependencies]`: the fuzz targets' crate and `shadow` from
/// the checkout at `root`, the engines', and the declared crates with the
/// dependencies their entries name.
fn dependencies(root: &Path, base: &Path, declared: &[Declared]) -> Result<toml::Table> {
    let mut deps = toml::Table::new();
    deps.insert(
        "allocsoak-fuzz".into(),
        path_dep(root.join("fuzz_targets"), false),
    );
    // Without shadow's defaults: the build's features pick its mimalloc.
    deps.insert("shadow".into(), path_dep(root.join("shadow"), false));
    // The engines' macros expand into this crate, naming them.
    for (name, version) in [("libfuzzer-sys", "0.4"), ("honggfuzz", "0.5")] {
        let mut t = toml::Table::new();
        t.insert("version".into(), version.into());
        t.insert("optional".into(), true.into());
        deps.insert(name.into(), toml::Value::Table(t));
    }
    declared_dependencies(&mut deps, base, declared)?;
    Ok(deps)
}

/// A dependency on the crate at `p`, with its default features when
/// `default`.
fn path_dep(p: PathBuf, default: bool) -> toml::Value {
    let mut t = toml::Table::new();
    t.insert("path".into(), p.display().to_string().into());
    if !default {
        t.insert("default-features".into(), false.into());
    }
    toml::Value::Table(t)
}

/// The glue's `[[bin]]`s: a fuzz binary per target, the drift replay and
/// the Miri replay, each under the glue's own name.
fn bins(glue: &Glue) -> Vec<toml::Value> {
    let mut bins: Vec<toml::Value> = shadow::Target::ALL
        .iter()
        .map(|t| {
            toml::Value::Table(bin(
                glue.binary_name(*t),
                format!("targets/{}.rs", t.name()),
            ))
        })
        .collect();
    // The plain replay build (`allocsoak build` makes it apart, like
    // fuzz_targets' own `drift`).
    let mut drift = bin(glue.drift_binary_name(), "targets/drift.rs".into());
    drift.insert("required-features".into(), vec!["drift"].into());
    bins.push(toml::Value::Table(drift));
    // The Miri replay (`allocsoak miri`), built by `cargo miri run`.
    let mut miri = bin(glue.miri_binary_name(), "targets/miri.rs".into());
    miri.insert("required-features".into(), vec!["miri"].into());
    bins.push(toml::Value::Table(miri));
    bins
}

/// A `[[bin]]` named `name` built from `path`, with no test, doc or
/// bench.
fn bin(name: String, path: String) -> toml::Table {
    let mut b = toml::Table::new();
    b.insert("name".into(), name.into());
    b.insert("path".into(), path.into());
    for key in ["test", "doc", "bench"] {
        b.insert(key.into(), false.into());
    }
    b
}

/// Adds the declared crates, and the dependencies their entries name, to
/// `deps`.
pub(super) fn declared_dependencies(
    deps: &mut toml::Table,
    base: &Path,
    declared: &[Declared],
) -> Result<()> {
    for d in declared {
        if let Some(k) = &d.krate {
            let dep = toml::Value::Table(d.dependency(base));
            match deps.get(k) {
                Some(other) if *other != dep => bail!(
                    "[[allocator]] `{}`: crate `{k}` is declared another way above (or is allocsoak's own); give every entry of one crate the same version, path, git and features",
                    d.name
                ),
                _ => deps.insert(k.clone(), dep),
            };
        }
        for (k, v) in &d.dependencies {
            deps.insert(k.clone(), v.clone());
        }
    }
    Ok(())
}

fn lib_rs(base: &Path, declared: &[Declared]) -> String {
    let mut text = String::from(
        "//! Generated by allocsoak from a config's [[allocator]] entries; do not edit.\n\n",
    );
    let c: Vec<&Declared> = declared.iter().filter(|d| d.c.is_some()).collect();
    if !c.is_empty() {
        text.push_str("extern \"C\" {\n");
        for d in c {
            text.push_str(&format!(
                "    fn allocsoak_c_{}() -> shadow::allocator::CFunctions;\n",
                d.ident()
            ));
        }
        text.push_str("}\n\n");
    }
    text.push_str("/// Declares the config's allocators to `shadow`.\n#[allow(unused_braces)] // around an `init` that is one expression\npub fn register() {\n");
    for d in declared {
        text.push_str(&d.registration(base));
    }
    text.push_str("}\n");
    text
}

/// The glue's build script: each C allocator compiled with its includes,
/// defines and flags, then isolated and linked by `allocsoak-declared-c`.
fn build_rs(root: &Path, base: &Path, c: &[&Declared]) -> String {
    // The link args of fuzz_targets/build.rs: an instrumented `dylib:`
    // loads, and binds to its own symbols, not the bundled allocators';
    // a declared crate's `mmap` and `sbrk` refuse in an `os-fail` window.
    let map = root.join("fuzz_targets/exports.map").display().to_string();
    let mut text = format!(
        "// Generated by allocsoak; do not edit. CC and CFLAGS come from `allocsoak build`.\n\
         fn main() {{\n    println!(\"cargo:rustc-link-arg-bins=-rdynamic\");\n    \
         println!(\"cargo:rustc-link-arg-bins=-Wl,--wrap=mmap,--wrap=mmap64,--wrap=munmap,--wrap=sbrk\");\n    \
         println!(\"cargo:rustc-link-arg-bins=-Wl,--version-script={{}}\", {map:?});\n    \
         println!(\"cargo:rerun-if-changed={{}}\", {map:?});\n",
    );
    let mut rerun = String::new();
    for d in c {
        let src = d.c.as_ref().expect("a C allocator");
        text.push_str("    allocsoak_declared_c::build(\n");
        text.push_str(&format!(
            "        {:?},\n        {:?},\n        &[",
            d.ident(),
            src.prefix
        ));
        for (function, symbol) in src.mapped() {
            text.push_str(&format!("({function:?}, {symbol:?}), "));
        }
        text.push_str("],\n");
        text.push_str("        &[\n");
        for file in &src.sources {
            text.push_str(&format!(
                "            {:?}.into(),\n",
                base.join(file).display().to_string()
            ));
        }
        text.push_str("        ],\n        &cc::Build::new()\n");
        // Headers count too: those beside the sources and in the include
        // folders (cargo scans a folder for any change).
        let mut watched: Vec<String> = src
            .sources
            .iter()
            .filter_map(|f| base.join(f).parent().map(|p| p.display().to_string()))
            .chain(
                src.include
                    .iter()
                    .map(|d| base.join(d).display().to_string()),
            )
            .collect();
        watched.sort();
        watched.dedup();
        for dir in watched {
            rerun.push_str(&format!(
                "    println!(\"cargo:rerun-if-changed={{}}\", {dir:?});\n"
            ));
        }
        for dir in &src.include {
            let dir = base.join(dir).display().to_string();
            text.push_str(&format!("            .include({dir:?})\n"));
        }
        for def in &src.defines {
            let (k, v) = match def.split_once('=') {
                Some((k, v)) => (k, format!("Some({v:?})")),
                None => (def.as_str(), "None".into()),
            };
            text.push_str(&format!("            .define({k:?}, {v})\n"));
        }
        for flag in &src.flags {
            text.push_str(&format!("            .flag({flag:?})\n"));
        }
        text.push_str("        ,\n    );\n");
    }
    text.push_str(&rerun);
    text.push_str("}\n");
    text
}
