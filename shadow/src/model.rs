//! The shadow heap: what the harness knows about every live block.

use std::collections::BTreeMap;

use crate::allocator::{HeapId, LiveBlock, Resize};
use crate::edges::MAX_BLOCK;

/// Most live blocks a program holds; allocations beyond are skipped.
pub const MAX_LIVE_BLOCKS: usize = 256;
/// Most live blocks a program holds through bulk allocations: enough to
/// fill a mimalloc page of 16-byte blocks (4096) and more.
pub const MAX_LIVE_BULK: usize = 8192;
/// Most bytes a program holds live at once (its live blocks' sizes; a
/// resize counts its new size on top of the old until it returns). Keeps a
/// correct allocator far below libFuzzer's RSS limit (ASan's quarantine
/// adds up to 256 MiB on top). Frees give their bytes back: a program may
/// free a 40 MiB block and ask for another, where a second large block
/// of a class is what a reuse bug needs.
pub const MAX_PROGRAM_BYTES: usize = 64 << 20;

/// One live block.
#[derive(Clone, Copy, Debug)]
pub struct Block {
    pub ptr: usize,
    pub size: usize,
    pub align: usize,
    /// What the allocator said at allocation time, but no more than ASan
    /// lets the program touch.
    pub usable: usize,
    /// Bytes that carry the pattern: `size` (the usable size of a block
    /// cut short), or `usable` after a probe.
    pub extent: usize,
    pub seed: u64,
    /// The heap the block lives in; `None` for the default heap.
    pub heap: Option<HeapId>,
    /// For a block of the zeroed family (see
    /// [`crate::allocator::ZeroedFrom::Written`]): the end of the bytes
    /// the program ever wrote in it. Past it, up to its usable size, the
    /// block reads zero as its allocator left it. `None` for any other
    /// block.
    pub written: Option<usize>,
}

impl Block {
    /// Its resize to `to` bytes, as the allocator's resizing calls take
    /// it (the size and alignment it was asked with).
    pub fn resized(&self, to: usize) -> Resize {
        Resize {
            old: self.size,
            align: self.align,
            to,
        }
    }

    /// A block of `size` bytes just handed out, not yet checked: no heap,
    /// no pattern, usable and checked up to its size.
    pub fn fresh(ptr: usize, size: usize, align: usize) -> Block {
        Block {
            ptr,
            size,
            align,
            usable: size,
            extent: size,
            seed: 0,
            heap: None,
            written: None,
        }
    }

    /// The bytes the block owns, for overlap checks: the ones it has (a
    /// block cut short owns its usable bytes only; that it was cut short
    /// was flagged when it came, and a later block in the missing bytes is
    /// that one bug, not a second).
    pub fn end(&self) -> usize {
        self.ptr + self.extent.max(self.usable).max(1)
    }
}

/// Live blocks, oldest first (slots index into it), and an interval map
/// of the bytes they own.
#[derive(Default)]
pub struct ShadowHeap {
    blocks: Vec<Block>,
    /// start -> end of every live block; disjoint while the allocator is correct.
    intervals: BTreeMap<usize, usize>,
    /// Bytes of the live blocks, held to [`MAX_PROGRAM_BYTES`].
    live_bytes: usize,
}

impl ShadowHeap {
    pub fn len(&self) -> usize {
        self.blocks.len()
    }

    pub fn is_empty(&self) -> bool {
        self.blocks.is_empty()
    }

    pub fn blocks(&self) -> &[Block] {
        &self.blocks
    }

    pub fn blocks_mut(&mut self) -> &mut [Block] {
        &mut self.blocks
    }

    /// Whether one more block of `size` bytes stays within the caps.
    pub fn fits(&self, size: usize) -> bool {
        self.blocks.len() < MAX_LIVE_BLOCKS && self.fits_resize(size)
    }

    /// How many more blocks of `size`, up to `n`, stay within the caps.
    pub fn room_for(&self, size: usize, n: usize) -> usize {
        (0..n)
            .take_while(|&k| {
                self.blocks.len() + k < MAX_LIVE_BLOCKS
                    && self.fits_resize(size.saturating_mul(k + 1))
            })
            .count()
    }

    /// Whether one more block of a bulk allocation stays within the caps.
    pub fn fits_bulk(&self, size: usize) -> bool {
        self.blocks.len() < MAX_LIVE_BULK && self.fits_resize(size)
    }

    /// Whether resizing a block to `size` stays within the caps.
    pub fn fits_resize(&self, size: usize) -> bool {
        size <= MAX_BLOCK && self.live_bytes + size <= MAX_PROGRAM_BYTES
    }

    /// The block index a raw slot number selects.
    pub fn slot(&self, raw: usize) -> Option<usize> {
        match (self.blocks.len(), raw) {
            (0, _) => None,
            (n, crate::op::NEWEST) => Some(n - 1),
            (n, raw) => Some(raw % n),
        }
    }

