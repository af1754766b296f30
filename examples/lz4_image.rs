//! What LZ4 alone achieves on each 4 KiB block of an image (issue 19's
//! real-data yardstick: a compressed sluice volume's stored bytes should be
//! within 10% of it). Reads the image once and prints, per line:
//!
//! - `blocks`, `zero_blocks` (all-zero or all-0xFF: sluice stores them
//!   virtually, 0 bytes), `data_blocks`;
//! - `lz4_alone`: the sum over data blocks of min(LZ4 of the block, 4096),
//!   LZ4 with no rule and no packing overhead (the yardstick);
//! - `sluice_rule`: the same with sluice's rules (`compress::worth_trying`,
//!   a fragment kept only if at most `packed::KEEP_MAX` bytes, fragments
//!   packed 3968 payload bytes per 4 KiB packed block), the least a
//!   compressed volume could store for this image;
//! - `skipped`: data blocks the entropy sample did not even try.
//!
//!     cargo run --release --example lz4_image -- IMAGE
//!
//! Compare with zstd on the whole image: `zstd -3 -c IMAGE | wc -c`.
use sluice::format::packed::{Compressor, KEEP_MAX, PAYLOAD_BYTES};
use sluice::format::BLOCK_BYTES;
use std::io::Read;

fn main() -> std::io::Result<()> {
    let Some(path) = std::env::args().nth(1) else {
        eprintln!("usage: lz4_image IMAGE");
        std::process::exit(2);
    };
    let mut f = std::io::BufReader::with_capacity(1 << 20, std::fs::File::open(&path)?);
    let mut z = Compressor::default();
    let mut block = vec![0u8; BLOCK_BYTES];
    let (mut blocks, mut virt, mut alone, mut skipped) = (0u64, 0u64, 0u64, 0u64);
    let (mut raw_kept, mut fragments) = (0u64, 0u64);
    loop {
        let mut got = 0;
        while got < BLOCK_BYTES {
            match f.read(&mut block[got..])? {
                0 => break,
                n => got += n,
            }
        }
        if got == 0 {
            break;
        }
        block[got..].fill(0); // a short tail reads as zeros, as on a volume
        blocks += 1;
        if block.iter().all(|&b| b == 0) || block.iter().all(|&b| b == 0xff) {
            virt += 1;
            continue;
        }
        let lz4 = lz4_flex::block::compress(&block).len() as u64;
        alone += lz4.min(BLOCK_BYTES as u64);
        if !sluice::compress::worth_trying(&block) {
            skipped += 1;
            raw_kept += BLOCK_BYTES as u64;
            continue;
        }
        match z.compress(&block) {
            Some(frag) => {
                debug_assert!(frag.len() <= KEEP_MAX);
                fragments += frag.len() as u64;
            }
            None => raw_kept += BLOCK_BYTES as u64,
        }
    }
    let data = blocks - virt;
    // fragments fill packed blocks' payloads end to end
    let packed_blocks = fragments.div_ceil(PAYLOAD_BYTES as u64);
    let rule = raw_kept + packed_blocks * BLOCK_BYTES as u64;
    let host = data * BLOCK_BYTES as u64;
    let ratio = |b: u64| b as f64 / host.max(1) as f64;
    println!("image {path}");
    println!("blocks {blocks} zero_blocks {virt} data_blocks {data} (data bytes {host})");
    println!(
        "lz4_alone {alone} bytes = {:.3} of data bytes",
        ratio(alone)
    );
    println!(
        "sluice_rule {rule} bytes = {:.3} of data bytes",
        ratio(rule)
    );
    println!(
        "skipped {skipped} of {data} data blocks ({:.1}%) by the entropy sample",
        100.0 * skipped as f64 / data.max(1) as f64
    );
    Ok(())
}
