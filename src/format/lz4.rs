//! LZ4 block decoding into a buffer of known size (the fragments of packed
//! blocks, `format::packed`). Pure, no IO, no allocation.
//!
//! Why not `lz4_flex::block::decompress_into`: its fast decoder copies a match
//! that overlaps its own output (offset < length) one byte at a time, and a
//! run of one byte (a zero tail, fio's `buffer_compress_percentage`, sparse
//! file-system blocks) is exactly such a match: 2 KiB of zeros cost ~7,000
//! instructions there. Here a match of offset 1 is a fill and any other
//! overlapping match is copied in chunks that double (the bytes already
//! written repeat with the match's period). The format is the LZ4 block
//! format (lz4_flex compresses, this decodes; the tests check both agree).
//!
//! Invariant: `decode` never reads or writes outside its slices and never
//! panics, whatever `src` holds; `Ok` means `dst` was written exactly whole
//! by the sequences of `src`, every byte of `src` consumed.

/// Why a fragment did not decode.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lz4Error {
    /// The input ends inside a sequence.
    Truncated,
    /// A match points before the start of the output (or its offset is 0).
    Offset,
    /// The output would be longer than the buffer.
    TooLong,
    /// The input ended before the buffer was full.
    TooShort,
}

impl std::fmt::Display for Lz4Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Lz4Error::Truncated => "lz4: input ends inside a sequence",
            Lz4Error::Offset => "lz4: match offset out of range",
            Lz4Error::TooLong => "lz4: output longer than its block",
            Lz4Error::TooShort => "lz4: output shorter than its block",
        })
    }
}

/// A length's extension bytes (after a nibble of 15): add bytes while they
/// are 255, then the first byte that is not.
#[inline]
fn extend_len(src: &[u8], i: &mut usize, mut len: usize) -> Result<usize, Lz4Error> {
    loop {
        let b = *src.get(*i).ok_or(Lz4Error::Truncated)?;
        *i += 1;
        len += b as usize;
        if b != 255 {
            return Ok(len);
        }
    }
}

/// Decode the LZ4 block `src` into `dst`, which it must fill exactly.
pub fn decode(src: &[u8], dst: &mut [u8]) -> Result<(), Lz4Error> {
    let mut i = 0;
    let mut o = 0;
    loop {
        let token = *src.get(i).ok_or(Lz4Error::Truncated)?;
        i += 1;
        let mut lit = (token >> 4) as usize;
        if lit == 15 {
            lit = extend_len(src, &mut i, lit)?;
        }
        if lit > 0 {
            let from = src.get(i..i + lit).ok_or(Lz4Error::Truncated)?;
            let to = dst.get_mut(o..o + lit).ok_or(Lz4Error::TooLong)?;
            to.copy_from_slice(from);
            i += lit;
            o += lit;
        }
        if i == src.len() {
            // the last sequence holds literals only
            break;
        }
        let off = match src.get(i..i + 2) {
            Some(b) => u16::from_le_bytes([b[0], b[1]]) as usize,
            None => return Err(Lz4Error::Truncated),
        };
        i += 2;
        if off == 0 || off > o {
            return Err(Lz4Error::Offset);
        }
        let mut len = (token & 15) as usize + 4;
        if token & 15 == 15 {
            len = extend_len(src, &mut i, len)?;
        }
        if len > dst.len() - o {
            return Err(Lz4Error::TooLong);
        }
        copy_match(dst, o, off, len);
        o += len;
    }
    // MUTANT: lz4-short-output-accepted s|o != dst.len()|o > dst.len()|
    if o != dst.len() {
        return Err(Lz4Error::TooShort);
    }
    Ok(())
}

