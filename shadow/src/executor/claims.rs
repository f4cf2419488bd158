//! Who owns which bytes while a race section runs.
//!
//! On the main thread the shadow sees a block handed out twice when it
//! takes in the second. Inside a section it would see it only afterwards,
//! and by then the two workers may each have written, checked and freed
//! their copy: the finding is a double free or a broken pattern, one
//! symptom further from the bug (a second group for it). So every worker
//! claims the bytes of a block as soon as the allocator returns it, before
//! it writes them, and gives them up just before it hands the block back.
//! A claim that meets a live one is the overlap itself, seen first.
//!
//! A correct allocator hands out a block again only after its free began,
//! and the free began after its worker gave up the claim: a claim never
//! meets a block that was legally reused.

use std::collections::BTreeMap;
use std::sync::Mutex;

/// The bytes live blocks own, start to end, shared by a section's workers.
pub struct Claims {
    live: Mutex<BTreeMap<usize, usize>>,
}

/// A live block a claim met: its start and length.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Held {
    pub ptr: usize,
    pub len: usize,
}

impl Claims {
    /// Claims over the blocks live as the section starts, each `(start,
    /// end)`.
    pub fn new(live: impl IntoIterator<Item = (usize, usize)>) -> Claims {
        Claims {
            live: Mutex::new(live.into_iter().collect()),
        }
    }

    /// Claims `[ptr, ptr + len)` (at least one byte) for the worker the
    /// allocator just handed it to; `Err` holds the live block it overlaps,
    /// and nothing is claimed.
    pub fn claim(&self, ptr: usize, len: usize) -> Result<(), Held> {
        let end = ptr + len.max(1);
        let mut live = self.lock();
        if let Some((&start, &other_end)) = live.range(..end).next_back() {
            if other_end > ptr {
                return Err(Held {
                    ptr: start,
                    len: other_end - start,
                });
            }
        }
        live.insert(ptr, end);
        Ok(())
    }

    /// Gives up the claim on the block at `ptr`, before its free.
    pub fn release(&self, ptr: usize) {
        self.lock().remove(&ptr);
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<usize, usize>> {
        // A worker that panicked holding the lock left the map whole (each
        // change is one insert or remove).
        self.live.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_claim_meets_only_live_bytes() {
        let claims = Claims::new([(100, 116)]);
        assert_eq!(claims.claim(108, 8), Err(Held { ptr: 100, len: 16 }));
        assert_eq!(claims.claim(90, 11), Err(Held { ptr: 100, len: 16 }));
        assert_eq!(claims.claim(116, 4), Ok(()));
        assert_eq!(claims.claim(96, 4), Ok(()));
        assert_eq!(claims.claim(96, 0), Err(Held { ptr: 96, len: 4 }));
        claims.release(100);
        assert_eq!(claims.claim(100, 16), Ok(()));
    }
}
