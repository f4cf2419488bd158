//! What an `[[allocator]]` entry must say ([`Declared::check`]): one
//! thing each, so the glue cannot fail to build for a reason the config
//! could have named.

use anyhow::Result;

use super::{Api, Declared};

/// Whether `symbol` can name a C function.
fn c_symbol(symbol: &str) -> bool {
    !symbol.is_empty()
        && !symbol.starts_with(|ch: char| ch.is_ascii_digit())
        && symbol
            .chars()
            .all(|ch| ch.is_ascii_alphanumeric() || ch == '_')
}

impl Declared {
    /// Checks the entry says one thing each, so the glue cannot fail to
    /// build for a reason the config could have named.
    pub fn check(&self) -> Result<()> {
        let name = &self.name;
        let bad = |what: &str| anyhow::anyhow!("[[allocator]] `{name}`: {what}");
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || "-_.".contains(c))
        {
            return Err(bad("a name is letters, digits, `-`, `_` and `.` only"));
        }
        if shadow::allocator::BUNDLED.contains(&name.as_str())
            || shadow::allocator::MIMALLOC_FLAVORS.contains(&name.as_str())
        {
            return Err(bad("the name is a bundled allocator's; pick another"));
        }
        let identifier = |p: &str| p.chars().all(|ch| ch.is_ascii_alphanumeric() || ch == '_');
        if let Some(lib) = &self.dylib {
            if self.c.is_some() || self.krate.is_some() {
                return Err(bad("give one of `crate`, `c` or `dylib`"));
            }
            if !identifier(&lib.prefix) {
                return Err(bad("dylib.prefix is the functions' prefix (`my_` for my_malloc), letters, digits and `_`"));
            }
        }
        let heap_check = (self.c.as_ref().and_then(|c| c.heap_check.as_ref()))
            .or(self.dylib.as_ref().and_then(|l| l.heap_check.as_ref()));
        if let Some(symbol) = heap_check.filter(|s| !c_symbol(s)) {
            return Err(bad(&format!(
                "heap_check = {symbol:?} is not a C symbol; name the function that checks the heap"
            )));
        }
        let in_use = (self.c.as_ref().and_then(|c| c.in_use.as_ref()))
            .or(self.dylib.as_ref().and_then(|l| l.in_use.as_ref()));
        if let Some(symbol) = in_use.filter(|s| !c_symbol(s)) {
            return Err(bad(&format!(
                "in_use = {symbol:?} is not a C symbol; name the function that counts the bytes in use"
            )));
        }
        // C code, from sources or a library: its functions are found by name.
        let c_code = self.c.is_some() || self.dylib.is_some();
        if c_code
            && (self.new.is_some()
                || self.static_item.is_some()
                || self.init.is_some()
                || self.usable_size.is_some())
        {
            return Err(bad("a C allocator takes no `new`, `static`, `init` or `usable_size` (its own malloc_usable_size or usable_size is found by name)"));
        }
        if c_code && self.in_use.is_some() {
            return Err(bad("a C allocator's count of bytes in use is a function: give it as c.in_use or dylib.in_use"));
        }
        match (&self.c, &self.krate) {
            (None, None) if self.dylib.is_some() => {}
            (Some(c), None) => {
                if c.sources.is_empty() {
                    return Err(bad("c.sources lists no files"));
                }
                if c.prefix.is_empty() || !identifier(&c.prefix) {
                    return Err(bad("c.prefix must name the functions' prefix (`my_` for my_malloc); unprefixed malloc would replace the process's own (rename with defines = [\"malloc=my_malloc\", ...])"));
                }
                let known: Vec<&str> = allocsoak_declared_c::FUNCTIONS
                    .iter()
                    .map(|n| n[0])
                    .collect();
                for (function, symbol) in &c.functions {
                    if !known.contains(&function.as_str()) {
                        return Err(bad(&format!(
                            "[allocator.c.functions] has no function `{function}`; it maps {}",
                            known.join(", ")
                        )));
                    }
                    if !c_symbol(symbol) {
                        return Err(bad(&format!(
                            "[allocator.c.functions] {function} = {symbol:?} is not a C symbol"
                        )));
                    }
                }
                for (function, named) in [("heap_check", &c.heap_check), ("in_use", &c.in_use)] {
                    if named.is_some() && c.functions.contains_key(function) {
                        return Err(bad(&format!(
                            "give {function} once: as c.{function}, or in [allocator.c.functions]"
                        )));
                    }
                }
            }
            (None, Some(krate)) => {
                if self.package.as_ref() == Some(krate) {
                    return Err(bad(
                        "`package` is for a crate named another way here; leave it out",
                    ));
                }
                let sources = [&self.version, &self.git]
                    .iter()
                    .filter(|s| s.is_some())
                    .count()
                    + self.path.is_some() as usize;
                if sources != 1 {
                    return Err(bad("give the crate one of version, path or git"));
                }
                if (self.rev.is_some() || self.branch.is_some()) && self.git.is_none() {
                    return Err(bad("rev and branch go with git"));
                }
                match (&self.new, &self.static_item, self.api) {
                    (Some(_), Some(_), _) | (None, None, _) => {
                        return Err(bad("give one of `new` (an expression) or `static` (an item)"))
                    }
                    (None, Some(_), Api::AllocatorApi2) => {
                        return Err(bad("an allocator-api2 allocator is made fresh for each program: give `new`, not `static`"))
                    }
                    _ => {}
                }
                if self.init.is_some() && self.api == Api::AllocatorApi2 {
                    return Err(bad("`init` is for a GlobalAlloc; an allocator-api2 allocator's `new` makes it ready"));
                }
                if self.usable_size.is_some() && self.api == Api::AllocatorApi2 {
                    return Err(bad("`usable_size` is for a GlobalAlloc; an allocator-api2 block's usable size is the length of the slice it returned"));
                }
                if self.in_use.is_some() && self.api == Api::AllocatorApi2 {
                    return Err(bad("`in_use` is for a GlobalAlloc; an allocator-api2 allocator is made fresh for each program, so nothing it counts outlives one"));
                }
            }
            (Some(_), Some(_)) => return Err(bad("give `crate` or `c`, not both")),
            (None, None) => {
                return Err(bad(
                    "give `crate` (a Rust allocator), `c` (C sources) or `dylib` (a C library)",
                ))
            }
        }
        if self.package.is_some() && self.krate.is_none() {
            return Err(bad(
                "`package` goes with `crate`: the name the entry's code uses for it",
            ));
        }
        if self
            .size_classes
            .as_deref()
            .is_some_and(|s| s != "mimalloc")
        {
            return Err(bad("size_classes knows only \"mimalloc\""));
        }
        if !self.stops.is_empty() && self.api == Api::AllocatorApi2 {
            return Err(bad("`stops` is for a GlobalAlloc, C sources or a library: an allocator-api2 allocator's misuse is its caller's"));
        }
        match (self.threads, self.api) {
            (None, _) => {}
            (Some(1), Api::GlobalAlloc) => {}
            (Some(1), Api::AllocatorApi2) => return Err(bad(
                "an allocator-api2 allocator is called under one lock already; leave out `threads`",
            )),
            (Some(n), _) => {
                return Err(bad(&format!(
                    "threads = {n}: give 1 for a single-threaded allocator, or leave it out"
                )))
            }
        }
        Ok(())
    }
}
