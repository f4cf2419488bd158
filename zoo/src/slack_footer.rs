//! `SlackFooter`'s blocks: 8 bytes of room past the request, reported
//! usable, that hold a footer their free checks.

use std::ops::RangeInclusive;

use super::{Bug, Zoo};

/// `SlackFooter`: the sizes, and the footer's tag.
const FOOTED: RangeInclusive<usize> = 8193..=12288;
const FOOTER_TAG: usize = 0xF007_E5CA_1AB1_E000;

impl Zoo {
    /// Whether a request gets `SlackFooter`'s footer.
    pub(super) fn is_footed(&self, size: usize, align: usize) -> bool {
        self.has(Bug::SlackFooter) && align <= 16 && FOOTED.contains(&size)
    }

    /// A block with 8 bytes of room past `size`, reported usable, that
    /// hold the footer free checks.
    #[inline(never)]
    pub(super) unsafe fn footed(&self, size: usize, align: usize, zeroed: bool) -> *mut u8 {
        let room = size + 8;
        // SAFETY: `align` is a power of two within max_align (`alloc`'s contract).
        let p = unsafe { self.base.alloc(room, align, zeroed) };
        if !p.is_null() {
            // SAFETY: `p` is a block of `size + 8` bytes: the footer's 8 lie in it.
            unsafe { (p.add(size) as *mut usize).write_unaligned(FOOTER_TAG ^ size) };
            self.state().rooms.insert(p as usize, room);
        }
        p
    }

    /// Checks a footed block's footer before its free: a broken one is
    /// heap corruption, which the allocator stops at.
    #[inline(never)]
    pub(super) unsafe fn check_footer(&self, p: *mut u8) {
        let room = match self.has(Bug::SlackFooter) {
            true => self.state().rooms.get(&(p as usize)).copied(),
            false => None,
        };
        if let Some(room) = room {
            let size = room - 8;
            // SAFETY: `p` is live (`free`'s contract), and `rooms` lists it with `room`, at
            // most the bytes it holds: the 8 before `room` lie in it.
            let footer = unsafe { (p.add(size) as *const usize).read_unaligned() };
            assert_eq!(
                footer,
                FOOTER_TAG ^ size,
                "zoo: the footer of a {size}-byte block is corrupt"
            );
        }
    }
}
