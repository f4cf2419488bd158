//! The fuzz engine a slot names (`engine = "libfuzzer"`): the name a
//! config and the store use. What each engine runs and reads back is the
//! engines room's own.

use anyhow::{bail, Result};

/// A fuzz engine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Engine {
    /// libFuzzer through cargo-fuzz, with ASan: the default.
    LibFuzzer,
    /// honggfuzz through honggfuzz-rs, persistent mode, no sanitizer.
    Honggfuzz,
}

impl Engine {
    pub const ALL: [Engine; 2] = [Engine::LibFuzzer, Engine::Honggfuzz];

    /// The name a config and the store use.
    pub fn name(self) -> &'static str {
        match self {
            Engine::LibFuzzer => "libfuzzer",
            Engine::Honggfuzz => "honggfuzz",
        }
    }

    /// The engine of a name; `Err` is a one-line message naming the known ones.
    pub fn parse(name: &str) -> Result<Engine> {
        match Engine::ALL.into_iter().find(|e| e.name() == name) {
            Some(e) => Ok(e),
            None => {
                let names: Vec<&str> = Engine::ALL.iter().map(|e| e.name()).collect();
                bail!("unknown engine `{name}`; use one of: {}", names.join(", "))
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_a_bad_one_says_what_is_known() {
        for e in Engine::ALL {
            assert_eq!(Engine::parse(e.name()).unwrap(), e);
        }
        let e = Engine::parse("afl").unwrap_err().to_string();
        assert_eq!(e, "unknown engine `afl`; use one of: libfuzzer, honggfuzz");
    }
}
