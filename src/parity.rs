//! Parity math for stripe sets (issue 20): P (XOR) and Q (the RAID-6
//! syndrome over GF(2^8)), encode, reconstruction of up to two lost shards,
//! and the self-healing search (`heal`) that finds which member of a row is
//! wrong when every member answered but a block failed its CRC. Pure: no IO,
//! no allocation on the encode path.
//!
//! Conventions are the Linux kernel's `lib/raid6` (so a future comparison with
//! md raid6 reads the same bytes): the field is GF(2^8) with the polynomial
//! x^8 + x^4 + x^3 + x^2 + 1 (0x11d), the generator is g = {02}, and for data
//! shards D_0..D_{k-1}
//!
//! ```text
//! P = D_0 ^ D_1 ^ ... ^ D_{k-1}
//! Q = g^0·D_0 ^ g^1·D_1 ^ ... ^ g^{k-1}·D_{k-1}
//! ```
//!
//! computed, as `raid6_int.uc`'s `gen_syndrome`, by Horner's rule from the last
//! data shard down (`q = 2·q ^ D_z`). Each pass is fused: a step of every
//! shard (64 to 256 bytes) is read into accumulators the compiler keeps in
//! vector registers, a byte per lane, and P (and Q) written once per step;
//! on x86-64 the same kernels run compiled for AVX2 (wider steps) when the
//! CPU has it (`is_x86_feature_detected`), else as plain (SSE2) code.
//!
//! Shards of a row are indexed `0..k` (data), `k` (P), `k + 1` (Q).
//! Invariant: every function either writes the exact bytes the definitions
//! above give, or returns a `ParityError` (never panics) on shard counts,
//! lengths or lost-shard lists it cannot serve. `oracle` is a plain scalar
//! implementation of the same definitions, kept for the tests.

/// Most data shards a row may have: g^i must be distinct for every data
/// index, and g = {02} has order 255 in GF(2^8).
pub const MAX_DATA: usize = 255;
/// Most parity shards (P and Q).
pub const MAX_PARITY: usize = 2;

/// Why parity work was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ParityError {
    #[error("{data} data and {parity} parity shards: need 1..={MAX_DATA} data and 0..={MAX_PARITY} parity")]
    Count { data: usize, parity: usize },
    #[error("shard {index} is {len} bytes, the row's shards are {expected}")]
    Length {
        index: usize,
        len: usize,
        expected: usize,
    },
    #[error("lost shard {0} is out of range or named twice")]
    BadLost(usize),
    #[error("{lost} shards lost, {parity} parity shards can rebuild at most {parity}")]
    TooMany { lost: usize, parity: usize },
}

/// GF(2^8) with the kernel's polynomial, table driven.
pub mod gf {
    /// The field polynomial x^8 + x^4 + x^3 + x^2 + 1 (lib/raid6, `mktables.c`).
    pub const POLY: u16 = 0x11d;

    const fn tables() -> ([u8; 512], [u8; 256]) {
        let mut exp = [0u8; 512];
        let mut log = [0u8; 256];
        let mut x: u16 = 1;
        let mut i = 0;
        while i < 255 {
            exp[i] = x as u8;
            exp[i + 255] = x as u8;
            log[x as usize] = i as u8;
            x <<= 1;
            if x & 0x100 != 0 {
                x ^= POLY;
            }
            i += 1;
        }
        // exp[510], exp[511] stay 0: never indexed (log sums are <= 508).
        (exp, log)
    }
    const TABLES: ([u8; 512], [u8; 256]) = tables();
    /// g^i for i in 0..510 (the kernel's `raid6_gfexp`, repeated once).
    pub static EXP: [u8; 512] = TABLES.0;
    /// log_g(x) for x != 0 (`raid6_gflog`); LOG[0] is meaningless.
    pub static LOG: [u8; 256] = TABLES.1;

    /// a·b.
    #[inline]
    pub fn mul(a: u8, b: u8) -> u8 {
        if a == 0 || b == 0 {
            0
        } else {
            EXP[LOG[a as usize] as usize + LOG[b as usize] as usize]
        }
    }

