//! One `[[allocator]]` entry of a config ([`Declared`]): what it names,
//! how it is read and checked.

use std::path::{Path, PathBuf};

use anyhow::Result;
use serde::Deserialize;
use shadow::allocator::Attack;

/// One `[[allocator]]` entry.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Declared {
    /// The name slots, `--allocator` and reports use.
    pub name: String,
    /// The Rust package that holds the allocator (`crate`), with where it
    /// comes from: `version` (crates.io), `path` (relative to the config
    /// file) or `git` (with `rev` or `branch`).
    #[serde(rename = "crate")]
    pub krate: Option<String>,
    /// The crate's name in its registry when `crate` names it another way
    /// (Cargo's `package`): two releases of one crate, each under a name
    /// of its own (`crate = "dlmalloc01"`, `package = "dlmalloc"`,
    /// `version = "0.1"`), soak side by side. Cargo builds one release
    /// per compatible series (0.1.x, 2.x), so the releases must differ in
    /// it.
    pub package: Option<String>,
    pub version: Option<String>,
    pub path: Option<PathBuf>,
    pub git: Option<String>,
    pub rev: Option<String>,
    pub branch: Option<String>,
    /// Cargo features of the crate (default: none).
    #[serde(default)]
    pub features: Vec<String>,
    /// Whether the crate's default features are on (default: true).
    #[serde(rename = "default-features")]
    pub default_features: Option<bool>,
    /// More dependencies the expression needs, as Cargo writes them.
    #[serde(default)]
    pub dependencies: toml::Table,
    /// An expression making the allocator (`talc::Talck::new(...)`).
    pub new: Option<String>,
    /// A `static` item that is the allocator (`my_alloc::GLOBAL`).
    #[serde(rename = "static")]
    pub static_item: Option<String>,
    /// Statements run once the allocator is at the address it keeps (boxed
    /// from `new`, or the `static`), with `heap` bound to a `&'static` of
    /// it: an embedded heap's `unsafe { heap.init(start, size) }`, which
    /// may leave pointers to the allocator itself in its region, so it must
    /// not run before a move. A `GlobalAlloc` only.
    pub init: Option<String>,
    /// An expression for the usable size of block `p` (a `*mut u8`), with
    /// `heap` a `&'static` of the allocator, where the crate has one:
    /// `unsafe { heap.usable_size(p) }` (the `mimalloc` crate's, feature
    /// `extended`). Programs then write up to it and check it. A
    /// `GlobalAlloc` only: an allocator-api2 block's is the length of the
    /// slice it returned.
    pub usable_size: Option<String>,
    /// An expression for the bytes in blocks the allocator handed out and
    /// has not had back, by its own count, with `heap` a `&'static` of the
    /// allocator: `heap.used()` (embedded-alloc's). A program that freed
    /// everything must leave it where it started (`kept-bytes`). A
    /// `GlobalAlloc` only; C code declares a function (`c.in_use`,
    /// `dylib.in_use`).
    pub in_use: Option<String>,
    /// An expression for the blocks the allocator holds in use, by its own
    /// walk of its heap: any `IntoIterator` of `(usize, usize)`, the start
    /// (a header's, at or before the pointer handed out) and size of each,
    /// with `heap` a `&'static` of the allocator (`heap.blocks()` over
    /// rlsf's `iter_blocks`). A live block no listed block holds after an
    /// op is an `unlisted-block`; a block a program gave back that the
    /// walk still lists once the program has freed everything is a
    /// `kept-block`. A `GlobalAlloc` only.
    pub walk: Option<String>,
    /// The trait it implements: `global-alloc` (default) or `allocator-api2`.
    #[serde(default)]
    pub api: Api,
    /// A C allocator compiled from source, instead of a crate.
    pub c: Option<CSources>,
    /// A C allocator its author built as a shared library, loaded as
    /// `dylib:` loads one, with what this entry declares of it.
    pub dylib: Option<CLibrary>,
    /// `"mimalloc"` for a port that promises mimalloc's size classes
    /// (`diff_mimalloc` then compares usable sizes).
    pub size_classes: Option<String>,
    /// Bytes of the fixed region the allocator serves every block from:
    /// a request it cannot fit may fail, and capacity it loses by a
    /// program's end is a `capacity-leak` (docs/invariants.md: "Allocators over a fixed
    /// region"). Default: none, it grows as it needs.
    pub arena: Option<usize>,
    /// The largest alignment the allocator supports; programs skip larger
    /// requests. Default: every alignment programs ask for.
    pub max_align: Option<usize>,
    /// `1` for an allocator documented as single-threaded (an embedded
    /// heap that is `Sync` only to be a `#[global_allocator]` on one
    /// core): programs skip every op on another thread, and `mt_ops` is
    /// left out of its slots. Default: any number of threads.
    pub threads: Option<usize>,
    /// `true` for an allocator whose locks have fork handlers (as glibc's,
    /// jemalloc's and mimalloc's do), so that a child forked while other
    /// threads are inside it can allocate: `mt_ops`' `race-fork` then
    /// holds it to that. Default: not held to it (POSIX asks nothing of
    /// malloc in a threaded process's child).
    #[serde(default)]
    pub fork_safe: bool,
    /// The heap corruptions the allocator stops by ending the process (an
    /// abort, a panic, a signal) or by never handing out what they aim
    /// at, by their `attack` names (`double-free`, `foreign-free`,
    /// `freed-write`, `interior-free`, `overflow`, `header-write`): the
    /// `attack` op holds it to each (docs/invariants.md). Default: none.
    #[serde(default, deserialize_with = "attacks")]
    pub stops: Vec<Attack>,
}

