//! The parts a soak still builds beside its slices ([`Unbuilt`]), and
//! which of them a slot runs: what the soak's context holds, below the
//! builder that empties it (`running/build.rs`).

use std::collections::HashSet;
use std::sync::atomic::Ordering;
use std::sync::Mutex;

use crate::engines::project::{Build, Part};
use crate::engines::Engine;
use crate::foundation::config::Slot;
use crate::foundation::lock::lock;

/// The fuzz binary `slot` runs: its target's in its allocator's build
/// (a honggfuzz slot's findings are replayed on it too).
pub(crate) fn fuzz_part(slot: &Slot) -> Part {
    Part::Fuzz(Build::for_allocator(&slot.allocator), slot.target)
}

/// Whether `slot` runs `part`: its [`fuzz_part`], and honggfuzz's
/// binaries (with jemalloc or without) for a honggfuzz slot.
fn needs(slot: &Slot, part: &Part) -> bool {
    match part {
        Part::Honggfuzz { .. } => slot.engine == Engine::Honggfuzz.name(),
        _ => *part == fuzz_part(slot),
    }
}

/// The parts a soak still builds beside its slices.
pub struct Unbuilt {
    parts: Mutex<HashSet<Part>>,
    /// Whether the builder still runs (a part left once it ended did not
    /// build).
    building: std::sync::atomic::AtomicBool,
}

impl Unbuilt {
    pub fn new(parts: &[Part]) -> Unbuilt {
        Unbuilt {
            parts: Mutex::new(parts.iter().copied().collect()),
            building: (!parts.is_empty()).into(),
        }
    }

    /// Whether every part `slot` runs is built.
    pub fn ready(&self, slot: &Slot) -> bool {
        !lock(&self.parts).iter().any(|p| needs(slot, p))
    }

    pub fn is_built(&self, part: Part) -> bool {
        !lock(&self.parts).contains(&part)
    }

    /// The builder ended: what is left did not build.
    pub(super) fn ended(&self) {
        self.building.store(false, Ordering::Relaxed);
    }

    /// Whether the builder still runs.
    pub fn building(&self) -> bool {
        self.building.load(Ordering::Relaxed)
    }

    /// What is left to build, for the progress print.
    pub fn left(&self) -> Vec<Part> {
        let mut left: Vec<Part> = lock(&self.parts).iter().copied().collect();
        left.sort_by_key(|p| p.to_string());
        left
    }

    pub(super) fn built(&self, part: Part) {
        lock(&self.parts).remove(&part);
    }
}
