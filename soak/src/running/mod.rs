//! The running soak: the [`daemon`] boots it, the [`scheduler`] draws
//! the next slot, a [`slice`](mod@slice) runs one engine on it, whose finds wait in
//! [`pending`] for the crash pipeline and whose new inputs merge into a
//! [`corpus`]; with `--build` it [`build`]s what its slots run beside its
//! first slices ([`unbuilt`]: what is left); [`soak`] is what its workers share, [`status`] reads its
//! progress back, and [`verify`] replays the known groups at boot (and
//! for `triage verify`); [`miri`] replays its Rust allocators' programs
//! under Miri on a schedule. It stands on the RSS drift room (whose workers the
//! daemon starts), the pipeline, the engines and the foundation.

pub mod build;
pub mod corpus;
pub mod daemon;
pub mod miri;
pub mod pending;
pub mod scheduler;
pub mod slice;
pub mod soak;
pub mod status;
pub mod unbuilt;
pub mod verify;