/// Write `len` bytes at `o` of `dst`, each the byte `off` before it
/// (1 <= off <= o, o + len <= dst.len(): `decode` checked both).
#[inline]
fn copy_match(dst: &mut [u8], o: usize, off: usize, len: usize) {
    let from = o - off;
    if off >= len {
        dst.copy_within(from..from + len, o);
    } else if off == 1 {
        let b = dst[from];
        dst[o..o + len].fill(b);
    } else {
        // The output repeats with period `off` from `from` on: copy from
        // `from` as much as has been written past it (a multiple of `off`
        // each time), so every copy is disjoint and the chunks double.
        let mut done = 0;
        while done < len {
            let n = (off + done).min(len - done);
            dst.copy_within(from..from + n, o + done);
            done += n;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::{Rng, SeedableRng};

    /// Blocks of every shape LZ4 meets here: runs of one byte, short
    /// periods, text-like repeats, random bytes, zero tails.
    fn block(rng: &mut rand::rngs::SmallRng) -> Vec<u8> {
        let mut b = vec![0u8; 4096];
        let mut at = 0;
        while at < b.len() {
            let n = rng.gen_range(1..600).min(b.len() - at);
            match rng.gen_range(0..6) {
                0 => b[at..at + n].fill(rng.gen()),
                1 => rng.fill(&mut b[at..at + n]),
                2 => {
                    let period = rng.gen_range(2..40);
                    let pat: Vec<u8> = (0..period).map(|_| rng.gen()).collect();
                    for k in 0..n {
                        b[at + k] = pat[k % period];
                    }
                }
                3 if at > 0 => {
                    // a copy of something earlier (a long-distance match)
                    let from = rng.gen_range(0..at);
                    for k in 0..n {
                        b[at + k] = b[from + k];
                    }
                }
                4 => {
                    for k in 0..n {
                        b[at + k] = b"the quick brown fox "[rng.gen_range(0..20)];
                        if rng.gen_bool(0.7) {
                            b[at + k] = b"abcabcabd"[k % 9];
                        }
                    }
                }
                _ => {} // zeros
            }
            at += n;
        }
        b
    }

    #[test]
    fn decodes_what_lz4_flex_compresses() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(5);
        let mut out = vec![0u8; 4096];
        for _ in 0..3000 {
            let raw = block(&mut rng);
            let packed = lz4_flex::block::compress(&raw);
            out.fill(0xa5);
            decode(&packed, &mut out).unwrap();
            assert_eq!(out, raw);
        }
        // the edge shapes: all one byte, all random, period 2 and 17
        let mut shapes = vec![vec![0u8; 4096], vec![7u8; 4096]];
        let mut r = vec![0u8; 4096];
        rng.fill(&mut r[..]);
        shapes.push(r);
        shapes.push((0..4096).map(|k| (k % 2) as u8).collect());
        shapes.push((0..4096).map(|k| (k % 17) as u8 * 3).collect());
        for raw in shapes {
            let packed = lz4_flex::block::compress(&raw);
            decode(&packed, &mut out).unwrap();
            assert_eq!(out, raw);
        }
    }

    #[test]
    fn a_wrong_size_or_a_cut_input_is_an_error() {
        let mut rng = rand::rngs::SmallRng::seed_from_u64(6);
        for _ in 0..300 {
            let raw = block(&mut rng);
            let packed = lz4_flex::block::compress(&raw);
            let mut small = vec![0u8; 4095];
            assert!(decode(&packed, &mut small).is_err());
            let mut big = vec![0u8; 4097];
            assert!(decode(&packed, &mut big).is_err());
            let mut out = vec![0u8; 4096];
            let cut = rng.gen_range(0..packed.len());
            assert!(decode(&packed[..cut], &mut out).is_err(), "cut at {cut}");
        }
    }

    /// The LZ4 block format decoded the obvious way, a byte at a time.
    fn reference(src: &[u8], size: usize) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        let mut i = 0;
        let len = |i: &mut usize, mut n: usize| -> Option<usize> {
            loop {
                let b = *src.get(*i)?;
                *i += 1;
                n += b as usize;
                if b != 255 {
                    return Some(n);
                }
            }
        };
        loop {
            let token = *src.get(i)?;
            i += 1;
            let mut lit = (token >> 4) as usize;
            if lit == 15 {
                lit = len(&mut i, lit)?;
            }
            for _ in 0..lit {
                out.push(*src.get(i)?);
                i += 1;
            }
            if i == src.len() {
                break;
            }
            let off = *src.get(i)? as usize | (*src.get(i + 1)? as usize) << 8;
            i += 2;
            let mut m = (token & 15) as usize + 4;
            if token & 15 == 15 {
                m = len(&mut i, m)?;
            }
            if off == 0 || off > out.len() {
                return None;
            }
            for _ in 0..m {
                out.push(out[out.len() - off]);
            }
            if out.len() > size {
                return None;
            }
        }
        (out.len() == size).then_some(out)
    }

    #[test]
    fn garbage_never_panics_and_decodes_as_the_reference_does() {
        // valid blocks with bits flipped, and random bytes: accepted with the
        // reference's bytes or refused as the reference refuses
        let mut rng = rand::rngs::SmallRng::seed_from_u64(8);
        let mut ours = vec![0u8; 4096];
        let mut accepted = 0;
        for round in 0..20_000 {
            let mut src = if round % 2 == 0 {
                lz4_flex::block::compress(&block(&mut rng))
            } else {
                (0..rng.gen_range(0..64)).map(|_| rng.gen()).collect()
            };
            for _ in 0..rng.gen_range(0..3) {
                if !src.is_empty() {
                    let k = rng.gen_range(0..src.len());
                    src[k] ^= 1 << rng.gen_range(0..8);
                }
            }
            match (decode(&src, &mut ours), reference(&src, 4096)) {
                (Ok(()), Some(want)) => {
                    accepted += 1;
                    assert!(
                        ours == want,
                        "round {round}: other bytes than the reference"
                    );
                }
                (Err(_), None) => {}
                (a, b) => panic!("round {round}: ours {a:?}, the reference {}", b.is_some()),
            }
        }
        assert!(
            accepted > 1000,
            "only {accepted} inputs decoded: the test tests little"
        );
    }
}
