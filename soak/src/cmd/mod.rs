//! The `allocsoak` binary's subcommands (`main.rs`'s `mod cmd`), one file
//! each: its arguments and what it does. `main` only parses and
//! dispatches; the work is in the `soak` library.

pub mod bench;
pub mod bisect;
pub mod build;
pub mod common;
pub mod compare;
pub mod coverage;
pub mod dash;
pub mod drift;
pub mod fuzz;
pub mod instrumentation;
pub mod miri;
pub mod oss_fuzz;
pub mod print;
pub mod quick;
pub mod repro;
pub mod soak;
pub mod status;
pub mod trace;
pub mod triage;
pub mod zoo;