    /// 1/a; `None` for 0.
    pub fn inv(a: u8) -> Option<u8> {
        (a != 0).then(|| EXP[255 - LOG[a as usize] as usize])
    }

    /// g^i.
    #[inline]
    pub fn exp2(i: usize) -> u8 {
        EXP[i % 255]
    }

    /// The 256-entry table of x -> c·x (the kernel's `raid6_gfmul[c]`).
    pub fn mul_table(c: u8) -> [u8; 256] {
        let mut t = [0u8; 256];
        for (x, v) in t.iter_mut().enumerate() {
            *v = mul(c, x as u8);
        }
        t
    }

    /// 2·x in each of the eight byte lanes of a word (`raid6_int.uc`'s
    /// `SHLBYTE(v) ^ (MASK(v) & NBYTES(0x1d))`).
    #[inline(always)]
    pub fn mul2_lanes(v: u64) -> u64 {
        const HIGH: u64 = 0x8080_8080_8080_8080;
        let high = v & HIGH;
        let mask = (high << 1).wrapping_sub(high >> 7);
        ((v << 1) & !0x0101_0101_0101_0101) ^ (mask & 0x1d1d_1d1d_1d1d_1d1d)
    }
}

/// The same definitions, bit by bit and byte by byte: slow, obviously right,
/// the oracle the tests hold the fast code to.
pub mod oracle {
    /// a·b by shift-and-add, reducing by `gf::POLY` (carry-less multiply).
    pub fn mul(a: u8, b: u8) -> u8 {
        let (mut a, mut b, mut r) = (a as u16, b, 0u16);
        while b != 0 {
            if b & 1 != 0 {
                r ^= a;
            }
            a <<= 1;
            if a & 0x100 != 0 {
                a ^= super::gf::POLY;
            }
            b >>= 1;
        }
        r as u8
    }

    /// 2^i by repeated multiplication.
    pub fn pow2(i: usize) -> u8 {
        (0..i).fold(1u8, |x, _| mul(x, 2))
    }

    /// P and Q of equal-length data shards, byte by byte from the sums.
    pub fn pq(data: &[&[u8]]) -> (Vec<u8>, Vec<u8>) {
        let len = data.first().map_or(0, |d| d.len());
        let mut p = vec![0u8; len];
        let mut q = vec![0u8; len];
        for (i, d) in data.iter().enumerate() {
            let c = pow2(i);
            for j in 0..len {
                p[j] ^= d[j];
                q[j] ^= mul(c, d[j]);
            }
        }
        (p, q)
    }
}

fn check_lengths(shards: &[&[u8]], len: usize, first: usize) -> Result<(), ParityError> {
    for (i, s) in shards.iter().enumerate() {
        if s.len() != len {
            return Err(ParityError::Length {
                index: first + i,
                len: s.len(),
                expected: len,
            });
        }
    }
    Ok(())
}

/// `dst ^= src`, word-wise (the compiler vectorises the zip).
#[inline]
fn xor_into(dst: &mut [u8], src: &[u8]) {
    for (a, b) in dst.iter_mut().zip(src) {
        *a ^= *b;
    }
}

/// Bytes of each shard per step of the fused XOR (P), plain and with
/// AVX2: the compiler keeps a step in vector registers across the shards
/// (eight of SSE2's sixteen, eight of AVX2's sixteen).
const XOR_STEP: usize = 128;
const XOR_STEP_AVX2: usize = 256;
/// The same for P and Q together (two accumulators and the multiply's
/// temporaries).
const PQ_STEP: usize = 64;
const PQ_STEP_AVX2: usize = 128;

/// `out` = the XOR of `srcs` (equal lengths, checked by the caller), in one
/// pass: each step of `out` is read from every source and written once
/// (before: a copy and a pass over `out` per further source).
fn xor_of(srcs: &[&[u8]], out: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above); the function is
        // the portable kernel compiled with AVX2 enabled.
        return unsafe { xor_of_avx2(srcs, out) };
    }
    xor_kernel::<XOR_STEP>(srcs, out)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn xor_of_avx2(srcs: &[&[u8]], out: &mut [u8]) {
    xor_kernel::<XOR_STEP_AVX2>(srcs, out)
}

