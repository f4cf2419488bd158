//! Allocators declared in a config (`[[allocator]]`), never by editing
//! allocsoak: a Rust crate (`GlobalAlloc` or `allocator_api2`), C
//! sources, or a C library loaded at run time. [`Glue`] writes the build-local crate that links them into the
//! fuzz targets and registers each name with `shadow::allocator::declare`.

mod entry;
mod glue;
mod lock;
mod natives;

pub use entry::{Api, CSources, Declared};
pub use glue::{lock_file_of, Glue};

/// Whether `allocator` is a library loaded at run time: `dylib:<spec>`, or
/// a name `declared` gives an `[allocator.dylib]`. It loads only into the
/// ASan fuzz binaries, so honggfuzz's plain build cannot run it, and the
/// soak checks it loads before its first slice.
pub fn is_library(declared: &[Declared], allocator: &str) -> bool {
    allocator.starts_with("dylib:")
        || declared
            .iter()
            .any(|d| d.name == allocator && d.dylib.is_some())
}
