//! Verified reads through `sluice serve`: a block whose bits rotted on the media
//! is answered with an NBD error reply carrying EIO (never with its bytes), the
//! other blocks still read, and the connection stays usable, on each of the
//! server's read paths (a lone READ on the reader, the connection's read ring,
//! the pool's batches). And the read ring's replies, which leave in completion
//! order: right bytes for many concurrent reads of mixed sizes, and only
//! versions of a block's own data while GC moves and reuses segments under
//! the reads.

mod nbd_common;

use nbd_common::{run, Server};
use sluice::bench::nbd_client::NbdClient;
use sluice::bench::target::Target;
use sluice::media::{FileMedia, Media};
use sluice::{CreateOptions, OpenOptions, Volume};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;

const BS: usize = 4096;

fn block(i: u64) -> Vec<u8> {
    (0..BS)
        .map(|j| (i as u8).wrapping_mul(29) ^ (j as u8).wrapping_mul(11) | 2)
        .collect()
}

#[test]
fn rotten_block_is_an_eio_reply_through_nbd() {
    // a lone READ runs on the connection's reader
    rotten_block(&["--read-only"]);
}

#[test]
fn rotten_block_is_an_eio_reply_on_the_read_ring() {
    // without the inline shortcut every READ goes through the read ring
    rotten_block(&["--read-only", "--no-inline-writes"]);
}

#[test]
fn rotten_block_is_an_eio_reply_in_pool_batches() {
    rotten_block(&["--read-only", "--no-inline-writes", "--no-read-ring"]);
}

fn rotten_block(serve: &[&str]) {
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("vol.img");
    let create = CreateOptions {
        logical_bytes: Some(16 << 20),
        segment_bytes: 1 << 20,
        ..Default::default()
    };
    let geo = sluice::geometry::Geometry::for_logical(4096, 256, create.overprovision);
    let media = Arc::new(FileMedia::create(&img, geo.media_bytes() + (8 << 20)).unwrap());
    let vol = Volume::create(media as Arc<dyn Media>, &create, &OpenOptions::default()).unwrap();
    for i in 0..64u64 {
        vol.write(i * BS as u64, &block(i), false).unwrap();
    }
    vol.close().unwrap();
    drop(vol);
    // flip one bit of block 40's data on the media (found by content)
    let image = std::fs::read(&img).unwrap();
    let at = (0..image.len() / BS)
        .find(|&b| image[b * BS..(b + 1) * BS] == block(40)[..])
        .expect("block 40 on the media")
        * BS;
    let f = std::fs::OpenOptions::new().write(true).open(&img).unwrap();
    f.write_all_at(&[image[at + 9] ^ 0x40], (at + 9) as u64)
        .unwrap();
    f.sync_all().unwrap();
    drop(f);

    let server = Server::start(dir.path(), &img, "16M", serve);
    let c = NbdClient::connect(&server.uri).unwrap();
    let mut buf = vec![0u8; BS];
    let e = c.read(40 * BS as u64, &mut buf).unwrap_err().to_string();
    assert!(e.contains("server error 5"), "EIO reply: {e}");
    assert_ne!(buf, block(40), "the rotten bytes are not returned");
    for i in [0u64, 39, 41, 63] {
        c.read(i * BS as u64, &mut buf).unwrap();
        assert_eq!(buf, block(i), "block {i}");
    }
    let mut wide = vec![0u8; 8 * BS];
    assert!(c.read(36 * BS as u64, &mut wide).is_err());
    c.disconnect();
    let (code, err) = server.stop();
    assert_eq!(code, Some(0), "{err}");
    assert!(
        err.contains("logical block 40"),
        "the server logs it: {err}"
    );
}

/// Block `i` at version `v` as tests/nbd_scripts/concurrent_reads.py makes it.
fn pattern(i: u64, v: u64) -> Vec<u8> {
    let mut word = Vec::with_capacity(16);
    word.extend_from_slice(&(i + 1).to_le_bytes());
    word.extend_from_slice(
        &((v << 32) ^ (i.wrapping_mul(0x9E37_79B1) & 0xFFFF_FFFF)).to_le_bytes(),
    );
    word.repeat(BS / 16)
}