/// `stops`' names as attacks, read once: an unknown name is the config's
/// error.
fn attacks<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<Attack>, D::Error> {
    let names = Vec::<String>::deserialize(d)?;
    names
        .iter()
        .map(|n| {
            n.parse()
                .map_err(|e| serde::de::Error::custom(format!("stops: {e}")))
        })
        .collect()
}

#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Api {
    #[default]
    GlobalAlloc,
    AllocatorApi2,
}

/// A C allocator's sources, compiled as the bundled mimalloc and jemalloc
/// are (the clang of nightly's LLVM, coverage and ASan).
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CSources {
    /// `.c` files, relative to the config file.
    pub sources: Vec<PathBuf>,
    /// Include directories, relative to the config file.
    #[serde(default)]
    pub include: Vec<PathBuf>,
    /// `NAME` or `NAME=VALUE`.
    #[serde(default)]
    pub defines: Vec<String>,
    /// More compiler flags.
    #[serde(default)]
    pub flags: Vec<String>,
    /// The prefix of its functions (`my_` for `my_malloc`, `my_free`, ...).
    /// Required: unprefixed `malloc` would replace the process's own.
    pub prefix: String,
    /// Functions whose symbol does not follow the prefix, by the name
    /// allocsoak knows them by (`expand = "my_grow_in_place"`; the names
    /// are `allocsoak_declared_c::FUNCTIONS`' first ones).
    #[serde(default)]
    pub functions: std::collections::BTreeMap<String, String>,
    /// The largest request whose usable size its `good_size` gives
    /// exactly. Default 0: `good_size` promises at least the request, as
    /// mimalloc's does ("Generally, mi_usable_size(mi_malloc(size)) ==
    /// mi_good_size(size)"), and only less than the request is a finding.
    #[serde(default)]
    pub good_size_exact_up_to: Option<usize>,
    /// Its own check of its whole heap (`umm_integrity_check`), run after
    /// every op; default `<prefix>heap_check` where it has one.
    pub heap_check: Option<String>,
    /// What the heap check returns.
    #[serde(default)]
    pub heap_check_returns: HeapCheckReturns,
    /// Its own count of bytes in blocks it handed out and has not had
    /// back, `size_t f(void)` (blocks in a thread's cache not counted); a
    /// program that freed everything must leave it where it started
    /// (`kept-bytes`). Default `<prefix>in_use` where it has one.
    pub in_use: Option<String>,
    /// Its own walk of the blocks it holds in use, from every thread's
    /// heap: `void f(void (*visit)(void *start, size_t size, void *arg),
    /// void *arg)`, calling `visit` once a block (a start may be its
    /// header's). A live block it misses after an op is an
    /// `unlisted-block`; a freed one it still lists once a program has
    /// freed everything, a `kept-block`. Default `<prefix>walk` where it
    /// has one.
    pub walk: Option<String>,
    /// Where its zeroed realloc (`rezalloc`, mimalloc's API) zeroes from.
    #[serde(default)]
    pub zeroed_realloc: ZeroedRealloc,
}

