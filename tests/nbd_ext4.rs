//! A real filesystem on the export: nbdfuse exposes it as a file, losetup turns
//! that into a block device, then mkfs.ext4, mount, write + sync files, unmount,
//! `e2fsck -fn` must be clean, remount and compare. Needs root, /dev/fuse and loop
//! devices: prints a loud SKIP where they are missing.

mod nbd_common;

use nbd_common::{fill_random, run, Server};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn skip(why: &str) {
    nbd_common::cannot_run("ext4 over nbdfuse", why);
}

/// Undo whatever was set up, in reverse order, even when the test panics.
#[derive(Default)]
struct Teardown {
    mount: Option<PathBuf>,
    loopdev: Option<String>,
    fuse: Option<(PathBuf, Child)>,
}

impl Drop for Teardown {
    fn drop(&mut self) {
        if let Some(m) = self.mount.take() {
            let _ = Command::new("umount").arg(&m).status();
        }
        if let Some(l) = self.loopdev.take() {
            let _ = Command::new("losetup").args(["-d", &l]).status();
        }
        if let Some((dir, mut child)) = self.fuse.take() {
            let _ = Command::new("fusermount3").arg("-u").arg(&dir).status();
            if nbd_common::wait_timeout(&mut child, Duration::from_secs(10)).is_none() {
                let _ = child.kill();
                let _ = child.wait();
            }
        }
    }
}

fn mount(dev: &str, at: &Path) {
    run(Command::new("mount").arg(dev).arg(at));
}

#[test]
fn ext4_on_nbdfuse_loop_device_fsck_clean_and_data_intact() {
    require_tools!(
        "ext4 over nbdfuse",
        "nbdfuse",
        "losetup",
        "mkfs.ext4",
        "e2fsck",
        "mount",
        "umount",
        "fusermount3"
    );
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return skip("needs root (losetup, mount)");
    }
    if !Path::new("/dev/fuse").exists() || !Path::new("/dev/loop-control").exists() {
        return skip("needs /dev/fuse and /dev/loop-control");
    }
    let dir = tempfile::tempdir().unwrap();
    let s = Server::start(dir.path(), &dir.path().join("v.img"), "512M", &[]);
    let mut td = Teardown::default();

    let fusedir = dir.path().join("fuse");
    std::fs::create_dir(&fusedir).unwrap();
    let pidfile = dir.path().join("nbdfuse.pid");
    let child = Command::new("nbdfuse")
        .arg("-P")
        .arg(&pidfile)
        .arg(fusedir.join("nbd"))
        .arg(&s.uri)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    td.fuse = Some((fusedir.clone(), child));
    let t0 = std::time::Instant::now();
    while !pidfile.exists() && t0.elapsed() < Duration::from_secs(20) {
        let exited = td.fuse.as_mut().unwrap().1.try_wait().unwrap().is_some();
        if exited {
            break; // nbdfuse gave up (e.g. FUSE not permitted here)
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    if !pidfile.exists() {
        return skip("nbdfuse did not mount (no FUSE in this environment?)");
    }
    let file = fusedir.join("nbd");
    assert_eq!(std::fs::metadata(&file).unwrap().len(), 512 << 20);

    let out = Command::new("losetup")
        .args(["-f", "--show"])
        .arg(&file)
        .output()
        .unwrap();
    if !out.status.success() {
        return skip(&format!(
            "losetup failed (no loop devices here?): {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ));
    }
    let dev = String::from_utf8_lossy(&out.stdout).trim().to_string();
    td.loopdev = Some(dev.clone());

    run(Command::new("mkfs.ext4").args(["-q", "-F", &dev]));
    let mnt = dir.path().join("mnt");
    std::fs::create_dir(&mnt).unwrap();
    mount(&dev, &mnt);
    td.mount = Some(mnt.clone());

    let mut files = Vec::new();
    for i in 0..12u64 {
        let mut data = vec![0u8; (1 << 20) + (i as usize * 12345)];
        fill_random(&mut data, 1000 + i);
        let p = mnt.join(format!("f{i}"));
        std::fs::write(&p, &data).unwrap();
        files.push((format!("f{i}"), data));
    }
    std::fs::create_dir(mnt.join("dir")).unwrap();
    std::fs::write(mnt.join("dir/small"), b"hello sluice\n").unwrap();
    run(&mut Command::new("sync"));
    run(Command::new("umount").arg(&mnt));
    td.mount = None;

    let fsck = Command::new("e2fsck").args(["-fn", &dev]).output().unwrap();
    assert!(
        fsck.status.success(),
        "e2fsck -fn found problems:\n{}{}",
        String::from_utf8_lossy(&fsck.stdout),
        String::from_utf8_lossy(&fsck.stderr)
    );

    // Drop the loop device's buffer cache so the remount reads through NBD.
    let _ = Command::new("blockdev")
        .args(["--flushbufs", &dev])
        .status();
    mount(&dev, &mnt);
    td.mount = Some(mnt.clone());
    for (name, data) in &files {
        let back = std::fs::read(mnt.join(name)).unwrap();
        assert!(back == *data, "{name} differs after remount");
    }
    assert_eq!(
        std::fs::read(mnt.join("dir/small")).unwrap(),
        b"hello sluice\n"
    );
    drop(td);
    let (code, err) = s.stop();
    assert_eq!(code, Some(0), "{err}");
}
