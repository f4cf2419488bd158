//! Allocators declared in a config (`[[allocator]]`), never by editing
//! allocsoak: a Rust crate (`GlobalAlloc` or `allocator_api2`) or C
//! sources. [`Glue`] writes the build-local crate that links them into the
//! fuzz targets and registers each name with `shadow::allocator::declare`.

mod entry;
mod glue;
mod lock;
mod natives;

pub use entry::{Api, CSources, Declared};
pub use glue::{lock_file_of, Glue};
