//! What to compress (issue 19): the rule that lets incompressible data skip
//! LZ4 almost for free. The bytes compressed data takes on the media are
//! `format::packed`'s; this module only decides whether a block is worth a try.
//!
//! Rule: a quick test first: `QUICK` bytes, one every 64, nearly all
//! distinct (at least `QUICK_DISTINCT`) is random data, skipped after a few
//! hundred instructions. Otherwise estimate the block's byte entropy from a
//! strided sample of `SAMPLE` bytes and try LZ4 only below
//! `MAX_BITS_PER_BYTE` (lab47/lsvd's 7 bits per byte). Invariant: the decision depends only on the block's
//! bytes (a pure function), so a replay or GC never needs it again: what was
//! stored says what it is.

use crate::format::BLOCK_BYTES;

/// A volume's compression, chosen at create (`sluice create --compress`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Compression {
    /// Format v1 map (4 bytes per block), nothing compressed.
    #[default]
    Off,
    /// LZ4 fragments (format v2 `COMPRESSION`: 5-byte map values).
    Lz4,
}

impl std::str::FromStr for Compression {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "off" | "none" => Ok(Compression::Off),
            "lz4" => Ok(Compression::Lz4),
            _ => Err(format!("compression {s:?}: expected lz4 or off")),
        }
    }
}

/// Bytes sampled per 4 KiB block (every 16th byte).
pub const SAMPLE: usize = 256;
/// Estimated entropy above which a block is stored raw without trying LZ4.
/// A uniform random block's 256-byte sample estimates about 7.2 bits per
/// byte (the estimate is biased low by the small sample); text, file-system
/// metadata and half-zero blocks estimate well under 7.
pub const MAX_BITS_PER_BYTE: f64 = 7.0;

/// `c * log2(c)` for every count a sample can hold (the entropy sum without
/// a logarithm per block).
/// In fixed point (16 fractional bits), so the sum is integer adds.
fn c_log_c() -> &'static [u32; SAMPLE + 1] {
    static TABLE: std::sync::OnceLock<[u32; SAMPLE + 1]> = std::sync::OnceLock::new();
    TABLE.get_or_init(|| {
        let mut t = [0u32; SAMPLE + 1];
        for (c, v) in t.iter_mut().enumerate().skip(1) {
            *v = (c as f64 * (c as f64).log2() * FIXED).round() as u32;
        }
        t
    })
}
const FIXED: f64 = 65536.0;

/// Shannon entropy of the sample, in bits per byte (0..=8):
/// `log2(n) - sum(c log2 c) / n` over the byte counts `c` of `n` samples.
pub fn sampled_entropy(block: &[u8]) -> f64 {
    assert_eq!(block.len(), BLOCK_BYTES, "one block");
    let step = BLOCK_BYTES / SAMPLE;
    let mut counts = [0u16; 256];
    for i in (0..BLOCK_BYTES).step_by(step) {
        counts[block[i] as usize] += 1;
    }
    let table = c_log_c();
    let sum: u32 = counts.iter().map(|&c| table[c as usize]).sum();
    (SAMPLE as f64).log2() - sum as f64 / FIXED / SAMPLE as f64
}

/// Bytes the quick test looks at (every 64th byte of a block).
pub const QUICK: usize = 64;
/// Distinct values among the `QUICK` bytes at or above which a block is
/// taken as random without the entropy sample. 64 uniform random bytes
/// repeat about 7.9 values (a birthday count, 64 * 63 / 2 / 256), so about
/// 83% of random blocks have at most 9 repeats and stop here, after about
/// 300 instructions instead of the sample's 2,200. A block LZ4 can keep (at
/// most `KEEP_MAX`, 7/8 of a block) has an eighth of its bytes or more
/// repeating something (zeros, text, a pattern), about 8 repeated samples
/// on top of the random ones, so it nearly always goes on to the entropy
/// sample. Nearly: in `what_is_skipped_would_not_have_been_kept` 2 of the
/// 3,099 skipped blocks that mix random bytes and zeros would have been
/// kept, at 85% of a block (the entropy sample alone missed none); none
/// below 3/4 of a block.
pub const QUICK_DISTINCT: u32 = 55;

