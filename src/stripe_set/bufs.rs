//! The set's parity buffers, reused from row to row: a full row's P and Q,
//! a partial row's parity at its used columns, and a scratch copy (its tag
//! block, then the running parity) each take one buffer of a tag block and
//! a stripe unit, instead of a fresh zeroed allocation per row. Owns the
//! free list.
//!
//! Invariant: a buffer handed out holds whatever its last user left; its
//! user writes every byte it sends to a member before sending it (parity
//! encode and `scratch::Tag::seal` overwrite their whole range). At most
//! `KEEP` buffers wait in the list; more in use at once are allocated and
//! dropped.

use crate::format::BLOCK_BYTES;
use crate::media::AlignedBuf;
use parking_lot::Mutex;

/// Buffers kept for reuse (a RAID-6 row takes two; the commit stage,
/// GC and a rebuild may write at once).
const KEEP: usize = 8;

pub(super) struct BufPool {
    len: usize,
    free: Mutex<Vec<AlignedBuf>>,
}

impl BufPool {
    /// Buffers of a tag block and a stripe unit of `unit` bytes.
    pub fn new(unit: u64) -> BufPool {
        BufPool {
            len: BLOCK_BYTES + unit as usize,
            free: Mutex::new(Vec::new()),
        }
    }

    /// A buffer of `BLOCK_BYTES + unit` bytes, contents unspecified.
    pub fn take(&self) -> PoolBuf<'_> {
        let buf = self.free.lock().pop();
        PoolBuf {
            pool: self,
            buf: Some(buf.unwrap_or_else(|| AlignedBuf::new(self.len))),
        }
    }
}

/// A buffer of the pool, back in the list when dropped.
pub(super) struct PoolBuf<'a> {
    pool: &'a BufPool,
    buf: Option<AlignedBuf>,
}

impl std::ops::Deref for PoolBuf<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        self.buf.as_deref().expect("held until drop")
    }
}

impl std::ops::DerefMut for PoolBuf<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        self.buf.as_deref_mut().expect("held until drop")
    }
}

impl Drop for PoolBuf<'_> {
    fn drop(&mut self) {
        let mut free = self.pool.free.lock();
        if free.len() < KEEP {
            free.extend(self.buf.take());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_and_at_most_keep_wait() {
        let pool = BufPool::new(16 << 10);
        let first = pool.take().as_ptr();
        assert_eq!(pool.take().as_ptr(), first, "a dropped buffer is reused");
        let many: Vec<PoolBuf> = (0..KEEP + 3).map(|_| pool.take()).collect();
        assert!(many.iter().all(|b| b.len() == BLOCK_BYTES + (16 << 10)));
        drop(many);
        assert_eq!(pool.free.lock().len(), KEEP);
    }
}
