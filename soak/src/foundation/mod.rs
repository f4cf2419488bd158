//! The foundation: what every other room stands on, and which imports
//! none of them. The state dir ([`state`]) and its SQLite store
//! ([`store`]), the configuration ([`config`]) with the allocators it
//! declares ([`declared`]) and the engine names a slot may use, cargo's
//! view of the fuzz builds' platform ([`cargo`]), systemd's readiness
//! and watchdog ([`notify`]), and the rule for a poisoned lock
//! ([`lock`]).

pub mod cargo;
pub mod config;
pub mod declared;
pub mod lock;
pub mod notify;
pub mod state;
pub mod store;
