//! Per-block fill patterns and the bounded layout they are written in.
//!
//! Byte `i` of a block with seed `s` is a function of `(s, i)` only, so any
//! subset of a block can be checked, a block moved by realloc keeps the same
//! pattern at the same offsets, and two blocks never share a pattern (a block
//! handed out twice, or a free-list link written into it, shows as a
//! mismatch). Every range is asked of ASan first, where the fuzz binary has
//! it ([`crate::poison::accessible`]).
//!
//! Which bytes carry the pattern is the block's [`layout`], a function of
//! its length and seed, so filling a block and checking it later (or the
//! prefix realloc kept) see the same ranges. Blocks up to [`FULL_CHECK`]
//! bytes carry it everywhere, and so does one larger block in
//! [`WHOLE_ONE_IN`] (fewer past 1 MiB), picked by its seed; the others at
//! the head, the tail
//! and [`SAMPLES`] windows, one at a seed-chosen place in each of as many
//! equal strata. Every byte of a large block is thus checked in some
//! programs, while a 32 MiB block usually costs what a 4 KiB one does.

/// Blocks up to this size are filled and checked in full.
pub const FULL_CHECK: usize = 4096;
/// One block larger than [`FULL_CHECK`] in this many (by seed) is filled
/// and checked in full; of blocks over [`WHOLE_ONE_IN`] × 64 KiB, fewer, so
/// that a whole check costs a large block 64 KiB on average.
pub const WHOLE_ONE_IN: u64 = 16;
const WHOLE_BYTES: usize = 64 << 10;
/// Bytes at each end of a large block that are filled and checked.
const EDGE: usize = 1024;
/// Number of windows between the ends of a large block.
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