/// Where a declared C allocator's zeroed realloc zeroes from
/// ([`shadow::allocator::ZeroedFrom`]).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum ZeroedRealloc {
    /// Past what the program wrote, for a block allocated zeroed; past
    /// the old usable size for any other: what mimalloc documents.
    #[default]
    Written,
    /// Past the old usable size for every block: mimalloc's releases with
    /// mimalloc#763, which leave a moved block's slack stale.
    Usable,
    /// Past the old request for every block.
    Request,
}

impl ZeroedRealloc {
    /// The builder call that declares it, if not the default.
    fn property(self) -> Option<&'static str> {
        match self {
            ZeroedRealloc::Written => None,
            ZeroedRealloc::Usable => Some(
                ".with_zeroed_from(shadow::allocator::ZeroedFrom::Usable { quote: \"declared: zeroed_realloc = usable\" })",
            ),
            ZeroedRealloc::Request => {
                Some(".with_zeroed_from(shadow::allocator::ZeroedFrom::Request)")
            }
        }
    }
}

/// What a declared C allocator's heap check returns.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum HeapCheckReturns {
    /// An `int`, 0 when the heap is sound (TLSF's `tlsf_check`).
    #[default]
    Errors,
    /// A `bool`, true when the heap is sound (umm_malloc's
    /// `umm_integrity_check`).
    Bool,
}

/// A C allocator's shared library (built as docs/allocators.md says),
/// declared so its contract can be: `arena`, `max_align`, `threads` and
/// `size_classes` of the entry mean what they mean for C sources.
#[derive(Clone, Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CLibrary {
    /// The `.so`, relative to the config file.
    pub path: PathBuf,
    /// The prefix of its functions (`my_` for `my_malloc`); default none.
    #[serde(default)]
    pub prefix: String,
    /// As for C sources ([`CSources::good_size_exact_up_to`]).
    pub good_size_exact_up_to: Option<usize>,
    /// As for C sources ([`CSources::heap_check`]).
    pub heap_check: Option<String>,
    /// As for C sources ([`CSources::heap_check_returns`]).
    #[serde(default)]
    pub heap_check_returns: HeapCheckReturns,
    /// As for C sources ([`CSources::in_use`]).
    pub in_use: Option<String>,
    /// As for C sources ([`CSources::walk`]).
    pub walk: Option<String>,
    /// As for C sources ([`CSources::zeroed_realloc`]).
    #[serde(default)]
    pub zeroed_realloc: ZeroedRealloc,
}

impl CSources {
    /// The functions whose symbol does not follow the prefix, by the name
    /// allocsoak knows them by: `functions`, the `heap_check`, `in_use`
    /// and `walk`.
    pub fn mapped(&self) -> Vec<(&str, &str)> {
        let check = self.heap_check.as_deref().map(|s| ("heap_check", s));
        let in_use = self.in_use.as_deref().map(|s| ("in_use", s));
        let walk = self.walk.as_deref().map(|s| ("walk", s));
        self.functions
            .iter()
            .map(|(f, s)| (f.as_str(), s.as_str()))
            .chain(check)
            .chain(in_use)
            .chain(walk)
            .collect()
    }
}

impl CLibrary {
    /// What `dylib:` takes for it: `/abs/lib.so:prefix`, the path made
    /// absolute from `base`.
    pub fn spec(&self, base: &Path) -> String {
        format!("{}:{}", base.join(&self.path).display(), self.prefix)
    }
}

impl Declared {
    /// Declared `threads = 1`.
    pub fn single_threaded(&self) -> bool {
        self.threads == Some(1)
    }

    /// A Rust identifier for generated items.
    pub(crate) fn ident(&self) -> String {
        self.name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
            .collect()
    }

