//! Allocator edges: the sizes, alignments and counts programs are built from.
//!
//! Each decoder picks a family (power of two, quarter-octave bin, threshold,
//! impossible, ...) and a few bits within it, so the fuzzer reaches a size
//! class boundary with two or three bytes instead of searching 2^64 values.

use arbitrary::Arbitrary;

/// The OS's page size: what the checks of huge blocks, of pages given
/// back and of the process's resident size count in.
pub fn page_size() -> usize {
    // SAFETY: `sysconf` takes no pointers and `_SC_PAGESIZE` is a valid name.
    unsafe { libc::sysconf(libc::_SC_PAGESIZE) }.max(1) as usize
}

/// Largest alignment a program asks for (4 MiB).
pub const MAX_ALIGN: usize = 4 << 20;

/// Largest possible request a program makes; larger possible ones are skipped.
pub const MAX_BLOCK: usize = 64 << 20;

/// Every size at or above this can never be served on a 64-bit machine, so a
/// request for it must fail cleanly. (Anything this close to `isize::MAX`
/// exceeds every address space; Rust's `Layout` rejects the top of the band.)
pub const IMPOSSIBLE_FROM: usize = isize::MAX as usize - (1 << 32);

/// Thresholds where allocators switch strategy: page, small/large, 512 KiB
/// (mimalloc large), 4 MiB (segment / huge), 32 MiB.
const THRESHOLDS: [usize; 5] = [4 << 10, 64 << 10, 512 << 10, 4 << 20, 32 << 20];

const IMPOSSIBLE: [usize; 10] = [
    isize::MAX as usize,
    isize::MAX as usize - 1,
    isize::MAX as usize - 15,
    isize::MAX as usize - 4095,
    isize::MAX as usize - 65535,
    isize::MAX as usize + 1,
    usize::MAX,
    usize::MAX - 15,
    usize::MAX - 4095,
    1 << 63 | 1 << 62,
];

#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum Delta {
    Zero,
    Minus,
    Plus,
}

impl Delta {
    fn apply(self, n: usize) -> usize {
        match self {
            Delta::Zero => n,
            Delta::Minus => n.saturating_sub(1),
            Delta::Plus => n + 1,
        }
    }
}

/// A requested size, by family.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum ArbSize {
    /// 0..=255 exactly: the tiny classes and size-0 requests.
    Small(u8),
    /// 16 * k ± 1 up to 4 KiB: 8- and 16-byte boundaries.
    Word(u8, Delta),
    /// 2^e ± 1, 1 B to 64 MiB.
    Pow2(u8, Delta),
    /// Quarter-octave bin edges 2^e + q·2^(e-2), ± 1.
    Quarter(u8, u8, Delta),
    /// 4 KiB, 64 KiB, 512 KiB, 4 MiB, 32 MiB, ± 1.
    Threshold(u8, Delta),
    /// Near `isize::MAX` or `usize::MAX`, which must fail (half the
    /// bytes), or huge (the other half): above
    /// [`MAX_BLOCK`] and below [`IMPOSSIBLE_FROM`], 2^32 and
    /// a little either side (a size truncated to 32 bits), and 2^e ± 1 for
    /// 64 MiB to 2^62 (a header added to it, or rounded up, overflows near
    /// the top), 64 to 256 MiB as often as all the rest. The executor asks
    /// for a huge size and touches three of its pages (docs/targets.md).
    Impossible(u8, Delta),
    /// A size the program asked for before: a second block of the same
    /// class, where free-list and reuse bugs live.
    Recent(u8),
    /// Anywhere inside an octave, 256 B to 64 MiB: the byte picks the
    /// octave [2^e, 2^(e+1)), the `u32` the offset in it, so a size class
    /// is reached at its interior too (300 or 1000 bytes, or 5,000,000),
    /// not only at the edges the other families name (each within 1 of a
    /// multiple of 64 KiB above 4 MiB).
    Within(u8, u32),
}

/// Offsets from 2^32 a huge request takes: what a 32-bit size field
/// truncates to a tiny, a small or a page-sized block.
const AROUND_4G: [isize; 8] = [-4096, -16, -1, 0, 1, 16, 4096, 65536];

