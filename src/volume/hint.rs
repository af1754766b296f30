//! Prefetch hints for the engine's per-block tables (issue 22). Owns the
//! addresses of the map's slots (and high bytes) and of the write clocks
//! (`Core::last_write`), taken once at mount, so a request thread can ask
//! the CPU for the cache lines its blocks' records will touch under the
//! engine lock while it is still checksumming them outside it: the random
//! map lookup of a 4 KiB write was a cache miss taken with the lock held
//! (`Map::get`, 8% of a 32-thread write profile).
//!
//! Invariant: an address here is never dereferenced. It only feeds a
//! prefetch instruction, which cannot fault and changes no state, so a
//! stale address (a table that moved) costs one wasted prefetch, never a
//! wrong answer. Offsets are computed with wrapping arithmetic on plain
//! integers, never as pointers into the tables.

use super::core::Core;

const LINE: usize = 64;

#[derive(Clone, Copy, Default)]
pub(super) struct SlotHint {
    /// Logical blocks the tables cover (0: no hints).
    blocks: u64,
    map: usize,
    map_hi: usize,
    /// 0 when the volume keeps no write clocks.
    clocks: usize,
}

impl SlotHint {
    /// The tables of `core` as they are now (at mount, before any request).
    pub fn of(core: &Core) -> SlotHint {
        let (map, map_hi) = core.map.table_addrs();
        let clocks = if core.last_write.len() as u64 == core.map.len() {
            core.last_write.as_ptr() as usize
        } else {
            0
        };
        SlotHint {
            blocks: core.map.len(),
            map,
            map_hi,
            clocks,
        }
    }

    /// Prefetch the table entries of logical block `lba`. `last` is the
    /// block hinted just before (or u64::MAX): a block whose entries share
    /// its cache lines is skipped.
    #[inline]
    pub fn prefetch(&self, lba: u64, last: u64) {
        if lba >= self.blocks {
            return;
        }
        let same = |bytes: usize| {
            last != u64::MAX
                && (lba as usize).wrapping_mul(bytes) / LINE
                    == (last as usize).wrapping_mul(bytes) / LINE
        };
        if !same(4) {
            fetch(self.map.wrapping_add((lba as usize).wrapping_mul(4)));
            if self.clocks != 0 {
                fetch(self.clocks.wrapping_add((lba as usize).wrapping_mul(4)));
            }
        }
        if self.map_hi != 0 && !same(1) {
            fetch(self.map_hi.wrapping_add(lba as usize));
        }
    }
}

#[inline(always)]
fn fetch(addr: usize) {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::{_mm_prefetch, _MM_HINT_T0};
        // SAFETY: a prefetch is a hint: it reads nothing the program can
        // see and cannot fault, whatever the address (module invariant).
        #[allow(unused_unsafe)]
        unsafe {
            _mm_prefetch::<_MM_HINT_T0>(addr as *const i8)
        };
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = addr;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hints_never_touch_memory() {
        // addresses that point nowhere: a prefetch must neither fault nor
        // change anything, whatever the block
        let h = SlotHint {
            blocks: 1 << 40,
            map: 8,
            map_hi: usize::MAX - 3,
            clocks: 0xdead_0000,
        };
        for lba in [0, 1, 15, 16, 1 << 39, (1 << 40) - 1, 1 << 40, u64::MAX] {
            h.prefetch(lba, u64::MAX);
            h.prefetch(lba, lba.wrapping_sub(1));
        }
    }
}