    /// The registry name of the entry's crate: its `package`, else its
    /// `crate`.
    pub fn package_name(&self) -> Option<&str> {
        self.package.as_deref().or(self.krate.as_deref())
    }

    /// The release series a crates.io `version` requirement picks from,
    /// the part semver says is compatible (`0.1` of `=0.1.4`, `2` of
    /// `^2.3`): two entries of one package in one series would be one
    /// release in the build.
    pub(crate) fn series(&self) -> Option<String> {
        let req = cargo_metadata::semver::VersionReq::parse(self.version.as_deref()?).ok()?;
        let c = req.comparators.first()?;
        Some(match (c.major, c.minor, c.patch) {
            (0, Some(0), Some(patch)) => format!("0.0.{patch}"),
            (0, Some(minor), _) => format!("0.{minor}"),
            (major, ..) => major.to_string(),
        })
    }

    /// The crate's dependency entry, its paths made absolute from `base`.
    pub(super) fn dependency(&self, base: &Path) -> toml::Table {
        let mut dep = toml::Table::new();
        if let Some(p) = &self.package {
            dep.insert("package".into(), p.clone().into());
        }
        if let Some(v) = &self.version {
            dep.insert("version".into(), v.clone().into());
        }
        if let Some(p) = &self.path {
            dep.insert("path".into(), base.join(p).display().to_string().into());
        }
        for (key, value) in [
            ("git", &self.git),
            ("rev", &self.rev),
            ("branch", &self.branch),
        ] {
            if let Some(v) = value {
                dep.insert(key.into(), v.clone().into());
            }
        }
        if !self.features.is_empty() {
            dep.insert("features".into(), self.features.clone().into());
        }
        if let Some(d) = self.default_features {
            dep.insert("default-features".into(), d.into());
        }
        dep
    }

    /// The lines an emitted test runs first to declare this allocator, with
    /// what the test's crate needs to build them.
    pub fn test_setup(&self, config: &Path) -> String {
        let base = config.parent().unwrap_or(Path::new("."));
        // The entry's `dependencies` too: its expression names them.
        let more: String = self
            .dependencies
            .iter()
            .map(|(k, v)| format!("    // {k} = {v}\n"))
            .collect();
        let needs = match (&self.krate, &self.c) {
            (None, None) => String::new(),
            (Some(k), _) => format!(
                "    // `{}` is declared in {}: this test needs in [dev-dependencies]\n    // {k} = {}\n{more}",
                self.name,
                config.display(),
                toml::Value::Table(self.dependency(base))
            ),
            (None, Some(_)) => format!(
                "    // `{}` is declared in {}: this test needs its C sources and\n    // allocsoak's shim compiled in (the glue's build.rs shows how).\n    extern \"C\" {{\n        fn allocsoak_c_{}() -> shadow::allocator::CFunctions;\n    }}\n",
                self.name,
                config.display(),
                self.ident()
            ),
        };
        format!("{needs}{}", self.registration(base))
    }

    /// The line of `register()` that declares this allocator, its paths
    /// made absolute from `base`.
    pub(super) fn registration(&self, base: &Path) -> String {
        let name = &self.name;
        let properties = self.properties();
        if let Some(lib) = &self.dylib {
            return format!(
                "    shadow::allocator::declare_library({name:?}, {:?}, |library| library{properties});\n",
                lib.spec(base)
            );
        }
        let make = match (&self.c, self.api, &self.static_item, &self.new) {
            (Some(_), ..) => format!(
                "Box::new(shadow::allocator::linked_c({name:?}, unsafe {{ allocsoak_c_{}() }}){properties})",
                self.ident()
            ),
            (None, Api::AllocatorApi2, _, Some(new)) => {
                format!("Box::new(shadow::allocator::Api2Adapter::new({name:?}, || {new}))")
            }
            (None, _, item, new) => {
                self.global_alloc_adapter(item.as_deref(), new.as_deref(), properties)
            }
        };
        format!("    shadow::allocator::declare({name:?}, || {make});\n")
    }