/// The last few sizes a program decoded, for [`ArbSize::Recent`].
#[derive(Default)]
pub struct History {
    sizes: [usize; 8],
    len: usize,
}

impl History {
    fn push(&mut self, size: usize) {
        self.sizes[self.len % self.sizes.len()] = size;
        self.len += 1;
    }

    /// The last size for half of all `k` (a block like the one just made is
    /// the likeliest to meet it in a free list), else an older one.
    fn recent(&self, k: u8) -> Option<usize> {
        let n = self.len.min(self.sizes.len());
        if n == 0 {
            return None;
        }
        let back = if k < 128 { 0 } else { usize::from(k) % n };
        Some(self.sizes[(self.len - 1 - back) % self.sizes.len()])
    }
}

impl ArbSize {
    pub fn resolve(self, history: &mut History) -> usize {
        let size = match self {
            ArbSize::Small(n) => n.into(),
            ArbSize::Word(k, d) => d.apply(16 * usize::from(k)),
            ArbSize::Pow2(e, d) => d.apply(1 << exponent(e, 0, 26)),
            ArbSize::Quarter(e, q, d) => {
                let e = exponent(e, 3, 25);
                d.apply((1 << e) + usize::from(1 + q % 3) * (1 << (e - 2)))
            }
            ArbSize::Threshold(i, d) => d.apply(THRESHOLDS[usize::from(i) % THRESHOLDS.len()]),
            ArbSize::Impossible(i, _) if i < 128 => IMPOSSIBLE[usize::from(i) % IMPOSSIBLE.len()],
            ArbSize::Impossible(b, d) => huge(b - 128, d),
            ArbSize::Recent(k) => history.recent(k).unwrap_or(usize::from(k)),
            ArbSize::Within(e, offset) => {
                let low = 1usize << exponent(e, 8, 25);
                low + offset as usize % low
            }
        };
        history.push(size);
        size
    }
}

/// A huge size from a byte in 0..128: around 2^32 for a third of them;
/// else 2^e ± 1, for e in 26..=28 (64 to 256 MiB: what an ASan build's
/// `system` serves, and what a realloc of the program's kept huge block
/// may copy) from the lower half of the bytes, for e in 26..=62 from the
/// upper half.
fn huge(b: u8, d: Delta) -> usize {
    match (b % 3, b < 64) {
        (0, _) => (1usize << 32).wrapping_add_signed(AROUND_4G[usize::from(b / 3) % 8]),
        (_, true) => d.apply(1 << (26 + u32::from(b / 3) % 3)),
        (_, false) => d.apply(1 << (26 + u32::from(b) % 37)),
    }
}

/// A requested alignment.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum ArbAlign {
    /// No alignment beyond what the allocator gives anyway (1).
    Natural,
    /// 2^k for k in 0..=22: 1 B to 4 MiB.
    Pow2(u8),
    /// size == align == 2^k (overrides the size).
    SizeEqAlign(u8),
}

/// An exponent in `lo..=hi` from one byte, mostly at most 12 (4 KiB): big
/// blocks cost the allocator and the OS far more per op (mmap, page faults,
/// sanitizer shadow), so they come one in eight and the run stays fast.
fn exponent(byte: u8, lo: u32, hi: u32) -> u32 {
    let b = u32::from(byte);
    let small_hi = 12.max(lo);
    match b < 224 {
        true => lo + b % (small_hi - lo + 1),
        false => small_hi + 1 + b % (hi - small_hi),
    }
}

/// Resolves a size and alignment pair; `SizeEqAlign` ties them together.
pub fn size_align(size: ArbSize, align: ArbAlign, history: &mut History) -> (usize, usize) {
    match align {
        ArbAlign::Natural => (size.resolve(history), 1),
        ArbAlign::Pow2(k) => {
            // A huge block is page-aligned anyway: an alignment it asks
            // for is a page to 4 MiB (what only over-aligned huge blocks
            // and their aligned reallocs exercise).
            let size = size.resolve(history);
            match size > MAX_BLOCK {
                true => (size, 1 << (12 + u32::from(k) % 11)),
                false => (size, 1 << exponent(k, 0, 22)),
            }
        }
        ArbAlign::SizeEqAlign(k) => {
            let n = 1 << exponent(k, 0, 22);
            (n, n)
        }
    }
}

