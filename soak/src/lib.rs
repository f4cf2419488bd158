//! allocsoak's runner and soak daemon.
//!
//! - [`project::Project`]: where the fuzz package, seeds and builds live;
//!   with a config's own allocators ([`declared`]), its generated glue;
//!   [`provenance`]: what each allocator name runs in a build.
//! - [`libfuzzer::Run`]: one libFuzzer run on an allocator;
//!   [`honggfuzz::Run`] one honggfuzz run in a slice; [`engine::Engine`]
//!   reads either's progress and findings back in the same terms.
//! - [`daemon`]: the soak: [`state::StateDir`] and its [`store::Store`],
//!   [`scheduler`] draws, [`slice`]s merged by [`corpus`] and filed by
//!   [`intake`] (a crash that needs the inputs before it through
//!   [`sequence`], its program made small by [`minimize`]) into pages
//!   ([`group_page`]), progress by [`status`], systemd by [`notify`].
//! - [`groups`], [`repro`]: triage of what a soak filed: list, verify,
//!   export, replay; [`import`] files a crash found elsewhere.
//! - [`rss`]: the soak's memory half, RSS drift workers and their
//!   findings.
//! - [`quick`]: the CI gate, a soak that runs each slot once and fails on
//!   what is new.
//! - [`zoo`], [`bench`], [`pass`]: the planted-bug proof, the speed
//!   table, a short fuzz pass.
//! - [`coverage`]: which of an allocator's own code the corpora ran;
//!   [`bisect`]: which commit of a declared allocator made a group.
//!
//! The `allocsoak` binary is a thin CLI over these.

pub mod bench;
pub mod bisect;
pub mod config;
pub mod corpus;
pub mod coverage;
pub mod daemon;
pub mod dash;
pub mod declared;
pub mod engine;
pub mod group_page;
pub mod groups;
pub mod honggfuzz;
pub mod import;
pub mod instrumentation;
pub mod intake;
pub mod libfuzzer;
pub mod minimize;
pub mod notify;
pub mod pass;
pub mod pending;
pub mod project;
pub mod provenance;
pub mod quick;
pub mod repro;
pub mod rss;
pub mod running;
pub mod scheduler;
pub mod sequence;
pub mod slice;
pub mod state;
pub mod status;
pub mod store;
pub mod zoo;
