//! The rebuild fence (issue 20 item 5, docs/stripes.md §6 "Online"): while a
//! member is being rebuilt with writes going on, a rebuild batch must see
//! and write a segment's rows with no other write into those rows between
//! its reads of the other members and its write of the new member's piece
//! (else a stale piece overwrites a newer one on the new member, or a piece
//! rebuilt from a half-written row lands there). Owns one reader-writer lock
//! per slot, a segment's slot being `segment % SLOTS`.
//!
//! Invariant: while a member is being rebuilt, every write into a row of the
//! segment area (data, padding, running or full parity, a tombstone, and the
//! forgetting of a segment's rows at its wipe) holds its segment's slot
//! shared, and every rebuild batch holds the slots of all its segments
//! exclusively across its reads, its computation and its write. Slots are
//! taken in increasing index order by anyone taking more than one, and no
//! thread takes a slot it already holds, so the fence cannot deadlock on
//! itself. Lock order: the engine's reuse lock, then the fence, then a row's
//! state, then the row table.

use parking_lot::{RwLock, RwLockReadGuard, RwLockWriteGuard};

/// Slots of the fence (segments map onto them modulo this).
pub(super) const SLOTS: usize = 64;

pub(super) struct Fence {
    slots: Vec<RwLock<()>>,
}

impl Default for Fence {
    fn default() -> Fence {
        Fence {
            slots: (0..SLOTS).map(|_| RwLock::new(())).collect(),
        }
    }
}

/// The distinct slots of segments `first..=last`, in increasing order.
fn slots_of(first: u64, last: u64) -> Vec<usize> {
    let mut v: Vec<usize> = if last - first + 1 >= SLOTS as u64 {
        (0..SLOTS).collect()
    } else {
        (first..=last)
            .map(|s| (s % SLOTS as u64) as usize)
            .collect()
    };
    v.sort_unstable();
    v.dedup();
    v
}

impl Fence {
    /// Hold segments `first..=last` shared (a write into their rows).
    pub fn shared(&self, first: u64, last: u64) -> Vec<RwLockReadGuard<'_, ()>> {
        assert!(first <= last, "a range of segments");
        slots_of(first, last)
            .into_iter()
            .map(|i| self.slots[i].read())
            .collect()
    }

    /// Hold segments `first..=last` exclusively (a rebuild batch).
    pub fn exclusive(&self, first: u64, last: u64) -> Vec<RwLockWriteGuard<'_, ()>> {
        assert!(first <= last, "a range of segments");
        slots_of(first, last)
            .into_iter()
            .map(|i| self.slots[i].write())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slots_are_distinct_and_ordered_even_when_segments_wrap() {
        assert_eq!(slots_of(62, 65), vec![0, 1, 62, 63]);
        assert_eq!(slots_of(3, 3), vec![3]);
        assert_eq!(slots_of(0, 500).len(), SLOTS);
        // a batch wider than the slots takes each once (no self-deadlock)
        let f = Fence::default();
        let g = f.exclusive(10, 10 + SLOTS as u64 * 2);
        assert_eq!(g.len(), SLOTS);
        drop(g);
        let a = f.shared(5, 6);
        let b = f.shared(5, 5);
        assert_eq!((a.len(), b.len()), (2, 1), "shared holders share");
    }
}