/// A bulk op's block count from one byte: 2^k - 1, 2^k or 2^k + 1, around
/// the block counts of allocator pages and slabs. Mostly 16 to 512 (a
/// jemalloc slab or thread cache); one byte in eight 1024 to 4096 (a
/// mimalloc page of the smallest classes), which cost more to fill.
pub fn bulk_count(byte: u8) -> usize {
    let k = match byte < 224 {
        true => 4 + u32::from(byte) % 6,
        false => 10 + u32::from(byte) % 3,
    };
    match (byte / 6) % 3 {
        0 => (1 << k) - 1,
        1 => 1 << k,
        _ => (1 << k) + 1,
    }
}

/// A calloc element count, chosen to make `count * size` overflow often.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum ArbCount {
    Small(u8),
    /// The smallest count that overflows, plus k.
    JustOverflows(u8),
    /// The largest count that does not overflow.
    JustFits,
    Max,
    Pow32,
}

impl ArbCount {
    pub fn resolve(self, size: usize) -> usize {
        let max_fit = usize::MAX.checked_div(size).unwrap_or(usize::MAX);
        match self {
            ArbCount::Small(n) => n.into(),
            ArbCount::JustOverflows(k) => max_fit.saturating_add(1 + usize::from(k)),
            ArbCount::JustFits => max_fit,
            ArbCount::Max => usize::MAX,
            ArbCount::Pow32 => 1 << 32,
        }
    }
}

/// The new size of a realloc, relative to the block's current requested size
/// where that is the interesting edge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum NewSize {
    Exact(usize),
    Same,
    PlusOne,
    MinusOne,
    Double,
    Half,
    /// Realloc to 0: frees or returns a minimal block, depending on the API.
    Zero,
}

impl NewSize {
    /// The concrete size for a block whose requested size is `old`.
    pub fn resolve(self, old: usize) -> usize {
        match self {
            NewSize::Exact(n) => n,
            NewSize::Same => old,
            NewSize::PlusOne => old.saturating_add(1),
            NewSize::MinusOne => old.saturating_sub(1),
            NewSize::Double => old.saturating_mul(2).max(1),
            NewSize::Half => old / 2,
            NewSize::Zero => 0,
        }
    }
}

/// A realloc target size, as decoded.
#[derive(Arbitrary, Clone, Copy, Debug)]
pub enum ArbNewSize {
    Exact(ArbSize),
    Same,
    PlusOne,
    MinusOne,
    Double,
    Half,
    Zero,
}

impl ArbNewSize {
    pub fn resolve(self, history: &mut History) -> NewSize {
        match self {
            ArbNewSize::Exact(s) => NewSize::Exact(s.resolve(history)),
            ArbNewSize::Same => NewSize::Same,
            ArbNewSize::PlusOne => NewSize::PlusOne,
            ArbNewSize::MinusOne => NewSize::MinusOne,
            ArbNewSize::Double => NewSize::Double,
            ArbNewSize::Half => NewSize::Half,
            ArbNewSize::Zero => NewSize::Zero,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn within_stays_inside_its_octave_and_reaches_between_the_edges() {
        let h = &mut History::default();
        for e in 0..=255u8 {
            for offset in [0, 1, 44, 1 << 20, u32::MAX] {
                let size = ArbSize::Within(e, offset).resolve(h);
                let low = 1usize << exponent(e, 8, 25);
                assert!(
                    (low..2 * low).contains(&size),
                    "{size} outside [{low}, {})",
                    2 * low
                );
            }
        }
        // 300: no edge family names it (16·k ± 1, 2^e ± 1, quarter octaves).
        assert_eq!(ArbSize::Within(0, 44).resolve(h), 300);
        // 233: the top octave, [32 MiB, 64 MiB).
        assert_eq!(ArbSize::Within(233, 1 << 20).resolve(h), 33 << 20);
    }
}
