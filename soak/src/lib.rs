//! allocsoak's runner and soak daemon.
//!
//! `soak/src` is arranged in rooms, one folder per subsystem, each
//! importing only the rooms below it (`soak/tests/rooms.rs` holds the
//! order), bottom → top:
//!
//! - [`foundation`]: the state dir and its store, the config with its
//!   declared allocators, systemd's notify.
//! - [`engines`]: the project layout and builds, libFuzzer and honggfuzz
//!   runs read back in the same terms, instrumentation and provenance.
//! - [`pipeline`]: the crash pipeline, engine outcome → intake → group →
//!   page, with history sequences, minimization, repro, import and the
//!   groups triage lists and exports.
//! - [`rss`]: the soak's memory half, RSS drift workers and their
//!   findings, filed through the pipeline.
//! - [`running`]: the soak itself: daemon, scheduler, slices, pending
//!   finds, corpora, status, the known groups verified.
//! - [`coverage`]: which of an allocator's own code the corpora ran;
//!   [`tools`]: the planted-bug proof, the speed table, a short fuzz
//!   pass, bisect.
//! - [`quick`]: the CI gate, a soak that runs each slot once and fails on
//!   what is new; [`dash`]: the read-only dashboard.
//!
//! The `allocsoak` binary is a thin CLI over these.

pub mod coverage;
pub mod dash;
pub mod engines;
pub mod foundation;
pub mod pipeline;
pub mod quick;
pub mod rss;
pub mod running;
pub mod tools;