/// splitmix64's finalizer: the seed's `k`-th draw.
#[inline]
fn draw(seed: u64, k: u64) -> u64 {
    let mut z = seed ^ k.wrapping_mul(0xD1B5_4A32_D192_ED03);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// Whether a block carries the pattern everywhere.
pub fn is_whole(len: usize, seed: u64) -> bool {
    let one_in = WHOLE_ONE_IN.max((len / WHOLE_BYTES) as u64);
    len <= FULL_CHECK || draw(seed, u64::MAX).is_multiple_of(one_in)
}

/// The ranges of a `len`-byte block with `seed` that carry the pattern,
/// in order, not overlapping. A window starts at a seed-chosen offset of
/// its stratum and wraps to the stratum's start, so each byte of a large
/// block is in a window for the same share of seeds.
pub fn layout(len: usize, seed: u64) -> impl Iterator<Item = (usize, usize)> {
    let full = is_whole(len, seed);
    let head = if full { (0, len) } else { (0, EDGE) };
    let middle = if full { 0 } else { len - 2 * EDGE };
    let stride = middle / SAMPLES;
    let windows = (0..SAMPLES)
        .filter(move |_| !full && stride >= WINDOW)
        .flat_map(move |k| {
            let start = EDGE + k * stride;
            // The last stratum takes the remainder, up to the tail.
            let end = if k == SAMPLES - 1 {
                len - EDGE
            } else {
                start + stride
            };
            let a = start + (draw(seed, k as u64) % (end - start) as u64) as usize;
            match (a + WINDOW).checked_sub(end) {
                None | Some(0) => [Some((a, a + WINDOW)), None],
                Some(wrapped) => [Some((start, start + wrapped)), Some((a, end))],
            }
        })
        .flatten();
    let tail = (!full).then(|| (len - EDGE, len));
    std::iter::once(head).chain(windows).chain(tail)
}

/// Writes the pattern over `[from, to)` of the block at `base`.
///
/// # Safety
/// `base + from .. base + to` must be writable.
pub unsafe fn fill_range(base: *mut u8, from: usize, to: usize, seed: u64) {
    // SAFETY: `[from, to)` is what this fn writes, writable (its contract).
    let to = unsafe { crate::poison::accessible(base, from, to) };
    let mut i = from;
    while i < to && !i.is_multiple_of(8) {
        // SAFETY: `from <= i < to`, in the writable range (this fn's contract).
        unsafe { *base.add(i) = byte(seed, i) };
        i += 1;
    }
    while i + 8 <= to {
        // SAFETY: `i + 8 <= to`: eight writable bytes; the write is unaligned.
        unsafe { (base.add(i) as *mut u64).write_unaligned(word(seed, i / 8).to_le()) };
        i += 8;
    }
    while i < to {
        // SAFETY: `from <= i < to`, in the writable range (this fn's contract).
        unsafe { *base.add(i) = byte(seed, i) };
        i += 1;
    }
}

/// Checks the pattern over `[from, to)`; returns the first mismatch.
///
/// # Safety
/// `base + from .. base + to` must be readable.
pub unsafe fn check_range(base: *const u8, from: usize, to: usize, seed: u64) -> Option<Mismatch> {
    // SAFETY: `[from, to)` is what this fn reads, readable (its contract).
    let to = unsafe { crate::poison::accessible(base, from, to) };
    let mut i = from;
    while i + 8 <= to && i.is_multiple_of(8) {
        // SAFETY: `i + 8 <= to`: eight readable bytes; the read is unaligned.
        let found = unsafe { (base.add(i) as *const u64).read_unaligned() };
        if found != word(seed, i / 8).to_le() {
            break;
        }
        i += 8;
    }
    while i < to {
        // SAFETY: `from <= i < to`, in the readable range (this fn's contract).
        let (expected, found) = (byte(seed, i), unsafe { *base.add(i) });
        if expected != found {
            return Some(Mismatch {
                offset: i,
                expected,
                found,
            });
        }
        i += 1;
        if i.is_multiple_of(8) && i + 8 <= to {
            // SAFETY: `[i, to)` is inside `[from, to)`, readable (this fn's contract).
            return unsafe { check_range(base, i, to, seed) };
        }
    }
    None
}

/// Fills the layout of a `len`-byte block.
///
/// # Safety
/// The block must be writable for `len` bytes.
pub unsafe fn fill(base: *mut u8, len: usize, seed: u64) {
    for (a, b) in layout(len, seed) {
        // SAFETY: `layout` gives ranges inside `[0, len)`, writable (this fn's contract).
        unsafe { fill_range(base, a, b, seed) };
    }
}

/// Checks the layout of a `len`-byte block, limited to its first `limit`
/// bytes (the common prefix after a realloc).
///
/// # Safety
/// The block must be readable for `min(len, limit)` bytes.
pub unsafe fn check(base: *const u8, len: usize, limit: usize, seed: u64) -> Option<Mismatch> {
    layout(len, seed)
        .map(|(a, b)| (a.min(limit), b.min(limit)))
        // SAFETY: each range is inside `[0, min(len, limit))`, readable (this fn's contract).
        .find_map(|(a, b)| unsafe { check_range(base, a, b, seed) })
}

/// Checks that the layout of a `len`-byte block with `seed` reads zero
/// from offset `from` on (0 for a fresh block; the old usable size after
/// a zeroed realloc).
///
/// # Safety
/// The block must be readable for `len` bytes.
pub unsafe fn check_zero(base: *const u8, len: usize, from: usize, seed: u64) -> Option<Mismatch> {
    layout(len, seed)
        .filter(|&(_, b)| b > from)
        // SAFETY: `layout` gives ranges inside `[0, len)`, readable (this fn's contract).
        .find_map(|(a, b)| unsafe { check_zero_range(base, a.max(from), b) })
}

/// Checks that `[from, to)` of the block at `base` reads zero.
///
/// # Safety
/// `base + from .. base + to` must be readable.
pub unsafe fn check_zero_range(base: *const u8, from: usize, to: usize) -> Option<Mismatch> {
    // SAFETY: `[from, to)` is what this fn reads, readable (its contract).
    let to = unsafe { crate::poison::accessible(base, from, to) };
    for i in from..to {
        // SAFETY: `from <= i < to`, in the readable range (this fn's contract).
        let found = unsafe { *base.add(i) };
        if found != 0 {
            return Some(Mismatch {
                offset: i,
                expected: 0,
                found,
            });
        }
    }
    None
}

/// Compares two blocks over the layout of `len` bytes with `seed`;
/// returns the first offset where they differ, with `a`'s byte as
/// expected.
///
/// # Safety
/// Both blocks must be readable for `len` bytes.
pub unsafe fn compare(a: *const u8, b: *const u8, len: usize, seed: u64) -> Option<Mismatch> {
    for (from, to) in layout(len, seed) {
        // SAFETY: `layout` gives ranges inside `[0, len)`, readable in both
        // blocks (this fn's contract); `from <= to` after both clamps.
        let (sa, sb) = unsafe {
            let to = crate::poison::accessible(a, from, to);
            let to = crate::poison::accessible(b, from, to);
            (
                std::slice::from_raw_parts(a.add(from), to - from),
                std::slice::from_raw_parts(b.add(from), to - from),
            )
        };
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
        assert_eq!(layout(100, 1).collect::<Vec<_>>(), vec![(0, 100)]);
        assert_eq!(layout(0, 1).collect::<Vec<_>>(), vec![(0, 0)]);
        for len in [4097, 10_000, 1 << 20, 32 << 20] {
            for seed in (0..64).filter(|&s| !is_whole(len, s)) {
                let big: Vec<_> = layout(len, seed).collect();
                let covered: usize = big.iter().map(|(a, b)| b - a).sum();
                assert_eq!(
                    covered,
                    2 * EDGE + SAMPLES * WINDOW,
                    "len {len} seed {seed}"
                );
                assert_eq!(big.first(), Some(&(0, EDGE)));
                assert_eq!(big.last(), Some(&(len - EDGE, len)));
                assert!(
                    big.windows(2).all(|w| w[0].1 <= w[1].0),
                    "ranges overlap: {big:?}"
                );
            }
        }
    }

    #[test]
    fn over_many_blocks_every_byte_of_a_large_one_is_checked() {
        // A hole of 16 bytes anywhere in a 1 MiB block: the seeds that
        // check it, out of 4096.
        let len = 1 << 20;
        let whole = (0..4096).filter(|&s| is_whole(len, s)).count();
        assert!(
            (4096 / 32..4096 / 8).contains(&whole),
            "{whole} whole blocks"
        );
        for hole in [EDGE, len / 3, len / 2 + 5, len - EDGE - 16] {
            let seen = (0..4096u64)
                .filter(|&s| layout(len, s).any(|(a, b)| a < hole + 16 && hole < b))
                .count();
            assert!(seen > whole, "hole at {hole}: seen by {seen} seeds");
        }
    }

    #[test]
    fn check_finds_the_first_flipped_byte_at_any_offset() {
        for len in [1usize, 7, 8, 9, 63, 4096, 10_000, 1 << 20] {
            let mut buf = vec![0u8; len + 3];
            // Offset by one so unaligned word paths run too.
            // SAFETY: `buf` has `len + 3 >= 4` bytes, so offset 1 is in bounds.
            let base = unsafe { buf.as_mut_ptr().add(1) };
            // SAFETY: `base..base + len` lies in `buf` (`1 + len <= len + 3`).
            unsafe { fill(base, len, 42) };
            // SAFETY: `len` bytes from `base` lie in `buf`.
            assert_eq!(unsafe { check(base, len, len, 42) }, None);
            for (a, b) in layout(len, 42) {
                for off in [a, b - 1, (a + b) / 2] {
                    // SAFETY: `off < b <= len` (layout ranges are non-empty and within the block),
                    // so `base + off` is in `buf`.
                    unsafe { *base.add(off) ^= 0x5a };
                    // SAFETY: `len` bytes from `base` lie in `buf`.
                    let m = unsafe { check(base, len, len, 42) }.expect("flip not found");
                    assert_eq!(m.offset, off, "len {len}");
                    // SAFETY: the byte flipped above, in `buf`.
                    unsafe { *base.add(off) ^= 0x5a };
                }
            }
            assert!(
                // SAFETY: `len` bytes from `base` lie in `buf`.
                unsafe { check(base, len, len, 43) }.is_some(),
                "another seed must not match"
            );
        }
    }

    #[test]
    fn check_respects_the_prefix_limit() {
        let mut buf = vec![0u8; 100];
        // SAFETY: `buf` holds 100 writable bytes.
        unsafe { fill(buf.as_mut_ptr(), 100, 7) };
        buf[60] ^= 1;
        // SAFETY: `buf` holds 100 readable bytes.
        assert_eq!(unsafe { check(buf.as_ptr(), 100, 60, 7) }, None);
        assert_eq!(
            // SAFETY: `buf` holds 100 readable bytes.
            unsafe { check(buf.as_ptr(), 100, 61, 7) }.map(|m| m.offset),
            Some(60)
        );
    }
}