    /// The builder calls (`.with_size_classes(..)` and on) that every kind
    /// of allocator takes, for the properties the entry declares.
    fn properties(&self) -> String {
        let mut properties = match &self.size_classes {
            Some(c) => format!(".with_size_classes({c:?})"),
            None => String::new(),
        };
        if let Some(size) = self.arena {
            properties.push_str(&format!(".with_arena({size})"));
        }
        if let Some(align) = self.max_align {
            properties.push_str(&format!(".with_max_align({align})"));
        }
        if self.single_threaded() {
            properties.push_str(".with_single_thread()");
        }
        if self.fork_safe {
            properties.push_str(".with_fork_safe()");
        }
        if !self.stops.is_empty() {
            let attacks: Vec<String> = (self.stops.iter())
                .map(|a| format!("shadow::allocator::Attack::{a:?}"))
                .collect();
            properties.push_str(&format!(".with_stops(&[{}])", attacks.join(", ")));
        }
        let exact = (self.c.as_ref().and_then(|c| c.good_size_exact_up_to))
            .or(self.dylib.as_ref().and_then(|l| l.good_size_exact_up_to));
        if let Some(size) = exact {
            properties.push_str(&format!(".with_good_size_exact_up_to({size})"));
        }
        let zeroed = (self.c.as_ref().map(|c| c.zeroed_realloc))
            .or(self.dylib.as_ref().map(|l| l.zeroed_realloc));
        if let Some(property) = zeroed.and_then(ZeroedRealloc::property) {
            properties.push_str(property);
        }
        let (check, returns) = match (&self.c, &self.dylib) {
            (Some(c), _) => (None, c.heap_check_returns),
            (None, Some(lib)) => (lib.heap_check.as_ref(), lib.heap_check_returns),
            (None, None) => (None, HeapCheckReturns::Errors),
        };
        if let Some(symbol) = check {
            properties.push_str(&format!(".with_heap_check({symbol:?})"));
        }
        if let Some(symbol) = self.dylib.as_ref().and_then(|l| l.in_use.as_ref()) {
            properties.push_str(&format!(".with_in_use({symbol:?})"));
        }
        if let Some(symbol) = self.dylib.as_ref().and_then(|l| l.walk.as_ref()) {
            properties.push_str(&format!(".with_walk({symbol:?})"));
        }
        if returns == HeapCheckReturns::Bool {
            properties
                .push_str(".with_heap_check_returns(shadow::allocator::HeapCheckReturns::Bool)");
        }
        properties
    }

    /// The expression making a crate's `GlobalAlloc` (its `static` `item`,
    /// else its `new`) with `properties` and the entry's `usable_size`,
    /// `in_use` and `walk`, run through `init` once placed when the entry has one.
    fn global_alloc_adapter(
        &self,
        item: Option<&str>,
        new: Option<&str>,
        mut properties: String,
    ) -> String {
        let name = &self.name;
        let adapter = match (item, new) {
            (Some(item), _) => format!("of_static({name:?}, &{item})"),
            (None, Some(new)) => format!("new({name:?}, {new})"),
            (None, None) => unreachable!("checked: a crate has new or static"),
        };
        if let Some(usable) = &self.usable_size {
            properties.push_str(&format!(
                ".with_usable_size(|heap, p: *mut u8| -> usize {{ {usable} }})"
            ));
        }
        if let Some(in_use) = &self.in_use {
            properties.push_str(&format!(".with_in_use(|heap| -> usize {{ {in_use} }})"));
        }
        if let Some(walk) = &self.walk {
            properties.push_str(&format!(
                ".with_walk(|heap| -> Vec<(usize, usize)> {{ ::std::iter::IntoIterator::into_iter({walk}).collect() }})"
            ));
        }
        let adapter = format!("shadow::allocator::GlobalAllocAdapter::{adapter}{properties}");
        match &self.init {
            Some(init) => format!(
                "{{\n        let adapter = {adapter};\n        let heap = adapter.allocator();\n        {{ {init} }}\n        Box::new(adapter)\n    }}"
            ),
            None => format!("Box::new({adapter})"),
        }
    }
}

mod check;
#[cfg(test)]
mod tests;
