//! What a forced purge left resident of mimalloc's: its free arena blocks.
//!
//! mimalloc (v2) takes its segments from arenas in blocks of 32 MiB
//! (`MI_ARENA_BLOCK_SIZE`). A block no segment holds is free, and a purge
//! at delay 0 gives its pages back (`MADV_DONTNEED`, under the default
//! `purge_decommits`). A block is in use while a block the program holds
//! lies in it, or a page of the calling thread's default heap: mimalloc's
//! own (the heaps a program made, the adapter's anchor, a differential
//! run's reference when it is this library). Other threads' heaps cannot
//! be seen from here, so the count is made only on the process's first
//! thread while no worker was ever started (a fuzz binary's programs).
//! Free pages inside a segment in use are not counted. (v2 only: the v3
//! line's arenas are laid out otherwise.)

use std::ffi::{c_int, c_void};

use libmimalloc_sys as mi;

/// `MI_ARENA_BLOCK_SIZE` (`MI_SEGMENT_SIZE` on 64-bit).
const BLOCK: usize = 32 << 20;
/// `mi_option_purge_decommits`: off, a purge only resets (`MADV_FREE`),
/// and the pages stay resident until the kernel needs them.
const PURGE_DECOMMITS: mi::mi_option_t = 5;

extern "C" {
    /// `mimalloc.h` (v2): the start and size of the arena `arena_id`
    /// (`mi_arena_id_t`, from 1); null past the last.
    fn mi_arena_area(arena_id: c_int, size: *mut usize) -> *mut c_void;
}

/// Resident bytes of mimalloc's arena blocks that hold nothing in use;
/// `None` where that cannot be told (see the module doc).
pub(super) fn free_blocks_resident(live: &[(usize, usize)]) -> Option<usize> {
    // SAFETY: neither call takes a pointer; `mi_option_is_enabled` range-checks the option.
    let first_thread = unsafe { libc::gettid() == libc::getpid() };
    // SAFETY: as above.
    let decommits = unsafe { mi::mi_option_is_enabled(PURGE_DECOMMITS) };
    if !first_thread || crate::workers::spawned() > 0 || !decommits {
        return None;
    }
    let mut in_use = live.to_vec();
    in_use.extend(default_heap_pages());
    let kept = free_blocks(&arenas(), &in_use)
        .map(|b| crate::resident::resident_in(b, b + BLOCK) as usize)
        .sum();
    Some(kept)
}

/// Every arena, `(start, size)`.
fn arenas() -> Vec<(usize, usize)> {
    (1..)
        .map_while(|id| {
            let mut size = 0usize;
            // SAFETY: `size` is a valid out-parameter; any id may be asked about.
            let start = unsafe { mi_arena_area(id, &mut size) };
            (!start.is_null()).then_some((start as usize, size))
        })
        .collect()
}

/// The starts of the arena blocks no `in_use` range lies in.
fn free_blocks<'a>(
    arenas: &'a [(usize, usize)],
    in_use: &'a [(usize, usize)],
) -> impl Iterator<Item = usize> + 'a {
    arenas
        .iter()
        .flat_map(|&(start, size)| (start..start + size).step_by(BLOCK))
        .filter(|&b| {
            !in_use
                .iter()
                .any(|&(p, len)| p < b + BLOCK && b < p + len.max(1))
        })
}

/// The pages (areas) of the calling thread's default heap, `(start, bytes)`.
fn default_heap_pages() -> Vec<(usize, usize)> {
    unsafe extern "C" fn area(
        _heap: *const mi::mi_heap_t,
        area: *const mi::mi_heap_area_t,
        _block: *mut c_void,
        _size: usize,
        arg: *mut c_void,
    ) -> bool {
        // SAFETY: mimalloc passes a valid area for the call; `arg` is the
        // `Vec` below, alive for the visit and touched by nothing else.
        unsafe {
            let area = &*area;
            (*arg.cast::<Vec<(usize, usize)>>()).push((area.blocks as usize, area.reserved));
        }
        true
    }
    let mut pages: Vec<(usize, usize)> = Vec::new();
    let arg = &mut pages as *mut Vec<(usize, usize)> as *mut c_void;
    // SAFETY: the calling thread's own default heap; without `visit_all_blocks`
    // the visitor is called once per page, with no block.
    unsafe { mi::mi_heap_visit_blocks(mi::mi_heap_get_default(), false, Some(area), arg) };
    pages
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_block_is_free_when_nothing_in_use_lies_in_it() {
        let arena = [(BLOCK * 4, BLOCK * 3)];
        let all: Vec<usize> = free_blocks(&arena, &[]).collect();
        assert_eq!(all, [BLOCK * 4, BLOCK * 5, BLOCK * 6]);
        // A block the program holds, at the end of the second arena block.
        let live = [(BLOCK * 6 - 16, 16)];
        assert_eq!(
            free_blocks(&arena, &live).collect::<Vec<_>>(),
            [BLOCK * 4, BLOCK * 6]
        );
        // A huge one over two blocks; an empty one at a block's start.
        let live = [(BLOCK * 4 + 100, BLOCK + 1), (BLOCK * 6, 0)];
        assert_eq!(free_blocks(&arena, &live).count(), 0);
    }
}
