//! FlashSim: a simulated flash SSD. A page-mapped FTL (4 KiB pages, configurable
//! pages per erase block and over-provisioning) with greedy GC and separate host
//! and GC write frontiers, counting host page writes, NAND page programs and
//! erases. Content is kept by the replay `Store` (pattern blocks cost one byte).
//! It implements `Media`, so the engine can run on it (sluice over flash), and has
//! `write_pages` / `trim_pages` for replaying a trace on the bare device.
//!
//! Invariant: l2p and p2l are inverse on valid pages, `valid[b]` counts exactly
//! the valid pages of erase block b, and nand_programs = host_pages + gc_pages.

use super::replay::Store;
use super::{check_range, Media};
use parking_lot::Mutex;
use std::collections::VecDeque;
use std::io;

const PAGE: u64 = 4096;
const NONE: u32 = u32::MAX;

/// Device over-provisioning presets: spare as a fraction of the user capacity.
pub const OP_CONSUMER: f64 = 0.07;
pub const OP_ENTERPRISE: f64 = 0.28;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize)]
pub struct FlashCounters {
    pub host_pages: u64,
    pub nand_programs: u64,
    pub gc_pages: u64,
    pub erases: u64,
    pub trimmed_pages: u64,
}

impl FlashCounters {
    /// Device-internal write amplification: NAND programs / host page writes.
    pub fn wa(&self) -> f64 {
        if self.host_pages == 0 {
            0.0
        } else {
            self.nand_programs as f64 / self.host_pages as f64
        }
    }
}

pub struct Ftl {
    ppb: u32,
    l2p: Vec<u32>,
    p2l: Vec<u32>,
    valid: Vec<u32>,
    /// Erase block is open or free (not a GC candidate).
    busy: Vec<bool>,
    free: VecDeque<u32>,
    /// (block, next page) of the host and GC frontiers.
    open: [Option<(u32, u32)>; 2],
    pub c: FlashCounters,
}

impl Ftl {
    /// `logical_pages` exported, `op` spare as a fraction of them.
    pub fn new(logical_pages: u64, pages_per_block: u32, op: f64) -> io::Result<Ftl> {
        if pages_per_block == 0 || !(0.0..=4.0).contains(&op) {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "flash-sim needs pages_per_block > 0 and 0 <= op <= 4",
            ));
        }
        let ppb = pages_per_block as u64;
        let phys_pages = (logical_pages as f64 * (1.0 + op)).ceil() as u64;
        let blocks = phys_pages
            .div_ceil(ppb)
            .max(logical_pages.div_ceil(ppb) + 3);
        if blocks * ppb >= NONE as u64 {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "flash-sim too large (2^32 pages)",
            ));
        }
        Ok(Ftl {
            ppb: pages_per_block,
            l2p: vec![NONE; logical_pages as usize],
            p2l: vec![NONE; (blocks * ppb) as usize],
            valid: vec![0; blocks as usize],
            busy: vec![true; blocks as usize],
            free: (0..blocks as u32).collect(),
            open: [None, None],
            c: FlashCounters::default(),
        })
    }

    pub fn logical_pages(&self) -> u64 {
        self.l2p.len() as u64
    }
    pub fn erase_blocks(&self) -> u32 {
        self.valid.len() as u32
    }

    fn invalidate(&mut self, lpn: u64) {
        let old = self.l2p[lpn as usize];
        if old != NONE {
            self.p2l[old as usize] = NONE;
            self.valid[(old / self.ppb) as usize] -= 1;
            self.l2p[lpn as usize] = NONE;
        }
    }

    fn program(&mut self, frontier: usize, lpn: u64) {
        let (blk, page) = match self.open[frontier] {
            Some((b, p)) if p < self.ppb => (b, p),
            other => {
                if let Some((b, _)) = other {
                    self.busy[b as usize] = false;
                }
                let b = self
                    .free
                    .pop_front()
                    .expect("flash-sim: GC keeps a free block");
                (b, 0)
            }
        };
        let ppn = blk * self.ppb + page;
        self.p2l[ppn as usize] = lpn as u32;
        self.l2p[lpn as usize] = ppn;
        self.valid[blk as usize] += 1;
        self.open[frontier] = Some((blk, page + 1));
        self.c.nand_programs += 1;
    }

    /// Greedy: erase the closed block with the fewest valid pages after moving them.
    fn gc_one(&mut self) -> bool {
        let mut best: Option<(u32, u32)> = None;
        for (b, &v) in self.valid.iter().enumerate() {
            if !self.busy[b] && best.is_none_or(|(bv, _)| v < bv) {
                best = Some((v, b as u32));
                if v == 0 {
                    break;
                }
            }
        }
        let Some((v, victim)) = best else {
            return false;
        };
        if v == self.ppb {
            return false;
        }
        self.busy[victim as usize] = true;
        let base = victim * self.ppb;
        for p in base..base + self.ppb {
            let lpn = self.p2l[p as usize];
            if lpn != NONE {
                self.invalidate(lpn as u64);
                self.program(1, lpn as u64);
                self.c.gc_pages += 1;
            }
        }
        debug_assert_eq!(self.valid[victim as usize], 0);
        self.c.erases += 1;
        self.free.push_back(victim);
        true
    }

    /// Host writes `n` pages from `lpn`.
    pub fn write_pages(&mut self, lpn: u64, n: u64) {
        for l in lpn..lpn + n {
            self.c.host_pages += 1;
            self.invalidate(l);
            // Two free blocks: one may become the GC frontier while the host one fills.
            while self.free.len() < 3 {
                if !self.gc_one() {
                    break;
                }
            }
            self.program(0, l);
        }
    }

    pub fn trim_pages(&mut self, lpn: u64, n: u64) {
        for l in lpn..lpn + n {
            if self.l2p[l as usize] != NONE {
                self.c.trimmed_pages += 1;
            }
            self.invalidate(l);
        }
    }
}