/// The quick test: `QUICK` strided bytes nearly all distinct.
pub fn looks_random(block: &[u8]) -> bool {
    let block: &[u8; BLOCK_BYTES] = block.try_into().expect("one block");
    // a byte per value (a store per sample, no read-modify-write chain),
    // counted at the end eight bytes at a time: each byte is 0 or 1, so the
    // 32 words added lane by lane leave at most 32 in a lane (no carry), and
    // one multiply sums the eight lanes into the top byte (at most QUICK =
    // 64 values are seen, so the sum fits it)
    let mut seen = [0u8; 256];
    for i in 0..QUICK {
        seen[block[i * (BLOCK_BYTES / QUICK)] as usize] = 1;
    }
    let lanes: u64 = seen
        .chunks_exact(8)
        .map(|w| u64::from_ne_bytes(w.try_into().expect("8 bytes")))
        .sum();
    let distinct = (lanes.wrapping_mul(0x0101_0101_0101_0101) >> 56) as u32;
    // MUTANT: quick-test-threshold s|distinct >= QUICK_DISTINCT|distinct >= 1|
    distinct >= QUICK_DISTINCT
}

/// Whether LZ4 is worth trying on this block.
pub fn worth_trying(block: &[u8]) -> bool {
    !looks_random(block) && sampled_entropy(block) < MAX_BITS_PER_BYTE
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// The quick test's word-wise count is the plain count of distinct
    /// sampled values, on random blocks and on blocks of few values.
    #[test]
    fn the_quick_test_counts_distinct_values_exactly() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(9);
        let mut raw = vec![0u8; BLOCK_BYTES];
        for round in 0..2000 {
            rng.fill(&mut raw[..]);
            // some rounds: only `round % 80` different values
            if round % 2 == 1 {
                let k = (round % 80 + 1) as u8;
                raw.iter_mut().for_each(|b| *b %= k);
            }
            let mut seen = std::collections::HashSet::new();
            for i in 0..QUICK {
                seen.insert(raw[i * (BLOCK_BYTES / QUICK)]);
            }
            let plain = seen.len() as u32 >= QUICK_DISTINCT;
            assert_eq!(
                looks_random(&raw),
                plain,
                "round {round}: {} distinct",
                seen.len()
            );
        }
    }

    #[test]
    fn random_blocks_skip_and_compressible_ones_are_tried() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(5);
        let mut raw = vec![0u8; BLOCK_BYTES];
        for _ in 0..100 {
            rng.fill(&mut raw[..]);
            assert!(!worth_trying(&raw), "{}", sampled_entropy(&raw));
        }
        // fio's buffer_compress_percentage=50: random bytes, then zeros
        rng.fill(&mut raw[..]);
        raw[BLOCK_BYTES / 2..].fill(0);
        assert!(worth_trying(&raw), "{}", sampled_entropy(&raw));
        let text = b"The quick brown fox jumps over the lazy dog. 0123456789\n";
        for (i, b) in raw.iter_mut().enumerate() {
            *b = text[i % text.len()];
        }
        assert!(worth_trying(&raw));
    }

    #[test]
    fn what_is_skipped_would_not_have_been_kept() {
        // the rule never skips a block LZ4 would have kept: over blocks of
        // every share of random bytes (at the front, or spread in runs
        // between zeros), a skipped one fails KEEP_MAX, except rarely one
        // the quick test took for random, which saves less than a quarter
        use crate::format::packed::Compressor;
        let mut rng = rand::rngs::SmallRng::seed_from_u64(6);
        let mut z = Compressor::default();
        let mut raw = vec![0u8; BLOCK_BYTES];
        let mut skipped = [0u32; 2];
        let mut misses = Vec::new();
        for round in 0..1000 {
            for share in 0..=32 {
                let random = share * BLOCK_BYTES / 32;
                if round % 2 == 0 {
                    rng.fill(&mut raw[..random]);
                    raw[random..].fill(0);
                } else {
                    // runs of 64 bytes, random or zero, in that proportion
                    for run in raw.chunks_mut(64) {
                        if rng.gen_range(0..32) < share {
                            rng.fill(run);
                        } else {
                            run.fill(0);
                        }
                    }
                }
                if !worth_trying(&raw) {
                    skipped[looks_random(&raw) as usize] += 1;
                    if let Some(c) = z.compress(&raw) {
                        misses.push((share, c.len()));
                    }
                }
            }
        }
        // both tests did skip something
        assert!(skipped[0] > 0 && skipped[1] > 0, "{skipped:?}");
        assert!(
            misses.len() * 1000 <= (skipped[0] + skipped[1]) as usize
                && misses.iter().all(|&(_, n)| n > BLOCK_BYTES * 3 / 4),
            "skipped {skipped:?} (entropy sample, quick test), would have been kept: {misses:?}"
        );
    }

    #[test]
    fn most_random_blocks_stop_at_the_quick_test() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let mut raw = vec![0u8; BLOCK_BYTES];
        let quick = (0..1000)
            .filter(|_| {
                rng.fill(&mut raw[..]);
                looks_random(&raw)
            })
            .count();
        // about 83% expected (a birthday count: `QUICK_DISTINCT`)
        assert!((750..920).contains(&quick), "{quick} of 1000");
    }
}
