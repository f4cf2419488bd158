//! Names to allocators: the bundled ones, those a build declares (an
//! author's, from a config's `[[allocator]]`), `dylib:` libraries and the
//! zoo's; each made once, on first use ([`by_name`]).

use std::collections::HashMap;
use std::sync::{Mutex, OnceLock};

#[cfg(feature = "jemalloc")]
use super::jemalloc;
#[cfg(feature = "mimalloc-c")]
use super::mimalloc;
use super::{arena, dylib, system, Allocator, CFunctions, Dylib, MIMALLOC_FLAVORS};

/// A constructor for a bundled or declared allocator.
pub type Make = fn() -> Box<dyn Allocator>;

/// A bundled allocator's constructor; `glibc`'s can fail.
type MakeBundled = fn() -> Result<Box<dyn Allocator>, String>;

/// How a declared name is made: linked in, or a library loaded when the
/// name is first used (which can fail).
#[derive(Clone, Copy)]
enum Declared {
    Linked(Make),
    Library {
        spec: &'static str,
        with: fn(Dylib) -> Dylib,
    },
}

static DECLARED: Mutex<Vec<(&'static str, Declared)>> = Mutex::new(Vec::new());

fn declare_as(name: &'static str, how: Declared) {
    let mut list = DECLARED.lock().unwrap_or_else(|e| e.into_inner());
    if !list.iter().any(|(n, _)| *n == name) {
        list.push((name, how));
    }
}

/// Registers an allocator under `name`, for [`by_name`] to find after the
/// bundled ones. The glue crate of a config's `[[allocator]]` entries calls
/// this before the first input runs; declaring a name twice keeps the first.
pub fn declare(name: &'static str, make: Make) {
    declare_as(name, Declared::Linked(make));
}

/// Registers a C allocator library under `name`: `spec` is what
/// `dylib:` takes (`/abs/lib.so[:prefix]`), loaded when the name is first
/// used, and `with` adds what the config declares of it
/// ([`Dylib::with_arena`] and the other `with_*`). A library that does not
/// load is an error of [`by_name`], as for `dylib:`.
pub fn declare_library(name: &'static str, spec: &'static str, with: fn(Dylib) -> Dylib) {
    declare_as(name, Declared::Library { spec, with });
}

/// Makes a `zoo:` allocator from its whole name. The planted-bug zoo is
/// a crate of its own (`zoo`), built with coverage where this crate, the
/// harness, is not; it registers itself with [`declare_zoo`].
pub type MakeZoo = fn(&str) -> Result<Box<dyn Allocator>, String>;

/// The zoo's constructor and its bug names, once registered.
static ZOO: OnceLock<(MakeZoo, &'static [&'static str])> = OnceLock::new();

/// Registers the zoo (`zoo::register` calls this): [`by_name`] makes
/// `zoo:` names with `make`, and an unknown name's error lists `bugs`.
pub fn declare_zoo(make: MakeZoo, bugs: &'static [&'static str]) {
    let _ = ZOO.set((make, bugs));
}

/// Names registered with [`declare`] in this process.
pub fn declared_names() -> Vec<&'static str> {
    let list = DECLARED.lock().unwrap_or_else(|e| e.into_inner());
    list.iter().map(|(n, _)| *n).collect()
}

/// A C allocator linked into the binary (compiled from a config's `c`
/// sources), under `name`: its functions, as `dylib:` would resolve them;
/// `with_arena` and the other `with_*` add what the config declares.
pub fn linked_c(name: &'static str, fns: CFunctions) -> Dylib {
    Dylib::linked(name, fns)
}

