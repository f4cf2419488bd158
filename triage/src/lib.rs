//! Triage: the crash pipeline's stages after a signature (`report`):
//! replaying an input on a fuzz binary and rendering what it shows.
//!
//! - [`replay::Replayer`]: one input replayed on a fuzz binary.
//! - [`render::program_text`]: the op program with the failing op marked.

#![deny(missing_docs)]

pub mod render;
pub mod replay;