pub struct FlashSim {
    store: Mutex<Store>,
    ftl: Mutex<Ftl>,
    pages_per_block: u32,
    op: f64,
}

impl FlashSim {
    /// A device exporting `len` bytes (rounded down to 4 KiB pages).
    pub fn new(len: u64, pages_per_block: u32, op: f64) -> io::Result<FlashSim> {
        let pages = len / PAGE;
        Ok(FlashSim {
            store: Mutex::new(Store::new(pages * PAGE)),
            ftl: Mutex::new(Ftl::new(pages, pages_per_block, op)?),
            pages_per_block,
            op,
        })
    }
    pub fn counters(&self) -> FlashCounters {
        self.ftl.lock().c
    }
    /// Zero the counters (e.g. after preconditioning).
    pub fn reset_counters(&self) {
        self.ftl.lock().c = FlashCounters::default();
    }
    pub fn with_ftl<R>(&self, f: impl FnOnce(&mut Ftl) -> R) -> R {
        f(&mut self.ftl.lock())
    }
}

impl Media for FlashSim {
    fn len(&self) -> u64 {
        self.store.lock().len()
    }
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.store.lock().read(buf, offset)
    }
    fn write_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        check_range(self.len(), offset, buf.len())?;
        self.store.lock().write(buf, offset)?;
        if !buf.is_empty() {
            let first = offset / PAGE;
            let last = (offset + buf.len() as u64 - 1) / PAGE;
            self.ftl.lock().write_pages(first, last - first + 1);
        }
        Ok(())
    }
    fn flush(&self) -> io::Result<()> {
        Ok(())
    }
    /// A discard is a TRIM to the FTL: whole pages inside the range stop being
    /// valid (GC no longer copies them); the bytes stay readable.
    fn discard(&self, offset: u64, len: u64) -> io::Result<bool> {
        check_range(self.len(), offset, len as usize)?;
        let (first, end) = (offset.div_ceil(PAGE), (offset + len) / PAGE);
        if first < end {
            self.ftl.lock().trim_pages(first, end - first);
        }
        Ok(true)
    }
    fn describe(&self) -> String {
        format!(
            "flash-sim ({} bytes, {} pages/erase block, {:.0}% OP)",
            self.len(),
            self.pages_per_block,
            self.op * 100.0
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accounting_on_a_known_sequence() {
        // 8 logical pages, 4 pages per block, 50% OP -> 3 blocks, raised to 2+3 = 5.
        let mut f = Ftl::new(8, 4, 0.5).unwrap();
        assert_eq!(f.erase_blocks(), 5);
        f.write_pages(0, 8); // blocks 0 and 1; free 2, 3, 4
        assert_eq!((f.c.host_pages, f.c.nand_programs, f.c.erases), (8, 8, 0));
        // Page 0 -> block 2 (free 3, 4). Page 1: only two free blocks left, so GC
        // cleans block 0 (2 valid: pages 2, 3) into a GC block (3), erases it; block 1
        // (4 valid) cannot gain, so GC stops; page 1 joins block 2.
        f.write_pages(0, 2);
        assert_eq!(f.c.host_pages, 10);
        assert_eq!(f.c.gc_pages, 2);
        assert_eq!(f.c.erases, 1);
        assert_eq!(f.c.nand_programs, 12);
        assert!((f.c.wa() - 1.2).abs() < 1e-12);
        // Random overwrites keep the invariants.
        let mut x = 12345u64;
        for _ in 0..2000 {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            f.write_pages((x >> 33) % 8, 1);
        }
        assert_eq!(f.c.nand_programs, f.c.host_pages + f.c.gc_pages);
        assert!(f.c.gc_pages > 2 && f.c.wa() > 1.0);
        assert_eq!(f.valid.iter().sum::<u32>(), 8);
        for (l, &p) in f.l2p.iter().enumerate() {
            assert_eq!(f.p2l[p as usize], l as u32);
        }
        f.trim_pages(0, 8);
        assert_eq!(f.valid.iter().sum::<u32>(), 0);
        assert_eq!(f.c.trimmed_pages, 8);
    }

    #[test]
    fn sequential_overwrite_has_no_gc_copies() {
        // Block-aligned sequential overwrites (what sluice sends a device) never copy.
        let m = FlashSim::new(256 * PAGE, 8, OP_ENTERPRISE).unwrap();
        let buf = vec![1u8; 8 * PAGE as usize];
        for _round in 0..10 {
            for i in 0..32 {
                m.write_at(&buf, i * 8 * PAGE).unwrap();
            }
        }
        let c = m.counters();
        assert_eq!(c.host_pages, 2560);
        assert_eq!(c.nand_programs, 2560);
        assert_eq!(c.gc_pages, 0);
        assert!(c.erases > 0);
        let mut r = vec![0u8; PAGE as usize];
        m.read_at(&mut r, 5 * PAGE).unwrap();
        assert_eq!(r, vec![1u8; PAGE as usize]);
    }
}
