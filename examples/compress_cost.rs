//! Cost of the compression pieces per 4 KiB block (issue 19): the skip rule's
//! entropy sample, LZ4 compression (with the reused table) and decompression,
//! on a random block and on a half-random, half-zero block (fio's
//! buffer_compress_percentage=50). Wall time is noisy on a shared machine;
//! count instructions instead:
//!
//!     cargo build --release --example compress_cost
//!     N=1000 valgrind --tool=callgrind --callgrind-out-file=/tmp/cc.out \
//!         target/release/examples/compress_cost
//!     callgrind_annotate --inclusive=yes /tmp/cc.out | grep -E 'worth_trying|Compressor::compress|unpack'
use rand::{Rng, SeedableRng};
use sluice::format::packed::{unpack, Compressor, Packer};
use std::time::Instant;

fn main() {
    let n: usize = std::env::var("N").map_or(200_000, |v| v.parse().expect("N"));
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let mut random = vec![0u8; 4096];
    rng.fill(&mut random[..]);
    let mut half = random.clone();
    half[2048..].fill(0);
    let mut z = Compressor::default();
    let mut raw = vec![0u8; 4096];
    for (name, b) in [("random", &random), ("half-zero", &half)] {
        let t = Instant::now();
        let mut tried = 0;
        for _ in 0..n {
            tried += sluice::compress::worth_trying(std::hint::black_box(b)) as usize;
        }
        let sample = t.elapsed().as_nanos() as f64 / n as f64;
        let t = Instant::now();
        let mut kept = 0;
        for _ in 0..n {
            kept = z.compress(std::hint::black_box(b)).map_or(0, |f| f.len());
        }
        let comp = t.elapsed().as_nanos() as f64 / n as f64;
        let mut decomp = 0.0;
        if kept > 0 {
            let mut p = Packer::new();
            let place = p.push(z.compress(b).unwrap(), crc32c::crc32c(b));
            let packed = p.finish();
            let t = Instant::now();
            for _ in 0..n {
                unpack(&packed[..4096], None, place.slot, &mut raw).unwrap();
            }
            decomp = t.elapsed().as_nanos() as f64 / n as f64;
        }
        println!(
            "{name}: sample {sample:.0} ns (tried {tried} of {n}), compress {comp:.0} ns \
             -> {kept} B kept, unpack {decomp:.0} ns"
        );
    }
}
