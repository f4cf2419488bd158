//! The heap corruptions a hardened allocator promises to stop
//! ([`super::Allocator::stops`]), as the allocators' own death tests
//! require of their hardened builds (Scudo's `DeathCombined`, snmalloc's
//! `corruption_detection`, jemalloc's `double_free` and `safety_check`):
//! a clean return from one is the failure. The `attack` op makes one in a
//! forked child (`executor/attack.rs`), so the program's heap is never
//! touched.

use std::fmt;
use std::str::FromStr;

/// One heap corruption, made right after the child has taken a few blocks
/// of its size (a thread cache's worth, so the free goes where the
/// allocator keeps blocks of that size, not past a full cache).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Attack {
    /// A block freed, then freed again. Stopped: the process ends (a
    /// signal, an abort, an exit) or the allocator reports an error
    /// ([`super::Allocator::take_error`]).
    DoubleFree,
    /// A free of a pointer into zeroed memory the allocator never handed
    /// out (a mapping of the child's own). Stopped as a double free is.
    ForeignFree,
    /// A use after free: the first words of a freed block (the newest of
    /// two freed) overwritten with a pointer into memory the allocator
    /// never handed out, as ArcHeap's write-after-free does. The allocator
    /// may go on, but must never hand that memory out (the attack
    /// outcome ArcHeap calls an arbitrary chunk).
    FreedWrite,
    /// A free of a pointer two words inside a live block whose bytes are
    /// zero (snmalloc's and Scudo's death tests free one). Stopped as a
    /// double free is.
    InteriorFree,
    /// An overflow past a block's usable size into what follows it (the
    /// next chunk's header where the allocator keeps one there): the two
    /// words there grown as a chunk's size is grown (doubled, low bits
    /// kept), then the block after it freed, as ArcHeap's overflow does.
    /// The allocator may go on, but must never hand out a block that
    /// overlaps a live one (ArcHeap's overlapping chunks).
    Overflow,
    /// A live block's own header overwritten: the two words before it
    /// grown as a chunk's size is, then the block freed (the free trusts
    /// a size it did not check). Held as [`Attack::Overflow`] is.
    HeaderWrite,
}

/// The sizes an attack is made at (`executor/attack.rs`: 16 B, two words,
/// to 1 MiB), in classes of four a power of two: the decoder picks one
/// when the size it drew is outside them, and the fuzzer counts each
/// attack by its class (`executor/attack_seen.rs`).
pub mod sizes {
    /// The classes: four for each power of two from 16 B up to 1 MiB,
    /// and 1 MiB itself.
    pub const CLASSES: usize = 4 * (20 - 4) + 1;

    /// The class of `size` (sizes outside the range are counted at its ends).
    pub fn class_of(size: usize) -> usize {
        let size = size.clamp(16, 1 << 20);
        let log = size.ilog2() as usize;
        let quarter = (size >> (log - 2)) & 3;
        ((log - 4) * 4 + quarter).min(CLASSES - 1)
    }

    /// The smallest size of class `class` (mod [`CLASSES`]).
    pub fn first_of(class: usize) -> usize {
        let class = class % CLASSES;
        let base = 16usize << (class / 4);
        base + base / 4 * (class % 4)
    }
}

impl Attack {
    pub const ALL: [Attack; 6] = [
        Attack::DoubleFree,
        Attack::ForeignFree,
        Attack::FreedWrite,
        Attack::InteriorFree,
        Attack::Overflow,
        Attack::HeaderWrite,
    ];

    /// The name programs and configs use.
    pub fn name(self) -> &'static str {
        match self {
            Attack::DoubleFree => "double-free",
            Attack::ForeignFree => "foreign-free",
            Attack::FreedWrite => "freed-write",
            Attack::InteriorFree => "interior-free",
            Attack::Overflow => "overflow",
            Attack::HeaderWrite => "header-write",
        }
    }
}

impl fmt::Display for Attack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Attack {
    type Err = String;
    fn from_str(s: &str) -> Result<Attack, String> {
        Attack::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Attack::ALL.iter().map(|a| a.name()).collect();
                format!("unknown attack `{s}`; expected one of {}", names.join(", "))
            })
    }
}
