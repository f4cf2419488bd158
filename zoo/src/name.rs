//! A zoo allocator by its name, `zoo:<bug>[+<bug>...][@<base>]`: what
//! `shadow::allocator::by_name` calls once the zoo is registered.

use std::sync::OnceLock;

use shadow::allocator::Allocator;

use super::{default_base, Bug, Zoo};

/// Lets `shadow::allocator::by_name` make `zoo:` names (a second call
/// does nothing).
pub fn register() {
    static NAMES: OnceLock<Vec<&'static str>> = OnceLock::new();
    let names = NAMES.get_or_init(|| Bug::ALL.iter().map(|b| b.name()).collect());
    shadow::allocator::declare_zoo(make, names);
}

/// A zoo spec `<bug>[+<bug>...][@<base>]` (the name without `zoo:`) as
/// its bugs and its base's name: the one given, else the first bug's.
pub fn split_spec(spec: &str) -> (&str, &str) {
    spec.split_once('@').unwrap_or((spec, default_base(spec)))
}

/// `zoo:<bug>[+<bug>...][@<base>]`, its base made by name.
fn make(name: &str) -> Result<Box<dyn Allocator>, String> {
    let spec = name.strip_prefix("zoo:").unwrap_or(name);
    let (bugs, base) = split_spec(spec);
    Ok(Box::new(Zoo::new(
        name,
        bugs,
        shadow::allocator::by_name(base)?,
    )?))
}