#[inline(always)]
fn xor_kernel<const W: usize>(srcs: &[&[u8]], out: &mut [u8]) {
    let len = out.len();
    let whole = len / W * W;
    for (k, o) in out[..whole].chunks_exact_mut(W).enumerate() {
        let at = k * W;
        let mut acc = [0u8; W];
        for s in srcs {
            let w: &[u8; W] = s[at..at + W].try_into().expect("a whole step");
            for (a, b) in acc.iter_mut().zip(w) {
                *a ^= *b;
            }
        }
        o.copy_from_slice(&acc);
    }
    for j in whole..len {
        out[j] = srcs.iter().fold(0, |a, s| a ^ s[j]);
    }
}

/// P = XOR of the data shards (RAID-5's parity, RAID-6's first).
pub fn encode_p(data: &[&[u8]], p: &mut [u8]) -> Result<(), ParityError> {
    if data.is_empty() || data.len() > MAX_DATA {
        return Err(ParityError::Count {
            data: data.len(),
            parity: 1,
        });
    }
    check_lengths(data, p.len(), 0)?;
    xor_of(data, p);
    Ok(())
}

/// P and Q of the data shards (RAID-6), one pass over the data.
pub fn encode_pq(data: &[&[u8]], p: &mut [u8], q: &mut [u8]) -> Result<(), ParityError> {
    if data.is_empty() || data.len() > MAX_DATA {
        return Err(ParityError::Count {
            data: data.len(),
            parity: 2,
        });
    }
    let len = p.len();
    check_lengths(data, len, 0)?;
    if q.len() != len {
        return Err(ParityError::Length {
            index: data.len() + 1,
            len: q.len(),
            expected: len,
        });
    }
    syndromes(data, &[], p, q);
    Ok(())
}

/// P and Q of `data` with the shards in `skip` taken as zero (the kernel's
/// `gen_syndrome` with those disks pointed at the zero page), by Horner's
/// rule from the last shard down. Lengths are the caller's to check.
fn syndromes(data: &[&[u8]], skip: &[usize], p: &mut [u8], q: &mut [u8]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2 (checked just above); the function is
        // the portable kernel compiled with AVX2 enabled.
        return unsafe { syndromes_avx2(data, skip, p, q) };
    }
    syndromes_kernel::<PQ_STEP>(data, skip, p, q)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn syndromes_avx2(data: &[&[u8]], skip: &[usize], p: &mut [u8], q: &mut [u8]) {
    syndromes_kernel::<PQ_STEP_AVX2>(data, skip, p, q)
}

/// 2·x in GF(2^8), written so the compiler vectorises it a byte per lane
/// (add, compare, and, xor): the shift out of bit 7 reduced by 0x1d.
#[inline(always)]
fn mul2(x: u8) -> u8 {
    // MUTANT: fused-mul2-wrong-reduction s|& 0x1d)|& 0x1c)|
    x.wrapping_add(x) ^ (((x as i8) >> 7) as u8 & 0x1d)
}

#[inline(always)]
fn syndromes_kernel<const W: usize>(data: &[&[u8]], skip: &[usize], p: &mut [u8], q: &mut [u8]) {
    let len = p.len();
    let whole = len / W * W;
    let mut o = 0;
    while o < whole {
        let mut wp = [0u8; W];
        let mut wq = [0u8; W];
        for (z, d) in data.iter().enumerate().rev() {
            if skip.contains(&z) {
                for x in wq.iter_mut() {
                    *x = mul2(*x);
                }
                continue;
            }
            let s: &[u8; W] = d[o..o + W].try_into().expect("a whole step");
            for i in 0..W {
                wp[i] ^= s[i];
                wq[i] = mul2(wq[i]) ^ s[i];
            }
        }
        p[o..o + W].copy_from_slice(&wp);
        q[o..o + W].copy_from_slice(&wq);
        o += W;
    }
    for j in whole..len {
        let (mut bp, mut bq) = (0u8, 0u8);
        for (z, d) in data.iter().enumerate().rev() {
            let v = if skip.contains(&z) { 0 } else { d[j] };
            bp ^= v;
            bq = gf::mul(bq, 2) ^ v;
        }
        p[j] = bp;
        q[j] = bq;
    }
}

