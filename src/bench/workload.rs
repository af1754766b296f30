//! Workload generators: the size ladders of the seed benchmarks, random aligned
//! offsets inside a sample region, the read/write chooser of mixed workloads and the
//! random payload generator.
//!
//! Invariants: every offset is aligned to the IO size (as the seeds' tools do) and the
//! IO lies wholly inside the region; every payload differs in every 4 KiB block from
//! every earlier payload of the same generator and is never all 0x00 or all 0xFF in
//! any 4 KiB block (so no zero-block or dedupe shortcut can flatter a target). By
//! default payloads are random, never uniform in any 512-byte sector; with
//! `--compressible PCT` each 4 KiB block is fio's `buffer_compress_percentage=PCT`,
//! `buffer_compress_chunk=4k` shape: its first `100 - PCT` percent random, the rest
//! zeros (only sectors starting in the random head are restamped).

use rand::rngs::SmallRng;
use rand::{Rng, RngCore, SeedableRng};

/// Doubling sizes from `from` to `to` inclusive (both powers of two).
pub fn doubling(from: u64, to: u64) -> Vec<u64> {
    let mut v = Vec::new();
    let mut s = from.max(1);
    while s <= to {
        v.push(s);
        s *= 2;
    }
    v
}

/// The SuperCharger grid: 512 B .. 4 MiB.
pub fn grid_sizes() -> Vec<u64> {
    doubling(512, 4 << 20)
}

/// FreeBSD `diskinfo -S`: from the sector size up to 8 MiB.
pub fn slog_sizes(sector: u64) -> Vec<u64> {
    doubling(sector, 8 << 20)
}

pub const GRID_THREADS: [usize; 3] = [1, 10, 40];

/// Random offsets aligned to `block` with the whole IO inside [start, start+len).
#[derive(Clone)]
pub struct OffsetGen {
    rng: SmallRng,
    start: u64,
    slots: u64,
    block: u64,
}

impl OffsetGen {
    /// None when not even one IO of `block` bytes fits in the region.
    pub fn new(seed: u64, start: u64, len: u64, block: u64) -> Option<OffsetGen> {
        let first = start.div_ceil(block) * block;
        let end = start + len;
        if block == 0 || first + block > end {
            return None;
        }
        Some(OffsetGen {
            rng: SmallRng::seed_from_u64(seed),
            start: first,
            slots: (end - first) / block,
            block,
        })
    }
    pub fn slots(&self) -> u64 {
        self.slots
    }
    pub fn next_offset(&mut self) -> u64 {
        self.start + self.rng.gen_range(0..self.slots) * self.block
    }
}

/// Sequential offsets wrapping around the region (for fills and 1 MiB streaming).
pub fn sequential_offset(start: u64, len: u64, block: u64, index: u64) -> u64 {
    let slots = (len / block).max(1);
    start + (index % slots) * block
}

/// Chooses read or write with a given read percentage.
pub struct OpChooser {
    rng: SmallRng,
    read_pct: u32,
}

impl OpChooser {
    pub fn new(seed: u64, read_pct: u32) -> OpChooser {
        OpChooser {
            rng: SmallRng::seed_from_u64(seed ^ 0x0005_eed0_f0b5),
            read_pct: read_pct.min(100),
        }
    }
    /// true = read.
    pub fn next_is_read(&mut self) -> bool {
        self.rng.gen_range(0..100) < self.read_pct
    }
}

/// Random payloads: a buffer filled once with random bytes; each `next` restamps the
/// first 16 bytes of every 512-byte sector with a per-generator counter and fresh
/// random bits, so payloads are unique without regenerating megabytes per IO.
pub struct DataGen {
    rng: SmallRng,
    counter: u64,
    id: u64,
    /// Bytes of each 4 KiB block that are random (the rest zeros); 4096 = all.
    random_head: usize,
}

/// The unit `--compressible` shapes (fio's `buffer_compress_chunk=4k`).
pub const COMPRESS_CHUNK: usize = 4096;

impl DataGen {
    pub fn new(seed: u64, id: u64) -> DataGen {
        DataGen::compressible(seed, id, 0)
    }
    /// Payloads of which each 4 KiB block is `pct` percent zeros after a random
    /// head (fio's `buffer_compress_percentage`); 0 = all random. Above 99 the
    /// head is still the 16-byte stamp of its first sector.
    pub fn compressible(seed: u64, id: u64, pct: u32) -> DataGen {
        let pct = pct.min(100) as usize;
        DataGen {
            rng: SmallRng::seed_from_u64(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ id),
            counter: 0,
            id,
            random_head: (COMPRESS_CHUNK * (100 - pct) / 100).max(16),
        }
    }
    /// Fill `buf` with this generator's payload shape (call once per buffer).
    pub fn fill(&mut self, buf: &mut [u8]) {
        self.rng.fill_bytes(buf);
        if self.random_head < COMPRESS_CHUNK {
            for chunk in buf.chunks_mut(COMPRESS_CHUNK) {
                let head = self.random_head.min(chunk.len());
                chunk[head..].fill(0);
            }
        }
        self.stamp(buf);
    }
    /// Make `buf` (already filled) a fresh payload.
    pub fn stamp(&mut self, buf: &mut [u8]) {
        self.counter += 1;
        let r = self.rng.next_u64();
        for (i, sector) in buf.chunks_mut(512).enumerate() {
            if (i * 512) % COMPRESS_CHUNK >= self.random_head {
                continue; // the zero tail of a compressible block stays zero
            }
            let n = sector.len().min(16);
            let mut tag = [0u8; 16];
            // counter | 0x1 in the top byte guarantees a non-zero, non-0xFF tag
            tag[..8].copy_from_slice(&(self.counter | (1 << 56)).to_le_bytes());
            tag[8..].copy_from_slice(&(r ^ self.id.rotate_left(32)).to_le_bytes());
            sector[..n].copy_from_slice(&tag[..n]);
        }
    }
}

