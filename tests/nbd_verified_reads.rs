//! Verified reads through `sluice serve`: a block whose bits rotted on the media
//! is answered with an NBD error reply carrying EIO (never with its bytes), the
//! other blocks still read, and the connection stays usable.

mod nbd_common;

use nbd_common::Server;
use sluice::bench::nbd_client::NbdClient;
use sluice::bench::target::Target;
use sluice::media::{FileMedia, Media};
use sluice::{CreateOptions, OpenOptions, Volume};
use std::os::unix::fs::FileExt;
use std::sync::Arc;

const BS: usize = 4096;

fn block(i: u64) -> Vec<u8> {
    (0..BS)
        .map(|j| (i as u8).wrapping_mul(29) ^ (j as u8).wrapping_mul(11) | 2)
        .collect()
}

#[test]
fn rotten_block_is_an_eio_reply_through_nbd() {
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

    let server = Server::start(dir.path(), &img, "16M", &["--read-only"]);
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