/// Parity of a row with `parity.len()` (0, 1 or 2) parity shards: nothing,
/// P, or P and Q.
pub fn encode(data: &[&[u8]], parity: &mut [&mut [u8]]) -> Result<(), ParityError> {
    match parity {
        [] => {
            if data.is_empty() || data.len() > MAX_DATA {
                return Err(ParityError::Count {
                    data: data.len(),
                    parity: 0,
                });
            }
            let len = data[0].len();
            check_lengths(data, len, 0)
        }
        [p] => encode_p(data, p),
        [p, q] => encode_pq(data, p, q),
        _ => Err(ParityError::Count {
            data: data.len(),
            parity: parity.len(),
        }),
    }
}

/// `dst = table[dst]`: multiply every byte by the table's constant.
fn mul_in_place(dst: &mut [u8], table: &[u8; 256]) {
    for b in dst.iter_mut() {
        *b = table[*b as usize];
    }
}

/// Rebuild the shards named in `lost` (indices into `shards`: `0..data` data,
/// `data` P, `data + 1` Q) from the others, in place. `shards` holds the
/// whole row (`data` + parity shards, equal lengths); the lost shards'
/// bytes are ignored and overwritten. Up to as many shards as there is
/// parity: any one of data, P or Q, and any two (data+data, data+P,
/// data+Q, P+Q) with P+Q.
pub fn reconstruct(
    shards: &mut [&mut [u8]],
    data: usize,
    lost: &[usize],
) -> Result<(), ParityError> {
    let parity = shards.len().wrapping_sub(data);
    if data == 0 || data > MAX_DATA || shards.len() < data || parity > MAX_PARITY {
        return Err(ParityError::Count { data, parity });
    }
    let len = shards[0].len();
    for (i, s) in shards.iter().enumerate() {
        if s.len() != len {
            return Err(ParityError::Length {
                index: i,
                len: s.len(),
                expected: len,
            });
        }
    }
    for (n, &l) in lost.iter().enumerate() {
        if l >= shards.len() || lost[..n].contains(&l) {
            return Err(ParityError::BadLost(l));
        }
    }
    if lost.len() > parity {
        return Err(ParityError::TooMany {
            lost: lost.len(),
            parity,
        });
    }
    let (pi, qi) = (data, data + 1);
    // Take the lost shards out, so the rest can be read while they are written.
    let mut out: Vec<(usize, &mut [u8])> = lost
        .iter()
        .map(|&l| (l, std::mem::take(&mut shards[l])))
        .collect();
    out.sort_by_key(|(l, _)| *l);
    let res = {
        let view: Vec<&[u8]> = shards.iter().map(|s| &**s).collect();
        let d = &view[..data];
        match out.as_mut_slice() {
            [] => Ok(()),
            // One data shard: XOR of P and the other data.
            [(a, x)] if *a < data && parity >= 1 => {
                let mut srcs: Vec<&[u8]> = Vec::with_capacity(data);
                srcs.push(view[pi]);
                srcs.extend(
                    d.iter()
                        .enumerate()
                        .filter(|(z, _)| z != a)
                        .map(|(_, s)| *s),
                );
                xor_of(&srcs, x);
                Ok(())
            }
            // P alone, or P and Q: recompute from the data.
            [(a, x)] if *a == pi => encode_p(d, x),
            [(a, x)] if *a == qi => {
                syndromes(d, &[], &mut vec![0u8; len], x);
                Ok(())
            }
            [(a, x), (b, y)] if *a == pi && *b == qi => encode_pq(d, x, y),
            // A data shard and Q: the data from P, then Q.
            [(a, x), (b, y)] if *a < data && *b == qi => {
                x.copy_from_slice(view[pi]);
                for (z, s) in d.iter().enumerate() {
                    if z != *a {
                        xor_into(x, s);
                    }
                }
                let mut full: Vec<&[u8]> = d.to_vec();
                full[*a] = x;
                syndromes(&full, &[], &mut vec![0u8; len], y);
                Ok(())
            }
            // A data shard and P: the data from Q (D_a = (Q ^ Q_rest) / g^a),
            // then P = P_rest ^ D_a.
            [(a, x), (b, y)] if *a < data && *b == pi => {
                syndromes(d, &[*a], y, x);
                xor_into(x, view[qi]);
                let t = gf::mul_table(gf::inv(gf::exp2(*a)).expect("g^a != 0"));
                mul_in_place(x, &t);
                xor_into(y, x);
                Ok(())
            }
            // Two data shards a < b (lib/raid6/recov.c `raid6_2data_recov`):
            // Pd = P ^ P_rest = D_a ^ D_b, Qd = Q ^ Q_rest = g^a D_a ^ g^b D_b,
            // D_a = (Qd ^ g^b Pd) / (g^a ^ g^b), D_b = Pd ^ D_a.
            [(a, x), (b, y)] if *b < data => {
                let (a, b) = (*a, *b);
                // y = Pd, x = Qd
                syndromes(d, &[a, b], y, x);
                xor_into(y, view[pi]);
                xor_into(x, view[qi]);
                let denom = gf::inv(gf::exp2(a) ^ gf::exp2(b)).expect("g^a != g^b");
                let tq = gf::mul_table(denom);
                // MUTANT: raid6-wrong-coefficient s|gf::exp2(b), denom|gf::exp2(a), denom|
                let tp = gf::mul_table(gf::mul(gf::exp2(b), denom));
                for (xa, yb) in x.iter_mut().zip(y.iter_mut()) {
                    let da = tq[*xa as usize] ^ tp[*yb as usize];
                    *xa = da;
                    *yb ^= da;
                }
                Ok(())
            }
            // One data shard with only Q left can't happen (lost <= parity
            // and P present means the arm above); anything else is a lost
            // list this parity cannot serve.
            [(a, _), ..] => Err(ParityError::BadLost(*a)),
        }
    };
    for (l, s) in out {
        shards[l] = s;
    }
    res
}

