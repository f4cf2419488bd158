//! Per-block fill patterns and the bounded layout they are written in.
//!
//! Byte `i` of a block with seed `s` is a function of `(s, i)` only, so any
//! subset of a block can be checked, a block moved by realloc keeps the same
//! pattern at the same offsets, and two blocks never share a pattern (a block
//! handed out twice, or a free-list link written into it, shows as a
//! mismatch). Every range is asked of ASan first, where the fuzz binary has
//! it ([`crate::sanitizer::accessible`]). Blocks up to [`FULL_CHECK`] bytes carry the pattern everywhere;
//! larger ones at the head, the tail and [`SAMPLES`] strided windows, which
//! keeps a 32 MiB block as cheap to check as a 4 KiB one.

/// Blocks up to this size are filled and checked in full.
pub const FULL_CHECK: usize = 4096;
/// Bytes at each end of a large block that are filled and checked.
const EDGE: usize = 1024;
/// Number of strided windows between the ends of a large block.
pub const SAMPLES: usize = 32;
const WINDOW: usize = 64;

/// A mismatch: offset into the block, expected byte, found byte.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Mismatch {
    pub offset: usize,
    pub expected: u8,
    pub found: u8,
}

#[inline]
fn word(seed: u64, index: usize) -> u64 {
    (seed ^ index as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ seed.rotate_left(17)
}

/// The expected byte at `offset` of a block with `seed`.
#[inline]
pub fn byte(seed: u64, offset: usize) -> u8 {
    word(seed, offset / 8).to_le_bytes()[offset % 8]
}

/// The ranges of a `len`-byte block that carry the pattern, in order.
pub fn layout(len: usize) -> impl Iterator<Item = (usize, usize)> {
    let full = len <= FULL_CHECK;
    let head = if full { (0, len) } else { (0, EDGE) };
    let stride = (len / (SAMPLES + 1)) & !7;
    let windows = (1..=SAMPLES)
        .filter(move |_| !full)
        .map(move |k| (k * stride, k * stride + WINDOW))
        .filter(move |&(a, b)| a >= EDGE && b <= len - EDGE);
    let tail = (!full).then(|| (len - EDGE, len));
    std::iter::once(head).chain(windows).chain(tail)
}

/// Writes the pattern over `[from, to)` of the block at `base`.
///
/// # Safety
/// `base + from .. base + to` must be writable.
pub unsafe fn fill_range(base: *mut u8, from: usize, to: usize, seed: u64) {
    let to = crate::sanitizer::accessible(base, from, to);
    let mut i = from;
    while i < to && i % 8 != 0 {
        *base.add(i) = byte(seed, i);
        i += 1;
    }
    while i + 8 <= to {
        (base.add(i) as *mut u64).write_unaligned(word(seed, i / 8).to_le());
        i += 8;
    }
    while i < to {
        *base.add(i) = byte(seed, i);
        i += 1;
    }
}

/// Checks the pattern over `[from, to)`; returns the first mismatch.
///
/// # Safety
/// `base + from .. base + to` must be readable.
pub unsafe fn check_range(base: *const u8, from: usize, to: usize, seed: u64) -> Option<Mismatch> {
    let to = crate::sanitizer::accessible(base, from, to);
    let mut i = from;
    while i + 8 <= to && i % 8 == 0 {
        let found = (base.add(i) as *const u64).read_unaligned();
        if found != word(seed, i / 8).to_le() {
            break;
        }
        i += 8;
    }
    while i < to {
        let (expected, found) = (byte(seed, i), *base.add(i));
        if expected != found {
            return Some(Mismatch {
                offset: i,
                expected,
                found,
            });
        }
        i += 1;
        if i % 8 == 0 && i + 8 <= to {
            return check_range(base, i, to, seed);
        }
    }
    None
}

/// Fills the layout of a `len`-byte block.
///
/// # Safety
/// The block must be writable for `len` bytes.
pub unsafe fn fill(base: *mut u8, len: usize, seed: u64) {
    for (a, b) in layout(len) {
        fill_range(base, a, b, seed);
    }
}

/// Checks the layout of a `len`-byte block, limited to its first `limit`
/// bytes (the common prefix after a realloc).
///
/// # Safety
/// The block must be readable for `min(len, limit)` bytes.
pub unsafe fn check(base: *const u8, len: usize, limit: usize, seed: u64) -> Option<Mismatch> {
    layout(len)
        .map(|(a, b)| (a.min(limit), b.min(limit)))
        .find_map(|(a, b)| check_range(base, a, b, seed))
}

/// Checks that the layout of a `len`-byte block reads zero.
///
/// # Safety
/// The block must be readable for `len` bytes.
pub unsafe fn check_zero(base: *const u8, len: usize) -> Option<Mismatch> {
    for (a, b) in layout(len) {
        for i in a..crate::sanitizer::accessible(base, a, b) {
            let found = *base.add(i);
            if found != 0 {
                return Some(Mismatch {
                    offset: i,
                    expected: 0,
                    found,
                });
            }
        }
    }
    None
}

/// Compares two blocks over the layout of `len` bytes; returns the first
/// offset where they differ, with `a`'s byte as expected.
///
/// # Safety
/// Both blocks must be readable for `len` bytes.
pub unsafe fn compare(a: *const u8, b: *const u8, len: usize) -> Option<Mismatch> {
    for (from, to) in layout(len) {
        let to = crate::sanitizer::accessible(a, from, to);
        let to = crate::sanitizer::accessible(b, from, to);
        let (sa, sb) = (
            std::slice::from_raw_parts(a.add(from), to - from),
            std::slice::from_raw_parts(b.add(from), to - from),
        );
        if sa != sb {
            let i = sa.iter().zip(sb).position(|(x, y)| x != y).unwrap_or(0);
            return Some(Mismatch {
                offset: from + i,
                expected: sa[i],
                found: sb[i],
            });
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn layout_covers_small_blocks_fully_and_bounds_large_ones() {
        assert_eq!(layout(100).collect::<Vec<_>>(), vec![(0, 100)]);
        assert_eq!(layout(0).collect::<Vec<_>>(), vec![(0, 0)]);
        let big: Vec<_> = layout(32 << 20).collect();
        let covered: usize = big.iter().map(|(a, b)| b - a).sum();
        assert!(covered <= 2 * EDGE + SAMPLES * WINDOW, "covered {covered}");
        assert_eq!(big.first(), Some(&(0, EDGE)));
        assert_eq!(big.last(), Some(&((32 << 20) - EDGE, 32 << 20)));
        assert!(
            big.windows(2).all(|w| w[0].1 <= w[1].0),
            "ranges overlap: {big:?}"
        );
    }

    #[test]
    fn check_finds_the_first_flipped_byte_at_any_offset() {
        for len in [1usize, 7, 8, 9, 63, 4096, 10_000, 1 << 20] {
            let mut buf = vec![0u8; len + 3];
            // Offset by one so unaligned word paths run too.
            let base = unsafe { buf.as_mut_ptr().add(1) };
            unsafe { fill(base, len, 42) };
            assert_eq!(unsafe { check(base, len, len, 42) }, None);
            for (a, b) in layout(len) {
                for off in [a, b - 1, (a + b) / 2] {
                    unsafe { *base.add(off) ^= 0x5a };
                    let m = unsafe { check(base, len, len, 42) }.expect("flip not found");
                    assert_eq!(m.offset, off, "len {len}");
                    unsafe { *base.add(off) ^= 0x5a };
                }
            }
            assert!(
                unsafe { check(base, len, len, 43) }.is_some(),
                "another seed must not match"
            );
        }
    }

    #[test]
    fn check_respects_the_prefix_limit() {
        let mut buf = vec![0u8; 100];
        unsafe { fill(buf.as_mut_ptr(), 100, 7) };
        buf[60] ^= 1;
        assert_eq!(unsafe { check(buf.as_ptr(), 100, 60, 7) }, None);
        assert_eq!(
            unsafe { check(buf.as_ptr(), 100, 61, 7) }.map(|m| m.offset),
            Some(60)
        );
    }
}
