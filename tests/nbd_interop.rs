//! Real NBD clients against `sluice serve`: nbdinfo, qemu-io, qemu-img
//! convert/compare, nbdcopy, fio with verification across a clean restart.
//! Each test prints a loud SKIP when its tool is missing.

mod nbd_common;

use nbd_common::{fill_random, run, stdout, Server};
use std::process::Command;

#[test]
fn nbdinfo_shows_capabilities_and_base_allocation() {
    require_tools!("nbdinfo", "nbdinfo");
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &dir.path().join("v.img"), "256M", &[]);
    let info = stdout(Command::new("nbdinfo").arg(&s.uri));
    for want in [
        "can_flush: true",
        "can_fua: true",
        "can_trim: true",
        "can_zero: true",
        "can_fast_zero: true",
        "can_multi_conn: true",
        "can_cache: true",
        "is_read_only: false",
        "base:allocation",
        "export-size: 268435456",
        "block_size_minimum: 512",
        "block_size_preferred: 4096",
        "block_size_maximum: 33554432",
    ] {
        assert!(info.contains(want), "nbdinfo lacks {want:?}:\n{info}");
    }
    let list = stdout(Command::new("nbdinfo").arg("--list").arg(&s.uri));
    assert!(list.contains("export=\"\""), "{list}");
    let (code, err) = s.stop();
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn qemu_io_patterns_aligned_and_unaligned_and_map() {
    require_tools!("qemu-io", "qemu-io", "nbdinfo");
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("v.img");
    let s = Server::start(dir.path(), &img, "256M", &[]);
    let cmds = [
        "write -P 0x11 0 64k",
        "write -P 0x22 4096 4096",
        "write -P 0x33 1000 3000",  // unaligned, inside one block
        "write -P 0x44 8190 10000", // unaligned, crossing blocks
        "write -P 0x55 1m 1m",      // aligned, large
        "write -z 1m 8k",           // WRITE_ZEROES
        "discard 1040k 16k",        // TRIM
        "write -P 0x66 -f 200m 4k", // FUA
        "write -P 0x77 250m 64k",
        "write -z -u -n 250m 64k", // zero, may unmap, fast zero
        "flush",
        "read -P 0x11 0 1000",
        "read -P 0x33 1000 3000",
        "read -P 0x11 4000 96",
        "read -P 0x22 4096 4094",
        "read -P 0x44 8190 10000",
        "read -P 0x11 18190 47346",
        "read -P 0 1m 8k",
        "read -P 0x55 1032k 8k",
        "read -P 0 1040k 16k",
        "read -P 0x55 1056k 992k",
        "read -P 0x66 200m 4k",
        "read -P 0 100m 1m",
        "read -P 0 250m 64k",
    ];
    let mut q = Command::new("qemu-io");
    q.args(["-f", "raw"]);
    for c in cmds {
        q.args(["-c", c]);
    }
    q.arg(&s.uri);
    let out = stdout(&mut q);
    assert!(
        !out.contains("Pattern verification failed") && !out.contains("error"),
        "{out}"
    );
    assert_eq!(out.matches("read ").count(), 13, "{out}");
    // The trimmed range is a hole, the rest of the written area data.
    let map = stdout(Command::new("nbdinfo").arg("--map").arg(&s.uri));
    assert!(map.contains("hole,zero"), "{map}");
    assert!(map.lines().next().unwrap().contains("data"), "{map}");
    // Everything survives a clean restart.
    let (code, err) = s.stop();
    assert_eq!(code, Some(0), "{err}");
    let s = Server::start(dir.path(), &img, "256M", &[]);
    let out = stdout(Command::new("qemu-io").args([
        "-f",
        "raw",
        "-c",
        "read -P 0x44 8190 10000",
        "-c",
        "read -P 0x66 200m 4k",
        "-c",
        "read -P 0 1040k 16k",
        &s.uri,
    ]));
    assert!(!out.contains("Pattern verification failed"), "{out}");
    s.stop();
}

#[test]
fn qemu_img_convert_compare_and_nbdcopy_both_ways() {
    require_tools!("qemu-img convert", "qemu-img", "nbdcopy");
    const SIZE: usize = 1 << 30;
    let dir = tempfile::tempdir().unwrap();
    let src = dir.path().join("src.raw");
    {
        // 1 GiB: random data, with a zero region and a 0xff region the engine
        // stores as virtual blocks.
        use std::io::Write;
        let mut f = std::io::BufWriter::new(std::fs::File::create(&src).unwrap());
        let mut buf = vec![0u8; 4 << 20];
        for i in 0..SIZE / buf.len() {
            match i {
                10..=12 => buf.fill(0),
                20 => buf.fill(0xff),
                _ => fill_random(&mut buf, i as u64 + 1),
            }
            f.write_all(&buf).unwrap();
        }
    }
    let s = Server::start(dir.path(), &dir.path().join("v.img"), "1G", &[]);
    run(Command::new("qemu-img")
        .args(["convert", "-n", "-f", "raw", "-O", "raw"])
        .arg(&src)
        .arg(&s.uri));
    run(Command::new("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&src)
        .arg(&s.uri));
    // nbdcopy out of the export into a file, and that file back into the export
    // (multi-conn: nbdcopy opens several connections).
    let out = dir.path().join("out.raw");
    run(Command::new("nbdcopy").arg(&s.uri).arg(&out));
    run(Command::new("cmp").arg(&src).arg(&out));
    std::fs::remove_file(&src).unwrap();
    // Overwrite the export with zeros, then nbdcopy the saved copy back in.
    run(Command::new("qemu-io").args(["-f", "raw", "-c", "write -z 0 1G", &s.uri]));
    run(Command::new("nbdcopy")
        .args(["--flush"])
        .arg(&out)
        .arg(&s.uri));
    run(Command::new("qemu-img")
        .args(["compare", "-f", "raw", "-F", "raw"])
        .arg(&out)
        .arg(&s.uri));
    let (code, err) = s.stop();
    assert_eq!(code, Some(0), "{err}");
}

#[test]
fn fio_randwrite_verify_survives_clean_restart() {
    require_tools!("fio nbd", "fio");
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("v.img");
    let s = Server::start(dir.path(), &img, "512M", &[]);
    let job = |uri: &str, verify_only: bool| {
        let mut c = Command::new("fio");
        // fio leaves its verify state file in the working directory.
        c.current_dir(dir.path());
        c.args([
            "--name=v",
            "--ioengine=nbd",
            &format!("--uri={uri}"),
            "--rw=randwrite",
            "--bs=4k",
            "--size=128M",
            "--offset=64M",
            "--iodepth=16",
            "--verify=crc32c",
            "--verify_fatal=1",
            "--randseed=42",
        ]);
        if verify_only {
            c.arg("--verify_only");
        } else {
            c.arg("--do_verify=1");
        }
        let out = stdout(&mut c);
        assert!(out.contains("err= 0"), "{out}");
        out
    };
    job(&s.uri, false);
    let (code, err) = s.stop();
    assert_eq!(code, Some(0), "{err}");
    let s = Server::start(dir.path(), &img, "512M", &[]);
    let out = job(&s.uri, true);
    // The verify-only pass read back all 32768 blocks written before the restart.
    assert!(out.contains("total=32768,"), "{out}");
    s.stop();
}
