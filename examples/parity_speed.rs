//! Speed of `sluice::parity` (issue 20) at 64 KiB stripe units: encode and
//! reconstruction of 4+1 (P) and 4+2 (P+Q), with a peer in the same run: a
//! plain copy of the same data bytes (`copy_from_slice`, the memory
//! bandwidth any parity pass also pays). Reported as MB/s of data and as a
//! ratio to the copy, best of ROUNDS (default 5) rounds interleaved, so a
//! busy machine moves both arms alike.
//!
//!     cargo run --release --example parity_speed
//!     ROUNDS=9 ITERS=4000 cargo run --release --example parity_speed
use rand::{Rng, SeedableRng};
use sluice::parity;
use std::time::Instant;

const UNIT: usize = 64 << 10;
const K: usize = 4;

type Case<'a> = (&'static str, Box<dyn FnMut() + 'a>);

fn main() {
    let rounds: usize = std::env::var("ROUNDS").map_or(5, |v| v.parse().expect("ROUNDS"));
    let iters: usize = std::env::var("ITERS").map_or(2000, |v| v.parse().expect("ITERS"));
    let mut rng = rand::rngs::SmallRng::seed_from_u64(20);
    let data: Vec<Vec<u8>> = (0..K)
        .map(|_| (0..UNIT).map(|_| rng.gen()).collect())
        .collect();
    let refs: Vec<&[u8]> = data.iter().map(|d| d.as_slice()).collect();
    let (mut p, mut q) = (vec![0u8; UNIT], vec![0u8; UNIT]);
    parity::encode_pq(&refs, &mut p, &mut q).unwrap();
    let mut row6: Vec<Vec<u8>> = data.iter().cloned().chain([p.clone(), q.clone()]).collect();
    let mut row5: Vec<Vec<u8>> = data.iter().cloned().chain([p.clone()]).collect();
    let mut row6b = row6.clone();
    let mut p1 = vec![0u8; UNIT];
    let (mut p2, mut q2) = (vec![0u8; UNIT], vec![0u8; UNIT]);
    let mut copy: Vec<Vec<u8>> = vec![vec![0u8; UNIT]; K];

    let mut cases: Vec<Case> = vec![
        (
            "copy of the data (peer)",
            Box::new(|| {
                for (c, d) in copy.iter_mut().zip(&data) {
                    c.copy_from_slice(std::hint::black_box(d));
                }
            }),
        ),
        (
            "4+1 encode P",
            Box::new(|| parity::encode_p(std::hint::black_box(&refs), &mut p1).unwrap()),
        ),
        (
            "4+2 encode P+Q",
            Box::new(|| parity::encode_pq(std::hint::black_box(&refs), &mut p2, &mut q2).unwrap()),
        ),
        (
            "4+1 rebuild 1 data",
            Box::new(|| {
                let mut r: Vec<&mut [u8]> = row5.iter_mut().map(|x| x.as_mut_slice()).collect();
                parity::reconstruct(&mut r, K, &[2]).unwrap();
            }),
        ),
        (
            "4+2 rebuild 2 data",
            Box::new(|| {
                let mut r: Vec<&mut [u8]> = row6.iter_mut().map(|x| x.as_mut_slice()).collect();
                parity::reconstruct(&mut r, K, &[1, 3]).unwrap();
            }),
        ),
        (
            "4+2 rebuild data + P",
            Box::new(|| {
                let mut r: Vec<&mut [u8]> = row6b.iter_mut().map(|x| x.as_mut_slice()).collect();
                parity::reconstruct(&mut r, K, &[1, K]).unwrap();
            }),
        ),
    ];
    let names: Vec<&str> = cases.iter().map(|c| c.0).collect();
    let mut best = vec![0f64; cases.len()];
    for _ in 0..rounds {
        for (i, (_, f)) in cases.iter_mut().enumerate() {
            for _ in 0..iters / 20 {
                f();
            }
            let t = Instant::now();
            for _ in 0..iters {
                f();
            }
            let mbs = (K * UNIT * iters) as f64 / t.elapsed().as_secs_f64() / 1e6;
            best[i] = best[i].max(mbs);
        }
    }
    drop(cases);
    println!("64 KiB units, 4 data shards, best of {rounds} x {iters}; MB/s of data");
    for (n, b) in names.iter().zip(&best) {
        println!("{n:<26} {b:>9.0} MB/s  {:>5.2}x copy", b / best[0]);
    }
    assert!(
        row6[..K] == data[..] && row5[..K] == data[..],
        "rebuilt data differs"
    );
}
