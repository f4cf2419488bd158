//! The crash pipeline: what an engine run found, filed one artifact at a
//! time, and what triage does with the groups. Data flows one way:
//! engine outcome → [`intake`] (replayed, with its history through
//! [`sequence`]; signed; minimized by [`minimize`] within a
//! [`triage::budget::Budget`])
//! → a group's folder with its [`record`] → its [`page`]. [`groups`]
//! lists and exports what was filed, [`repro`] replays one, [`import`]
//! files a crash found elsewhere; [`program`] reads an input as its op
//! program for all of them. It stands on the engines and the foundation.

pub mod groups;
pub mod import;
pub mod intake;
pub mod minimize;
pub mod page;
pub mod program;
pub mod record;
pub mod repro;
pub mod sequence;
