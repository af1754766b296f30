//! `src/parity.rs` against its oracle and against the data it lost: encode
//! equals the scalar definitions (kernel raid6 conventions) for random shard
//! counts and lengths; every set of lost shards the parity can cover is
//! rebuilt byte for byte; what it cannot cover is an error, not a panic; and
//! `heal` names exactly the corrupted member(s) or says it cannot tell.

use proptest::prelude::*;
use sluice::parity::{self, gf, oracle, Heal, ParityError};

fn row(data: &[Vec<u8>], parity: usize) -> Vec<Vec<u8>> {
    let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    let len = data[0].len();
    let mut par: Vec<Vec<u8>> = (0..parity).map(|_| vec![0xa5; len]).collect();
    {
        let mut pr: Vec<&mut [u8]> = par.iter_mut().map(|p| p.as_mut_slice()).collect();
        parity::encode(&refs, &mut pr).unwrap();
    }
    let mut r = data.to_vec();
    r.extend(par);
    r
}

/// Every subset of `0..n` with 1..=max members.
fn subsets(n: usize, max: usize) -> Vec<Vec<usize>> {
    (1u32..1 << n)
        .filter(|m| m.count_ones() as usize <= max)
        .map(|m| (0..n).filter(|i| m & (1 << i) != 0).collect())
        .collect()
}

