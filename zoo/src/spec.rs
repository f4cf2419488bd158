//! A zoo's spec, `bug` or `bug+bug+...`: the bugs it names, and the
//! allocator they are planted in when it names none.

use std::str::FromStr;

use super::Bug;

impl FromStr for Bug {
    type Err = String;
    fn from_str(s: &str) -> Result<Bug, String> {
        Bug::ALL.into_iter().find(|b| b.name() == s).ok_or_else(|| {
            let all: Vec<_> = Bug::ALL.iter().map(|b| b.name()).collect();
            format!("unknown zoo bug `{s}`; expected one of {}", all.join(", "))
        })
    }
}

/// The allocator `zoo:<bugs>` (no `@<base>`) plants its bugs in: the
/// first bug's [`Bug::base`], `system` if the spec does not parse (the
/// zoo then says why).
pub fn default_base(spec: &str) -> &'static str {
    parse_bugs(spec)
        .ok()
        .and_then(|bugs| bugs.first().map(|b| b.base()))
        .unwrap_or("system")
}

/// Parses `bug` or `bug+bug+...`.
pub fn parse_bugs(spec: &str) -> Result<Vec<Bug>, String> {
    spec.split('+').map(str::parse).collect()
}
