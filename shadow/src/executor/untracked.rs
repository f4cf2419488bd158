//! The blocks the allocator handed out that the shadow does not track yet.

use crate::model::Block;

/// Blocks the allocator returned that are being checked before the shadow
/// takes them in: the one an op is adopting, and those a race section
/// returned. A program that ends at a tolerated violation still releases
/// them as the executor drops.
#[derive(Default)]
pub(super) struct Untracked {
    /// A block the allocator returned that is being checked, not yet tracked.
    pending: Option<Block>,
    /// Blocks a race section returned that are not yet checked and tracked
    /// (the next to adopt is last).
    raced: Vec<Block>,
}

impl Untracked {
    /// `b` is being checked.
    pub(super) fn hold(&mut self, b: Block) {
        self.pending = Some(b);
    }

    /// The block being checked is tracked now (or freed).
    pub(super) fn let_go(&mut self) {
        self.pending = None;
    }

    /// `blocks`, a race section's, wait to be checked, the next last.
    pub(super) fn hold_raced(&mut self, blocks: Vec<Block>) {
        self.raced = blocks;
    }

    /// The next of a race section's blocks is being adopted.
    pub(super) fn adopt_raced(&mut self) {
        self.raced.pop();
    }

    /// Every block still held, the one being checked first.
    pub(super) fn take(&mut self) -> impl Iterator<Item = Block> {
        self.pending
            .take()
            .into_iter()
            .chain(std::mem::take(&mut self.raced))
    }
}
