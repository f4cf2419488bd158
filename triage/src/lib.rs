//! Triage: the crash pipeline's stages after a signature (`report`):
//! replaying an input on a fuzz binary and rendering what it shows.
//!
//! - [`replay::Replayer`]: inputs replayed on a fuzz binary, in order,
//!   in one process.
//! - [`budget::Budget`]: when a filing's replays must end.
//! - [`ddmin::ddmin`]: the few inputs of a sequence that still fail.
//! - [`minimize::minimize`]: a failing program minimized as a program.
//! - [`render::program_text`]: the op program with the failing op marked.

#![deny(missing_docs)]

pub mod budget;
pub mod ddmin;
pub mod minimize;
pub mod render;
pub mod replay;