    /// The live block overlapping `[start, end)`, if any.
    pub fn overlapping(&self, start: usize, end: usize) -> Option<Block> {
        let (&s, &e) = self.intervals.range(..end).next_back()?;
        (e > start).then(|| {
            *self
                .blocks
                .iter()
                .find(|b| b.ptr == s)
                .expect("interval without block")
        })
    }

    /// Adds a block to the live set. `Err` carries the live block it overlaps.
    pub fn insert(&mut self, block: Block, check_overlap: bool) -> Result<usize, Block> {
        if check_overlap {
            if let Some(other) = self.overlapping(block.ptr, block.end()) {
                return Err(other);
            }
            self.intervals.insert(block.ptr, block.end());
        }
        self.live_bytes += block.size;
        self.blocks.push(block);
        Ok(self.blocks.len() - 1)
    }

    /// Removes block `i`; the others keep their order, so the last block
    /// is always the newest.
    pub fn remove(&mut self, i: usize) -> Block {
        let b = self.blocks.remove(i);
        self.intervals.remove(&b.ptr);
        self.live_bytes -= b.size;
        b
    }

    /// Removes the blocks at `indices` (distinct) and returns them in
    /// that order; the others keep their order.
    pub fn remove_many(&mut self, indices: &[usize]) -> Vec<Block> {
        let taken: Vec<Block> = indices.iter().map(|&i| self.blocks[i]).collect();
        let mut gone = vec![false; self.blocks.len()];
        for &i in indices {
            gone[i] = true;
        }
        let mut k = 0;
        self.blocks.retain(|_| {
            k += 1;
            !gone[k - 1]
        });
        for b in &taken {
            self.intervals.remove(&b.ptr);
            self.live_bytes -= b.size;
        }
        taken
    }

    /// The live blocks as validators see them.
    pub fn live(&self) -> Vec<LiveBlock> {
        self.blocks
            .iter()
            .map(|b| LiveBlock {
                ptr: b.ptr,
                size: b.size,
                align: b.align,
                heap: b.heap,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn block(ptr: usize, size: usize) -> Block {
        Block {
            ptr,
            size,
            align: 1,
            usable: size,
            extent: size,
            seed: 0,
            heap: None,
            written: None,
        }
    }

    #[test]
    fn overlap_is_found_on_either_side_and_inside() {
        let mut s = ShadowHeap::default();
        s.insert(block(1000, 100), true).unwrap();
        s.insert(block(2000, 100), true).unwrap();
        assert_eq!(s.insert(block(1099, 1), true).unwrap_err().ptr, 1000);
        assert_eq!(s.insert(block(990, 11), true).unwrap_err().ptr, 1000);
        assert_eq!(s.insert(block(1050, 10), true).unwrap_err().ptr, 1000);
        assert_eq!(s.insert(block(1500, 600), true).unwrap_err().ptr, 2000);
        assert!(
            s.insert(block(1100, 900), true).is_ok(),
            "touching is not overlapping"
        );
        // A zero-size block still owns its address.
        s.insert(block(5000, 0), true).unwrap();
        assert_eq!(s.insert(block(5000, 0), true).unwrap_err().ptr, 5000);
    }

    #[test]
    fn remove_many_keeps_the_order_of_the_rest() {
        let mut s = ShadowHeap::default();
        for k in 0..6 {
            s.insert(block(1000 * (k + 1), 10), true).unwrap();
        }
        let gone: Vec<usize> = s.remove_many(&[4, 1, 2]).iter().map(|b| b.ptr).collect();
        assert_eq!(gone, [5000, 2000, 3000], "returned in the order asked");
        let left: Vec<usize> = s.blocks().iter().map(|b| b.ptr).collect();
        assert_eq!(left, [1000, 4000, 6000]);
        assert!(s.insert(block(2000, 10), true).is_ok(), "intervals freed");
        assert!(
            s.insert(block(4005, 1), true).is_err(),
            "the rest still owned"
        );
    }

    #[test]
    fn remove_frees_the_interval_and_its_bytes_of_the_budget() {
        let mut s = ShadowHeap::default();
        let i = s
            .insert(block(1000, MAX_PROGRAM_BYTES - 100), true)
            .unwrap();
        assert!(s.fits(100) && !s.fits(101));
        s.remove(i);
        assert!(
            s.fits(MAX_PROGRAM_BYTES) && s.fits_resize(MAX_PROGRAM_BYTES),
            "a free gives its bytes back: the budget is of live bytes"
        );
        let j = s
            .insert(block(1000, 100), true)
            .expect("the interval is free again");
        s.remove_many(&[j]);
        assert!(s.fits(MAX_PROGRAM_BYTES), "and so does a bulk free");
    }
}
