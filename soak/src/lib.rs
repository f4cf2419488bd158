//! allocsoak's runner: builds the fuzz targets ([`project::Project`]), runs
//! libFuzzer on an allocator ([`libfuzzer::Run`]), reads what it found
//! ([`finding::kind`]), and drives the zoo, the bench and short fuzz passes.
//! The `allocsoak` binary is a thin CLI over these.

pub mod bench;
pub mod finding;
pub mod instrumentation;
pub mod libfuzzer;
pub mod pass;
pub mod project;
pub mod zoo;
