//! What an `[[allocator]]` entry must say ([`Declared::check`]): one
//! thing each, so the glue cannot fail to build for a reason the config
//! could have named.

use anyhow::Result;

use super::{Api, CLibrary, CSources, Declared};

/// Whether `symbol` can name a C function.
fn c_symbol(symbol: &str) -> bool {
    !symbol.is_empty()
        && !symbol.starts_with(|ch: char| ch.is_ascii_digit())
        && symbol
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

/// What is wrong with an entry, without its name ([`Declared::check`]
/// names it).
type Wrong = String;

/// Whether `p` can be a C identifier's prefix.
fn identifier(p: &str) -> bool {
    p.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

impl Declared {
    /// Checks the entry says one thing each, so the glue cannot fail to
    /// build for a reason the config could have named.
    pub fn check(&self) -> Result<()> {
        let checked = self
            .check_name()
            .and_then(|()| self.check_c_code())
            .and_then(|()| match (&self.c, &self.krate) {
                (None, None) if self.dylib.is_some() => Ok(()),
                (Some(c), None) => check_sources(c),
                (None, Some(krate)) => self.check_crate(krate),
                (Some(_), Some(_)) => Err("give `crate` or `c`, not both".into()),
                (None, None) => Err(
                    "give `crate` (a Rust allocator), `c` (C sources) or `dylib` (a C library)"
                        .into(),
                ),
            })
            .and_then(|()| self.check_properties());
        checked.map_err(|what| anyhow::anyhow!("[[allocator]] `{}`: {what}", self.name))
    }

    /// Its name: one slots and reports can use, not a bundled allocator's.
    fn check_name(&self) -> Result<(), Wrong> {
        let name = &self.name;
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err("a name is letters, digits, `-`, `_` and `.` only".into());
        }
        if shadow::allocator::BUNDLED.contains(&name.as_str())
            || shadow::allocator::MIMALLOC_FLAVORS.contains(&name.as_str())
        {
            return Err("the name is a bundled allocator's; pick another".into());
        }
        Ok(())
    }

    /// C code, from sources or a library: one of them, its functions
    /// found by name (C symbols), none of a crate's expressions.
    fn check_c_code(&self) -> Result<(), Wrong> {
        if let Some(lib) = &self.dylib {
            if self.c.is_some() || self.krate.is_some() {
                return Err("give one of `crate`, `c` or `dylib`".into());
            }
            if !identifier(&lib.prefix) {
                return Err("dylib.prefix is the functions' prefix (`my_` for my_malloc), letters, digits and `_`".into());
            }
        }
        let named = |of_c: fn(&CSources) -> &Option<String>,
                     of_lib: fn(&CLibrary) -> &Option<String>| {
            (self.c.as_ref().and_then(|c| of_c(c).as_ref()))
                .or(self.dylib.as_ref().and_then(|l| of_lib(l).as_ref()))
        };
        if let Some(symbol) = named(|c| &c.heap_check, |l| &l.heap_check).filter(|s| !c_symbol(s)) {
            return Err(format!(
                "heap_check = {symbol:?} is not a C symbol; name the function that checks the heap"
            ));
        }
        if let Some(symbol) = named(|c| &c.in_use, |l| &l.in_use).filter(|s| !c_symbol(s)) {
            return Err(format!(
                "in_use = {symbol:?} is not a C symbol; name the function that counts the bytes in use"
            ));
        }
        if let Some(symbol) = named(|c| &c.walk, |l| &l.walk).filter(|s| !c_symbol(s)) {
            return Err(format!(
                "walk = {symbol:?} is not a C symbol; name the function that walks the blocks in use"
            ));
        }
        let c_code = self.c.is_some() || self.dylib.is_some();
        if c_code
            && (self.new.is_some()
                || self.static_item.is_some()
                || self.init.is_some()
                || self.usable_size.is_some())
        {
            return Err("a C allocator takes no `new`, `static`, `init` or `usable_size` (its own malloc_usable_size or usable_size is found by name)".into());
        }
        if c_code && self.in_use.is_some() {
            return Err("a C allocator's count of bytes in use is a function: give it as c.in_use or dylib.in_use".into());
        }
        if c_code && self.walk.is_some() {
            return Err("a C allocator's walk of its blocks in use is a function: give it as c.walk or dylib.walk".into());
        }
        Ok(())
    }

    /// A crate: from one place, made one way, its expressions those its
    /// trait runs.
    fn check_crate(&self, krate: &str) -> Result<(), Wrong> {
        if self.package.as_deref() == Some(krate) {
            return Err("`package` is for a crate named another way here; leave it out".into());
        }
        let sources = [&self.version, &self.git]
            .iter()
            .filter(|s| s.is_some())
            .count()
            + self.path.is_some() as usize;
        if sources != 1 {
            return Err("give the crate one of version, path or git".into());
        }
        if (self.rev.is_some() || self.branch.is_some()) && self.git.is_none() {
            return Err("rev and branch go with git".into());
        }
        match (&self.new, &self.static_item, self.api) {
            (Some(_), Some(_), _) | (None, None, _) => {
                return Err("give one of `new` (an expression) or `static` (an item)".into())
            }
            (None, Some(_), Api::AllocatorApi2) => {
                return Err("an allocator-api2 allocator is made fresh for each program: give `new`, not `static`".into())
            }
            _ => {}
        }
        let api2 = self.api == Api::AllocatorApi2;
        if self.init.is_some() && api2 {
            return Err(
                "`init` is for a GlobalAlloc; an allocator-api2 allocator's `new` makes it ready"
                    .into(),
            );
        }
        if self.usable_size.is_some() && api2 {
            return Err("`usable_size` is for a GlobalAlloc; an allocator-api2 block's usable size is the length of the slice it returned".into());
        }
        if self.in_use.is_some() && api2 {
            return Err("`in_use` is for a GlobalAlloc; an allocator-api2 allocator is made fresh for each program, so nothing it counts outlives one".into());
        }
        if self.walk.is_some() && api2 {
            return Err("`walk` is for a GlobalAlloc; an allocator-api2 allocator is made fresh for each program, so nothing it holds outlives one".into());
        }
        Ok(())
    }

    /// What it declares of itself: each property one its kind can have.
    fn check_properties(&self) -> Result<(), Wrong> {
        if self.package.is_some() && self.krate.is_none() {
            return Err(
                "`package` goes with `crate`: the name the entry's code uses for it".into(),
            );
        }
        if self
            .size_classes
            .as_deref()
            .is_some_and(|s| s != "mimalloc")
        {
            return Err("size_classes knows only \"mimalloc\"".into());
        }
        if !self.stops.is_empty() && self.api == Api::AllocatorApi2 {
            return Err("`stops` is for a GlobalAlloc, C sources or a library: an allocator-api2 allocator's misuse is its caller's".into());
        }
        match (self.threads, self.api) {
            (None, _) | (Some(1), Api::GlobalAlloc) => Ok(()),
            (Some(1), Api::AllocatorApi2) => Err(
                "an allocator-api2 allocator is called under one lock already; leave out `threads`"
                    .into(),
            ),
            (Some(n), _) => Err(format!(
                "threads = {n}: give 1 for a single-threaded allocator, or leave it out"
            )),
        }
    }
}

/// C sources: some, a prefix, and functions mapped by names allocsoak
/// knows to C symbols, each once.
fn check_sources(c: &CSources) -> Result<(), Wrong> {
    if c.sources.is_empty() {
        return Err("c.sources lists no files".into());
    }
    if c.prefix.is_empty() || !identifier(&c.prefix) {
        return Err("c.prefix must name the functions' prefix (`my_` for my_malloc); unprefixed malloc would replace the process's own (rename with defines = [\"malloc=my_malloc\", ...])".into());
    }
    let known: Vec<&str> = allocsoak_declared_c::FUNCTIONS
        .iter()
        .map(|n| n[0])
        .collect();
    for (function, symbol) in &c.functions {
        if !known.contains(&function.as_str()) {
            return Err(format!(
                "[allocator.c.functions] has no function `{function}`; it maps {}",
                known.join(", ")
            ));
        }
        if !c_symbol(symbol) {
            return Err(format!(
                "[allocator.c.functions] {function} = {symbol:?} is not a C symbol"
            ));
        }
    }
    for (function, named) in [
        ("heap_check", &c.heap_check),
        ("in_use", &c.in_use),
        ("walk", &c.walk),
    ] {
        if named.is_some() && c.functions.contains_key(function) {
            return Err(format!(
                "give {function} once: as c.{function}, or in [allocator.c.functions]"
            ));
        }
    }
    Ok(())
}