/// The share of the bytes LZ4 alone keeps of this generator shape's 4 KiB
/// blocks (each block compressed on its own, a block that grows kept raw):
/// the reference a compressing target's stored bytes are compared with.
pub fn lz4_share(seed: u64, pct: u32) -> f64 {
    let mut d = DataGen::compressible(seed, u64::MAX, pct);
    let mut buf = vec![0u8; 256 * COMPRESS_CHUNK];
    d.fill(&mut buf);
    let kept: usize = buf
        .chunks(COMPRESS_CHUNK)
        .map(|b| lz4_flex::block::compress(b).len().min(COMPRESS_CHUNK))
        .sum();
    kept as f64 / buf.len() as f64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ladders_match_the_seed_tools() {
        let g = grid_sizes();
        assert_eq!(g.len(), 14);
        assert_eq!(g[0], 512);
        assert_eq!(*g.last().unwrap(), 4 << 20);
        let s = slog_sizes(512);
        assert_eq!(
            s.len(),
            15,
            "diskinfo -S runs 15 sizes for 512-byte sectors"
        );
        assert_eq!(*s.last().unwrap(), 8 << 20);
        assert_eq!(slog_sizes(4096).len(), 12);
        assert!(doubling(8, 4).is_empty());
    }

    #[test]
    fn offsets_are_aligned_in_range_and_spread() {
        let mut g = OffsetGen::new(1, 4096, 1 << 20, 8192).unwrap();
        let mut seen = std::collections::HashSet::new();
        for _ in 0..10_000 {
            let o = g.next_offset();
            assert_eq!(o % 8192, 0);
            assert!(o >= 4096 && o + 8192 <= 4096 + (1 << 20));
            seen.insert(o);
        }
        // region [4096, 1 MiB + 4096): aligned slots start at 8192 -> 127 slots
        assert_eq!(g.slots(), 127);
        assert_eq!(seen.len(), 127, "10k draws must hit every slot");
        assert!(OffsetGen::new(1, 0, 4096, 8192).is_none());
        // same seed, same sequence
        let mut a = OffsetGen::new(9, 0, 1 << 30, 4096).unwrap();
        let mut b = OffsetGen::new(9, 0, 1 << 30, 4096).unwrap();
        assert!((0..100).all(|_| a.next_offset() == b.next_offset()));
    }

    #[test]
    fn sequential_offsets_wrap() {
        assert_eq!(sequential_offset(100, 3000, 1000, 0), 100);
        assert_eq!(sequential_offset(100, 3000, 1000, 2), 2100);
        assert_eq!(sequential_offset(100, 3000, 1000, 3), 100);
    }

    #[test]
    fn chooser_hits_the_read_share() {
        let mut c = OpChooser::new(3, 70);
        let reads = (0..100_000).filter(|_| c.next_is_read()).count();
        assert!((69_000..71_000).contains(&reads), "{reads}");
        let mut c = OpChooser::new(3, 0);
        assert!((0..1000).all(|_| !c.next_is_read()));
        let mut c = OpChooser::new(3, 100);
        assert!((0..1000).all(|_| c.next_is_read()));
    }

    #[test]
    fn compressible_payloads_compress_as_asked_and_stay_unique() {
        for pct in [0u32, 25, 50, 75, 90] {
            let mut d = DataGen::compressible(7, 3, pct);
            let mut buf = vec![0u8; 64 << 10];
            d.fill(&mut buf);
            let first = buf.clone();
            d.stamp(&mut buf);
            for (a, b) in first.chunks(4096).zip(buf.chunks(4096)) {
                assert_ne!(a, b, "pct {pct}: every 4 KiB block must change");
                assert!(!b.iter().all(|&x| x == 0) && !b.iter().all(|&x| x == 0xff));
            }
            // LZ4 alone keeps about (100 - pct)% of each block (plus its framing;
            // minus the repeated 16-byte sector stamps, about 2.7% of a block)
            let share = lz4_share(7, pct);
            let want = (100 - pct) as f64 / 100.0;
            assert!(
                share >= want - 0.03 && share <= want + 0.05,
                "pct {pct}: LZ4 keeps {share:.3}, expected about {want:.2}"
            );
        }
    }

    #[test]
    fn payloads_are_random_unique_and_never_uniform() {
        let mut d = DataGen::new(5, 0);
        let mut buf = vec![0u8; 64 << 10];
        d.fill(&mut buf);
        let first = buf.clone();
        for s in buf.chunks(512) {
            assert!(!s.iter().all(|&b| b == 0) && !s.iter().all(|&b| b == 0xff));
        }
        d.stamp(&mut buf);
        assert_ne!(first, buf);
        for (a, b) in first.chunks(4096).zip(buf.chunks(4096)) {
            assert_ne!(a, b, "every 4 KiB block must change between payloads");
        }
        // random: roughly half the bits set
        let ones: u32 = buf.iter().map(|b| b.count_ones()).sum();
        let frac = ones as f64 / (buf.len() * 8) as f64;
        assert!((0.48..0.52).contains(&frac), "{frac}");
        // small buffers are stamped too
        let mut tiny = vec![0u8; 8];
        d.stamp(&mut tiny);
        assert!(tiny.iter().any(|&b| b != 0));
        // two generators with different ids differ
        let mut e = DataGen::new(5, 1);
        let mut other = vec![0u8; 64 << 10];
        e.fill(&mut other);
        assert_ne!(other, first);
    }
}