fn shards_strategy() -> impl Strategy<Value = (Vec<Vec<u8>>, usize)> {
    (1usize..=10, 0usize..=200, 0usize..=2).prop_flat_map(|(k, len, p)| {
        (
            prop::collection::vec(prop::collection::vec(any::<u8>(), len), k),
            Just(p),
        )
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn encode_matches_the_scalar_oracle((data, p) in shards_strategy()) {
        let r = row(&data, 2);
        let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
        let (op, oq) = oracle::pq(&refs);
        let k = data.len();
        prop_assert_eq!(&r[k], &op);
        prop_assert_eq!(&r[k + 1], &oq);
        // encode with one parity shard writes the same P.
        let r1 = row(&data, p.min(1));
        if p >= 1 {
            prop_assert_eq!(&r1[k], &op);
        }
    }

    #[test]
    fn every_loss_the_parity_covers_is_rebuilt_exactly(
        (data, p) in shards_strategy(),
        garbage in any::<u8>(),
    ) {
        let k = data.len();
        let good = row(&data, p);
        for lost in subsets(k + p, p) {
            let mut r = good.clone();
            for &l in &lost {
                r[l].iter_mut().for_each(|b| *b = b.wrapping_add(garbage) ^ 0x5a);
            }
            let mut refs: Vec<&mut [u8]> = r.iter_mut().map(|x| x.as_mut_slice()).collect();
            parity::reconstruct(&mut refs, k, &lost).unwrap();
            prop_assert!(r == good, "k={} p={} lost={:?}", k, p, lost);
        }
        // One more than the parity is refused, and leaves the row alone.
        if k + p > p {
            let lost: Vec<usize> = (0..=p).collect();
            let mut r = good.clone();
            let mut refs: Vec<&mut [u8]> = r.iter_mut().map(|x| x.as_mut_slice()).collect();
            let e = parity::reconstruct(&mut refs, k, &lost).unwrap_err();
            prop_assert_eq!(e, ParityError::TooMany { lost: p + 1, parity: p });
            prop_assert!(r == good);
        }
    }

    #[test]
    fn heal_names_the_one_corrupted_member(
        (data, p) in shards_strategy(),
        at in any::<prop::sample::Index>(),
        flip in 1u8..=255,
    ) {
        let k = data.len();
        let len = data[0].len();
        prop_assume!(len > 0 && p > 0);
        let good = row(&data, p);
        let crcs: Vec<u32> = data.iter().map(|d| crc32c::crc32c(d)).collect();
        for m in 0..k + p {
            let mut r = good.clone();
            r[m][at.index(len)] ^= flip;
            let refs: Vec<&[u8]> = r.iter().map(|x| x.as_slice()).collect();
            let mut valid = |i: usize, b: &[u8]| crc32c::crc32c(b) == crcs[i];
            let h = parity::heal(&refs, k, &mut valid).unwrap();
            prop_assert_eq!(h, Heal::Repair(vec![(m, good[m].clone())]), "member {}", m);
        }
        let refs: Vec<&[u8]> = good.iter().map(|x| x.as_slice()).collect();
        let mut valid = |i: usize, b: &[u8]| crc32c::crc32c(b) == crcs[i];
        prop_assert_eq!(parity::heal(&refs, k, &mut valid).unwrap(), Heal::Clean);
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Never a wrong repair: whatever set of members is corrupted, `heal`
    /// either says it cannot tell, or its repairs restore the row exactly;
    /// `Clean` only for an untouched row.
    #[test]
    fn heal_never_repairs_wrongly(
        (data, p) in shards_strategy(),
        mask in any::<u16>(),
        at in any::<prop::sample::Index>(),
    ) {
        let k = data.len();
        let len = data[0].len();
        prop_assume!(len > 0);
        let good = row(&data, p);
        let crcs: Vec<u32> = data.iter().map(|d| crc32c::crc32c(d)).collect();
        let mut r = good.clone();
        let hit: Vec<usize> = (0..k + p).filter(|m| mask & (1 << m) != 0).collect();
        for (n, &m) in hit.iter().enumerate() {
            let j = (at.index(len) + n) % len;
            r[m][j] ^= 0x80 | n as u8;
        }
        let refs: Vec<&[u8]> = r.iter().map(|x| x.as_slice()).collect();
        let mut valid = |i: usize, b: &[u8]| crc32c::crc32c(b) == crcs[i];
        match parity::heal(&refs, k, &mut valid).unwrap() {
            Heal::Clean => prop_assert!(hit.is_empty(), "clean with {:?} corrupted", hit),
            Heal::Undecidable => prop_assert!(!hit.is_empty()),
            Heal::Repair(fix) => {
                for (m, bytes) in fix {
                    r[m] = bytes;
                }
                prop_assert!(r == good, "wrong repair of {:?}", hit);
            }
        }
    }
}

fn random_data(k: usize, len: usize, seed: u64) -> Vec<Vec<u8>> {
    use rand::{Rng, SeedableRng};
    let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
    (0..k)
        .map(|_| (0..len).map(|_| rng.gen()).collect())
        .collect()
}

/// Corrupt the members in `bad` and ask `heal`.
fn heal_with(good: &[Vec<u8>], k: usize, bad: &[usize]) -> Heal {
    let crcs: Vec<u32> = good[..k].iter().map(|d| crc32c::crc32c(d)).collect();
    let mut r = good.to_vec();
    for (n, &m) in bad.iter().enumerate() {
        r[m][7 + 13 * n] ^= 0x41;
    }
    let refs: Vec<&[u8]> = r.iter().map(|x| x.as_slice()).collect();
    let mut valid = |i: usize, b: &[u8]| crc32c::crc32c(b) == crcs[i];
    parity::heal(&refs, k, &mut valid).unwrap()
}

#[test]
fn raid5_two_corrupted_members_are_undecidable_never_repaired() {
    let k = 4;
    let good = row(&random_data(k, 4096, 1), 1);
    for bad in subsets(k + 1, 2).into_iter().filter(|s| s.len() == 2) {
        assert_eq!(heal_with(&good, k, &bad), Heal::Undecidable, "{bad:?}");
    }
}

#[test]
fn raid6_places_two_wrong_members_when_one_is_data_and_refuses_beyond() {
    let k = 4;
    let good = row(&random_data(k, 4096, 2), 2);
    for bad in subsets(k + 2, 3) {
        let h = heal_with(&good, k, &bad);
        let data_bad = bad.iter().filter(|&&m| m < k).count();
        // Two wrong members with at least one data member among them: the
        // CRC says which data, the parity places the rest. P and Q both
        // wrong with clean data, or three wrong: cannot tell.
        let decidable = bad.len() == 1 || (bad.len() == 2 && data_bad >= 1);
        if decidable {
            let want: Vec<(usize, Vec<u8>)> = bad.iter().map(|&m| (m, good[m].clone())).collect();
            assert_eq!(h, Heal::Repair(want), "{bad:?}");
        } else {
            assert_eq!(h, Heal::Undecidable, "{bad:?}");
        }
    }
}

#[test]
fn raid0_cannot_heal_and_says_so() {
    let k = 3;
    let good = row(&random_data(k, 512, 3), 0);
    assert_eq!(heal_with(&good, k, &[]), Heal::Clean);
    assert_eq!(heal_with(&good, k, &[1]), Heal::Undecidable);
}

#[test]
fn malformed_requests_are_errors() {
    let d = random_data(3, 64, 4);
    let refs: Vec<&[u8]> = d.iter().map(|x| x.as_slice()).collect();
    let mut short = vec![0u8; 63];
    assert!(matches!(
        parity::encode_p(&refs, &mut short),
        Err(ParityError::Length { .. })
    ));
    let mut p = vec![0u8; 64];
    assert!(matches!(
        parity::encode_p(&[], &mut p),
        Err(ParityError::Count { .. })
    ));
    let mut r = row(&d, 2);
    let mut refs: Vec<&mut [u8]> = r.iter_mut().map(|x| x.as_mut_slice()).collect();
    assert_eq!(
        parity::reconstruct(&mut refs, 3, &[1, 1]),
        Err(ParityError::BadLost(1))
    );
    assert_eq!(
        parity::reconstruct(&mut refs, 3, &[5 + 1]),
        Err(ParityError::BadLost(6))
    );
    assert!(matches!(
        parity::reconstruct(&mut refs, 0, &[]),
        Err(ParityError::Count { .. })
    ));
    assert!(matches!(
        parity::reconstruct(&mut refs[..5], 1, &[0]),
        Err(ParityError::Count { .. })
    ));
    let mut valid = |_: usize, _: &[u8]| true;
    let ro: Vec<&[u8]> = r.iter().map(|x| x.as_slice()).collect();
    assert!(parity::heal(&ro[..2], 3, &mut valid).is_err());
}

#[test]
fn q_is_the_kernels_syndrome_on_a_known_row() {
    // Data shards of one byte each: Q = 1·1 ^ 2·1 ^ 4·1 ^ 8·1 = 0x0f, and
    // with D_8 = 1 the generator wraps through the polynomial: g^8 = 0x1d.
    let d: Vec<Vec<u8>> = (0..4).map(|_| vec![1u8]).collect();
    let r = row(&d, 2);
    assert_eq!((r[4][0], r[5][0]), (0, 0x0f));
    let mut d9 = vec![vec![0u8]; 9];
    d9[8][0] = 1;
    let r = row(&d9, 2);
    assert_eq!(r[10][0], 0x1d);
    assert_eq!(gf::exp2(8), 0x1d);
}