/// The bundled allocators by name. An author's allocator is declared in a
/// config instead (see the docs/allocators.md, "Plug in your allocator").
fn bundled() -> Vec<(&'static str, MakeBundled)> {
    // Without a C allocator (the CLI's build) nothing is pushed.
    #[cfg_attr(
        not(any(feature = "mimalloc-c", feature = "jemalloc")),
        allow(unused_mut)
    )]
    let mut list: Vec<(&'static str, MakeBundled)> = vec![
        ("system", || Ok(Box::new(system::System))),
        // libc.so.6 opened as a `dylib:` is: an error if it cannot be.
        ("glibc", || Ok(Box::new(dylib::open_glibc()?))),
        ("arena", || Ok(Box::new(arena::FixedArena::new()))),
    ];
    #[cfg(feature = "mimalloc-c")]
    list.push((mimalloc::NAME, || Ok(Box::new(mimalloc::Mimalloc::new()))));
    #[cfg(feature = "jemalloc")]
    list.push(("jemalloc", || Ok(Box::new(jemalloc::Jemalloc::new()))));
    list
}

/// Names of the bundled allocators in this build (not counting `dylib:` and `zoo:`).
pub fn bundled_names() -> Vec<&'static str> {
    bundled().into_iter().map(|(n, _)| n).collect()
}

/// The bundled allocators of the default fuzz build, whatever this build
/// has: the `allocsoak` CLI runs no allocator (it is built without the
/// C allocators), and checks names against this list.
pub const BUNDLED: [&str; 5] = ["system", "glibc", "arena", "mimalloc", "jemalloc"];

/// Whether `name` is one of [`BUNDLED`], a mimalloc flavor or declared in
/// this process, without making it; `zoo:` and `dylib:` names are their
/// own to check.
pub fn check_name(name: &str) -> Result<(), String> {
    match BUNDLED.contains(&name) || MIMALLOC_FLAVORS.contains(&name) || declared(name).is_some() {
        true => Ok(()),
        false => Err(unknown(name)),
    }
}

/// Looks an allocator up by name, creating it on first use. The same name
/// always returns the same instance.
pub fn by_name(name: &str) -> Result<&'static dyn Allocator, String> {
    static CACHE: OnceLock<Mutex<HashMap<String, &'static dyn Allocator>>> = OnceLock::new();
    let cache = || {
        CACHE
            .get_or_init(Default::default)
            .lock()
            .unwrap_or_else(|e| e.into_inner())
    };
    if let Some(a) = cache().get(name) {
        return Ok(*a);
    }
    // Made without the lock held: a zoo's base is looked up by name too.
    let made: Box<dyn Allocator> = if let Some(spec) = name.strip_prefix("dylib:") {
        Box::new(dylib::Dylib::open(spec)?)
    } else if name.starts_with("zoo:") {
        let (make, _) = ZOO.get().ok_or_else(|| {
            format!("allocator `{name}`: this program has no zoo; it calls `zoo::register()` first")
        })?;
        make(name)?
    } else if let Some((_, make)) = bundled().into_iter().find(|(n, _)| *n == name) {
        make()?
    } else if let Some(how) = declared(name) {
        match how {
            Declared::Linked(make) => make(),
            Declared::Library { spec, with } => {
                Box::new(with(dylib::Dylib::open_as(name, spec)?).declared()?)
            }
        }
    } else {
        return Err(unknown(name));
    };
    Ok(*cache()
        .entry(name.to_string())
        .or_insert_with(|| Box::leak(made)))
}

fn declared(name: &str) -> Option<Declared> {
    let list = DECLARED.lock().unwrap_or_else(|e| e.into_inner());
    list.iter().find(|(n, _)| *n == name).map(|(_, how)| *how)
}

fn unknown(name: &str) -> String {
    let flavor = MIMALLOC_FLAVORS
        .into_iter()
        .chain(["mimalloc", "jemalloc"])
        .find(|f| *f == name);
    match flavor {
        Some(f) => format!(
            "allocator `{f}` is not in this build; build with `--features {f}` (the just recipes pick the build for you)"
        ),
        None => format!(
            "unknown allocator `{name}`; expected one of {}, dylib:/path/lib.so[:prefix] or zoo:<bug>[@<base>] ({}); an allocator of your own is declared in a config's [[allocator]] (see docs/allocators.md)",
            BUNDLED.into_iter().chain(declared_names()).collect::<Vec<_>>().join(", "),
            ZOO.get().map_or(&[][..], |(_, bugs)| bugs).join(", ")
        ),
    }
}