/// What `heal` found in a row whose members all answered.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Heal {
    /// Every data member passed its check and the parity agrees with them.
    Clean,
    /// These members are wrong: write these bytes over them (each data
    /// member's new bytes passed the check).
    Repair(Vec<(usize, Vec<u8>)>),
    /// More is wrong than the parity can place, or the evidence points two
    /// ways: nothing may be rewritten.
    Undecidable,
}

/// Find which member of a row is wrong and what it should hold.
///
/// `shards`: the whole row as read (`data` data shards, then P, then Q).
/// `valid(i, bytes)` says whether data member `i` holding `bytes` passes
/// every block CRC the caller knows for it (parity members have no CRC: they
/// are judged by recomputation from verified data). Each candidate is
/// reconstructed from the others in turn and must pass `valid` before it is
/// offered; with one parity shard, two failing data members are undecidable;
/// with two, a wrong P or Q (with or without one wrong data member) is named.
/// Never guesses: when no single explanation passes, `Undecidable`.
pub fn heal(
    shards: &[&[u8]],
    data: usize,
    valid: &mut dyn FnMut(usize, &[u8]) -> bool,
) -> Result<Heal, ParityError> {
    let parity = shards.len().wrapping_sub(data);
    if data == 0 || data > MAX_DATA || shards.len() < data || parity > MAX_PARITY {
        return Err(ParityError::Count { data, parity });
    }
    let len = shards[0].len();
    check_lengths(shards, len, 0)?;
    let bad: Vec<usize> = (0..data).filter(|&i| !valid(i, shards[i])).collect();
    let (pi, qi) = (data, data + 1);
    // Rebuild `lost` from a copy of the row; None when the parity can't.
    let rebuild = |lost: &[usize]| -> Option<Vec<Vec<u8>>> {
        let mut row: Vec<Vec<u8>> = shards.iter().map(|s| s.to_vec()).collect();
        let mut refs: Vec<&mut [u8]> = row.iter_mut().map(|r| r.as_mut_slice()).collect();
        reconstruct(&mut refs, data, lost).ok()?;
        Some(lost.iter().map(|&l| row[l].clone()).collect())
    };
    // The parity recomputed from the data as read.
    let fresh = |which: usize| -> Vec<u8> {
        let mut out = rebuild(&[which]).expect("parity is recomputable from the data");
        out.pop().expect("one shard")
    };
    match (parity, bad.as_slice()) {
        (0, []) => Ok(Heal::Clean),
        (0, _) => Ok(Heal::Undecidable),
        (1, []) => {
            let p = fresh(pi);
            Ok(if p == shards[pi] {
                Heal::Clean
            } else {
                Heal::Repair(vec![(pi, p)])
            })
        }
        (1, [i]) => {
            let x = rebuild(&[*i]).expect("one lost with P").pop().expect("one");
            // MUTANT: heal-skips-crc s|if valid(*i, &x) {|if true {|
            Ok(if valid(*i, &x) {
                Heal::Repair(vec![(*i, x)])
            } else {
                Heal::Undecidable
            })
        }
        (1, _) => Ok(Heal::Undecidable),
        (2, []) => {
            let p = fresh(pi);
            let q = fresh(qi);
            Ok(match (p == shards[pi], q == shards[qi]) {
                (true, true) => Heal::Clean,
                (false, true) => Heal::Repair(vec![(pi, p)]),
                (true, false) => Heal::Repair(vec![(qi, q)]),
                // Both disagree with data that passed its checks: two wrong
                // parity shards, or a data byte no CRC covers. Don't guess.
                // MUTANT: heal-guesses-parity s|=> Heal::Undecidable|=> Heal::Repair(vec![(pi, p)])|
                (false, false) => Heal::Undecidable,
            })
        }
        (2, [i]) => {
            // Wrong D_i alone (P and Q agree with the rebuilt D_i), D_i and Q
            // (rebuilt from P passes, Q disagrees), or D_i and P (rebuilt
            // from Q passes, P disagrees).
            let from_p = rebuild(&[*i, qi]).expect("two lost with P+Q");
            let from_q = rebuild(&[*i, pi]).expect("two lost with P+Q");
            let ok_p = valid(*i, &from_p[0]);
            let ok_q = valid(*i, &from_q[0]);
            Ok(match (ok_p, ok_q) {
                (true, true) if from_p[0] == from_q[0] => {
                    Heal::Repair(vec![(*i, from_p[0].clone())])
                }
                (true, false) => {
                    let mut from_p = from_p;
                    let q = from_p.pop().expect("Q");
                    let x = from_p.pop().expect("D_i");
                    Heal::Repair(vec![(*i, x), (qi, q)])
                }
                (false, true) => {
                    let mut from_q = from_q;
                    let p = from_q.pop().expect("P");
                    let x = from_q.pop().expect("D_i");
                    Heal::Repair(vec![(*i, x), (pi, p)])
                }
                _ => Heal::Undecidable,
            })
        }
        (2, [i, j]) => {
            let x = rebuild(&[*i, *j]).expect("two lost with P+Q");
            Ok(if valid(*i, &x[0]) && valid(*j, &x[1]) {
                let mut x = x;
                let y = x.pop().expect("D_j");
                let w = x.pop().expect("D_i");
                Heal::Repair(vec![(*i, w), (*j, y)])
            } else {
                Heal::Undecidable
            })
        }
        _ => Ok(Heal::Undecidable),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tables_match_the_kernels_raid6_tables() {
        // raid6_gfexp[1..9] and raid6_gfinv[2] from lib/raid6/mktables.c.
        assert_eq!(&gf::EXP[..9], &[1, 2, 4, 8, 16, 32, 64, 128, 0x1d]);
        assert_eq!(gf::inv(2), Some(0x8e));
        assert_eq!(gf::inv(0), None);
        for a in 0..=255u8 {
            for b in 0..=255u8 {
                assert_eq!(gf::mul(a, b), oracle::mul(a, b), "{a}·{b}");
            }
            if a != 0 {
                assert_eq!(gf::mul(a, gf::inv(a).unwrap()), 1);
            }
        }
        for i in 0..600 {
            assert_eq!(gf::exp2(i), oracle::pow2(i % 255));
        }
    }

    /// The portable kernels and the dispatching entry points (AVX2 where
    /// the CPU has it) against the byte-at-a-time oracle: shard counts 1 to
    /// 12, lengths across whole steps and tails, shards skipped as zero.
    #[test]
    fn fused_kernels_match_the_oracle_on_every_path() {
        use rand::{Rng, SeedableRng};
        let mut rng = rand::rngs::SmallRng::seed_from_u64(20);
        for k in 1..=12usize {
            for len in [
                0,
                1,
                7,
                63,
                64,
                73,
                127,
                128,
                129,
                255,
                256,
                300,
                768,
                4096 + 17,
            ] {
                let data: Vec<Vec<u8>> = (0..k)
                    .map(|_| (0..len).map(|_| rng.gen()).collect())
                    .collect();
                let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
                let (op, oq) = oracle::pq(&refs);
                let mut p = vec![0xa5u8; len];
                xor_kernel::<XOR_STEP>(&refs, &mut p);
                assert_eq!(p, op, "xor kernel, k={k} len={len}");
                let mut p = vec![0xa6u8; len];
                xor_kernel::<XOR_STEP_AVX2>(&refs, &mut p);
                assert_eq!(p, op, "xor kernel, wide, k={k} len={len}");
                let mut p = vec![0x5au8; len];
                xor_of(&refs, &mut p);
                assert_eq!(p, op, "xor_of, k={k} len={len}");
                let (mut p, mut q) = (vec![1u8; len], vec![2u8; len]);
                syndromes_kernel::<PQ_STEP>(&refs, &[], &mut p, &mut q);
                assert_eq!((&p, &q), (&op, &oq), "syndromes kernel, k={k} len={len}");
                let (mut p, mut q) = (vec![9u8; len], vec![10u8; len]);
                syndromes_kernel::<PQ_STEP_AVX2>(&refs, &[], &mut p, &mut q);
                assert_eq!(
                    (&p, &q),
                    (&op, &oq),
                    "syndromes kernel, wide, k={k} len={len}"
                );
                let (mut p, mut q) = (vec![3u8; len], vec![4u8; len]);
                syndromes(&refs, &[], &mut p, &mut q);
                assert_eq!((&p, &q), (&op, &oq), "syndromes, k={k} len={len}");
                // shards skipped count as zero
                let skip: Vec<usize> = (0..k).filter(|z| z % 3 == 1).collect();
                let zero = vec![0u8; len];
                let zeroed: Vec<&[u8]> = (0..k)
                    .map(|z| {
                        if skip.contains(&z) {
                            &zero[..]
                        } else {
                            refs[z]
                        }
                    })
                    .collect();
                let (zp, zq) = oracle::pq(&zeroed);
                let (mut p, mut q) = (vec![5u8; len], vec![6u8; len]);
                syndromes_kernel::<PQ_STEP>(&refs, &skip, &mut p, &mut q);
                assert_eq!((&p, &q), (&zp, &zq), "skipped, kernel, k={k} len={len}");
                let (mut p, mut q) = (vec![11u8; len], vec![12u8; len]);
                syndromes_kernel::<PQ_STEP_AVX2>(&refs, &skip, &mut p, &mut q);
                assert_eq!(
                    (&p, &q),
                    (&zp, &zq),
                    "skipped, kernel, wide, k={k} len={len}"
                );
                let (mut p, mut q) = (vec![7u8; len], vec![8u8; len]);
                syndromes(&refs, &skip, &mut p, &mut q);
                assert_eq!((&p, &q), (&zp, &zq), "skipped, k={k} len={len}");
            }
        }
    }

    #[test]
    fn mul2_is_mul_by_two_for_every_byte() {
        for x in 0..=255u8 {
            assert_eq!(mul2(x), oracle::mul(x, 2), "2·{x}");
        }
    }

    #[test]
    fn mul2_lanes_is_mul_by_two_per_byte() {
        let v = 0x80ff_0102_7f40_1d8eu64;
        let out = gf::mul2_lanes(v).to_ne_bytes();
        for (o, b) in out.iter().zip(v.to_ne_bytes()) {
            assert_eq!(*o, oracle::mul(b, 2));
        }
    }
}
