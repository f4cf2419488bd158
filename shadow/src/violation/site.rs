//! Where a violation happened: the call and its block's size and
//! alignment tiers, part of a violation's key.

use std::fmt;

/// Where a violation happened: the allocator function the op called and
/// the buckets of the block's size and alignment. Part of the key: what a
/// group's variants are told apart by, and, for a violation without a code
/// path, what tells two groups apart (two bugs of one kind in different
/// size tiers, alignments or API calls), while one bug reached by two
/// targets (`alloc` in `alloc_ops`, `worker-alloc` in `mt_ops`) stays one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Site {
    /// The allocator call: `alloc`, `realloc`, `heap-alloc`, `free`,
    /// `validate`, `end` (the end-of-program checks), ...
    pub api: &'static str,
    /// The block's requested size and alignment (the old size for a
    /// realloc); `None` where the call has no block.
    pub block: Option<(usize, usize)>,
}

impl Site {
    pub fn new(api: &'static str, size: usize, align: usize) -> Site {
        Site {
            api,
            block: Some((size, align)),
        }
    }

    pub fn bare(api: &'static str) -> Site {
        Site { api, block: None }
    }

    /// The site of a violation of every block the allocator hands out
    /// ([`super::Violation::is_of_every_call`]).
    pub fn any_call() -> Site {
        Site::bare("any-call")
    }
}

/// The size tier of a request, where allocators switch strategy: tiny
/// classes, small classes within a page, medium (pages, slabs, runs),
/// large (segments, direct maps). Few tiers on purpose: a bug that spans
/// tiers is filed once per tier it shows in.
pub fn size_bucket(size: usize) -> &'static str {
    match size {
        0..=64 => "0..64",
        65..=4096 => "65..4K",
        4097..=262_144 => "4K..256K",
        _ if size <= crate::edges::MAX_BLOCK => "256K..",
        _ if size < crate::edges::IMPOSSIBLE_FROM => "64M..",
        _ => "impossible",
    }
}

/// The alignment tier: what plain malloc gives, or over-aligned (the
/// aligned allocation path).
pub fn align_bucket(align: usize) -> &'static str {
    match align {
        0..=16 => "..16",
        _ => "32..",
    }
}

impl fmt::Display for Site {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.api)?;
        if let Some((size, align)) = self.block {
            write!(
                f,
                " size {} align {}",
                size_bucket(size),
                align_bucket(align)
            )?;
        }
        Ok(())
    }
}
