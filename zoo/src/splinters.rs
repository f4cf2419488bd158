//! `SplitNeverMerged`'s region: the blocks of its class asked on another
//! thread than the one that made the allocator (a worker's heap) come
//! from one mapped region, worst fit: the largest freed chunk, when it is
//! large enough, is split, and nothing ever merges two freed chunks back.
//! The remainder, too small for any block of the class, is lost where it
//! lies, and each chunk only shrinks, so under mixed sizes a request
//! larger than every chunk left takes new bytes from the region's end:
//! the region grows without bound, however few bytes are live.

use std::collections::{BTreeMap, HashMap};
use std::ops::RangeInclusive;
use std::sync::{Mutex, OnceLock};

/// The sizes.
pub(super) const CLASS: RangeInclusive<usize> = 2049..=2560;
/// What a chunk is rounded to (the blocks' alignment).
const GRAIN: usize = 16;
/// The region's reserve; a request past it goes to the base.
const REGION: usize = 64 << 30;

/// The region's chunks.
#[derive(Default)]
struct Chunks {
    /// The first byte never handed out.
    top: usize,
    /// Freed chunks by length, each length's addresses.
    free: BTreeMap<usize, Vec<usize>>,
    /// Live blocks -> their chunk's length.
    live: HashMap<usize, usize>,
}

pub(super) struct Splinters {
    /// The region's start, mapped at the first block (0: the map failed).
    start: OnceLock<usize>,
    chunks: Mutex<Chunks>,
}

impl Splinters {
    pub(super) fn new() -> Splinters {
        Splinters {
            start: OnceLock::new(),
            chunks: Mutex::new(Chunks::default()),
        }
    }

    /// Whether `p` is a block of the region.
    pub(super) fn holds(&self, p: *mut u8) -> bool {
        match self.start.get() {
            Some(&start) if start != 0 => (start..start + REGION).contains(&(p as usize)),
            _ => false,
        }
    }

    /// A block of `size` bytes (in `CLASS`), or null when the region is
    /// used up: the caller asks its base then.
    pub(super) unsafe fn alloc(&self, size: usize, zeroed: bool) -> *mut u8 {
        let start = *self.start.get_or_init(|| super::slow_leak::reserve(REGION));
        if start == 0 {
            return std::ptr::null_mut();
        }
        let need = size.next_multiple_of(GRAIN);
        let mut c = self.chunks.lock().unwrap_or_else(|e| e.into_inner());
        let fit = c
            .free
            .keys()
            .next_back()
            .copied()
            .filter(|&len| len >= need);
        let (p, len) = match fit {
            Some(len) => {
                let list = c.free.get_mut(&len).expect("a listed length");
                let p = list.pop().expect("a listed length has a chunk");
                if list.is_empty() {
                    c.free.remove(&len);
                }
                // The bug: the block is split off the chunk's front, and
                // the rest (less than the class's narrowest block) is lost
                // where it lies; nothing merges it with a neighbour.
                (p, need)
            }
            None if c.top + need <= REGION => {
                c.top += need;
                (start + c.top - need, need)
            }
            None => return std::ptr::null_mut(),
        };
        c.live.insert(p, len);
        drop(c);
        if zeroed {
            // SAFETY: `p..p + len` is a chunk of the mapped region that this
            // call took off the free lists (or past the top): no one holds it.
            unsafe { std::ptr::write_bytes(p as *mut u8, 0, len) };
        }
        p as *mut u8
    }

    /// Bytes handed out from the region's end so far.
    pub(super) fn top(&self) -> usize {
        self.chunks.lock().unwrap_or_else(|e| e.into_inner()).top
    }

    /// Gives `p`, a block of the region, back as a chunk of its own.
    pub(super) fn free(&self, p: *mut u8) {
        let mut c = self.chunks.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(len) = c.live.remove(&(p as usize)) {
            c.free.entry(len).or_default().push(p as usize);
        }
    }
}

impl super::Zoo {
    /// Bytes `SplitNeverMerged`'s region has handed out from its end.
    #[doc(hidden)]
    pub fn splintered_bytes(&self) -> usize {
        self.splinters.top()
    }
}
