//! allocsoak's oracle: op programs decoded from fuzz input, run against an
//! allocator under test while a shadow heap checks every invariant.
//!
//! - [`Program`] ([`op`]): the op language; decodes from bytes, prints as
//!   text, parses back, emits a Rust `#[test]`.
//! - [`allocator::Allocator`]: the allocator under test, by name
//!   ([`allocator::by_name`]): `system`, `mimalloc`, `jemalloc`, `arena` (a
//!   fixed region, [`allocator::Allocator::arena`]), `dylib:…`, `zoo:<bug>`
//!   (the `zoo` crate, once it registers), and those a config declares ([`allocator::declare`]).
//! - [`Executor`] with [`model::ShadowHeap`]: runs a program, panics with an
//!   `allocsoak violation: <kind>: …` line ([`Violation`]) at the first
//!   broken invariant; [`guard`] turns a panic inside the allocator into
//!   one. `mt_ops`' race sections put several threads inside the
//!   allocator at once.
//! - [`harness`]: what the fuzz targets call, as the process's
//!   [`settings::Settings`] (the `ALLOCSOAK_*` variables) say.
//!
//! ```
//! let program: shadow::Program = "target alloc_ops\nalloc size=24 align=8\nrealloc slot=0 to=double\n"
//!     .parse()
//!     .unwrap();
//! shadow::run(&program, shadow::allocator::by_name("system").unwrap());
//! ```

pub mod allocator;
pub mod coverage;
pub mod diff;
pub mod edges;
pub mod ending;
pub mod executor;
pub mod findings;
pub mod guard;
pub mod harness;
pub mod history;
pub mod model;
pub mod op;
pub mod pattern;
pub mod poison;
pub mod resident;
pub mod sanitizer;
pub mod settings;
pub mod tally;
pub mod tolerance;
pub mod violation;
mod workers;
pub mod writer;

pub use executor::{Executor, Mode, Stats};
pub use op::{Op, Program, Target};
pub use violation::{Report, Violation};

/// Runs `program` against `alloc` with every check on; panics with an
/// `allocsoak violation:` line at the first broken invariant.
pub fn run(program: &Program, alloc: &'static dyn allocator::Allocator) -> Stats {
    harness::run_program(program, alloc, Mode::Checked)
}