/// A closed volume of `blocks` blocks, block i holding `pattern(i, 0)` on the
/// media (not in memory: reads reach the device).
fn patterned_volume(dir: &Path, blocks: u64) -> PathBuf {
    let img = dir.join("vol.img");
    let create = CreateOptions {
        logical_bytes: Some(blocks * BS as u64),
        segment_bytes: 256 << 10,
        ..Default::default()
    };
    let geo = sluice::geometry::Geometry::for_logical(blocks, 64, create.overprovision);
    let media = Arc::new(FileMedia::create(&img, geo.media_bytes() + (8 << 20)).unwrap());
    let vol = Volume::create(media as Arc<dyn Media>, &create, &OpenOptions::default()).unwrap();
    for i in 0..blocks {
        vol.write(i * BS as u64, &pattern(i, 0), false).unwrap();
    }
    vol.close().unwrap();
    img
}

fn script() -> String {
    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/nbd_scripts/concurrent_reads.py"
    );
    format!("exec(open({path:?}).read())")
}

/// `reads N reordered R` from the script's output.
fn reordered(out: &str) -> (u64, u64) {
    let w: Vec<&str> = out.split_whitespace().collect();
    let at = w
        .iter()
        .position(|x| *x == "reads")
        .expect("the script's summary");
    (w[at + 1].parse().unwrap(), w[at + 3].parse().unwrap())
}

#[test]
fn out_of_order_replies_carry_the_right_bytes() {
    let Some(nbdsh) = nbd_common::nbdsh("out-of-order read replies") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let blocks = 4096;
    let img = patterned_volume(dir.path(), blocks);
    // the read ring (default), then the pool's batches: the same reads
    for extra in [&[][..], &["--no-read-ring"][..]] {
        let mut args = vec!["--read-only"];
        args.extend_from_slice(extra);
        let server = Server::start(dir.path(), &img, "16M", &args);
        let out = run(Command::new(nbdsh.get_program())
            .args(nbdsh.get_args())
            .args(["-u", &server.uri, "-c", &script()])
            .env("BLOCKS", blocks.to_string())
            .env("MODE", "reads")
            .env("N", "3000")
            .env("DEPTH", "64"));
        let text = String::from_utf8_lossy(&out.stdout).to_string();
        assert!(
            out.status.success(),
            "{extra:?}: {text}{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let (n, r) = reordered(&text);
        eprintln!("{extra:?}: {n} reads, {r} replies overtook an earlier request");
        assert_eq!(n, 3000);
        // 4 KiB reads beside 3 MiB ones: some replies must overtake
        assert!(r > 0, "{extra:?}: no reply came out of order: {text}");
        let (code, err) = server.stop();
        assert_eq!(code, Some(0), "{err}");
    }
}

#[test]
fn ring_reads_racing_gc_see_only_their_own_blocks() {
    let Some(nbdsh) = nbd_common::nbdsh("ring reads racing GC") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let blocks = 2048;
    let img = patterned_volume(dir.path(), blocks);
    let server = Server::start(dir.path(), &img, "8M", &[]);
    let nbd = |mode: &str| {
        let mut c = Command::new(nbdsh.get_program());
        c.args(nbdsh.get_args())
            .args(["-u", &server.uri, "-c", &script()])
            .env("BLOCKS", blocks.to_string())
            .env("MODE", mode)
            .env("SIZES", "4096 8192 12288 65536 262144");
        c
    };
    let mut writer = nbd("rewrite")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let out = run(nbd("versions").env("N", "40000").env("DEPTH", "64"));
    let _ = writer.kill();
    let _ = writer.wait();
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (code, err) = server.stop();
    assert_eq!(code, Some(0), "{err}");
    // GC moved blocks and segments were reused while the reads ran
    let media = Arc::new(FileMedia::open(&img, true).unwrap());
    let ro = OpenOptions {
        read_only: true,
        ..Default::default()
    };
    let vol = Volume::open(media as Arc<dyn Media>, &ro).unwrap();
    let life = vol.stats().lifetime;
    eprintln!(
        "{text}: lifetime GC runs {}, blocks moved {}",
        life.gc_runs, life.gc_blocks_moved
    );
    assert!(
        life.gc_runs > 0 && life.gc_blocks_moved > 0,
        "GC ran under the reads"
    );
}
