//! `sluice serve --device ... --replace OLD=NEW` (issue 20 item 5): a stripe
//! set member replaced and rebuilt in the background while qemu-io writes
//! through NBD; SIGTERM stops the server cleanly with the rebuild part done,
//! serving again with the same --replace resumes it; afterwards `check`
//! passes and every byte reads back with another member gone. A NEW that
//! holds data is refused without --force.

mod nbd_common;

use nbd_common::{run, stdout, wait_timeout, BIN};
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// `sluice serve ARGS --socket DIR/nbd.sock`, returned once listening.
fn serve(dir: &Path, args: &[String]) -> (Child, String) {
    let sock = dir.join("nbd.sock");
    let mut child = Command::new(BIN)
        .arg("serve")
        .args(args)
        .arg("--socket")
        .arg(&sock)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn sluice serve");
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    if line.is_empty() {
        let mut err = String::new();
        let _ = child.stderr.take().unwrap().read_to_string(&mut err);
        let _ = child.wait();
        panic!("sluice serve did not start: {err}");
    }
    (child, line.trim().to_string())
}

/// SIGTERM, wait; (exit code, stderr).
fn stop(mut child: Child) -> (Option<i32>, String) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let st = wait_timeout(&mut child, Duration::from_secs(60)).expect("exit within 60 s");
    let mut err = String::new();
    let _ = child.stderr.take().unwrap().read_to_string(&mut err);
    (st.code(), err)
}

fn devs(paths: &[PathBuf]) -> Vec<String> {
    paths
        .iter()
        .flat_map(|p| ["--device".to_string(), p.display().to_string()])
        .collect()
}

#[test]
fn serve_replace_rebuilds_while_qemu_io_writes_and_resumes_after_sigterm() {
    require_tools!(
        "serve_replace_rebuilds_while_qemu_io_writes_and_resumes_after_sigterm",
        "qemu-io"
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let m: Vec<PathBuf> = (0..5).map(|i| d.join(format!("m{i}.img"))).collect();
    let mut create = vec!["create".to_string()];
    create.extend(devs(&m));
    create.extend(["--parity", "1", "--size", "64M"].map(String::from));
    run(Command::new(BIN).args(&create));
    // data on the set before the replacement
    let (c, uri) = serve(d, &devs(&m));
    run(Command::new("qemu-io").args(["-f", "raw", "-c", "write -P 0x11 0 16M", &uri]));
    assert_eq!(stop(c).0, Some(0));
    // a NEW holding data is refused without --force
    std::fs::write(d.join("busy.img"), vec![0x42u8; 1 << 20]).unwrap();
    let mut busy = devs(&m);
    busy.extend([
        "--replace".into(),
        format!("2={}", d.join("busy.img").display()),
    ]);
    let out = Command::new(BIN)
        .arg("serve")
        .args(&busy)
        .arg("--socket")
        .arg(d.join("nbd.sock"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{text}");
    assert!(text.contains("--force"), "{text}");
    // serve with member 2 replaced, the rebuild slowed so writes overlap it
    let new = d.join("new.img");
    let mut args = devs(&m);
    args.extend([
        "--replace".into(),
        format!("{}={}", m[2].display(), new.display()),
        "--rebuild-rate".into(),
        "4M".into(),
    ]);
    let (c, uri) = serve(d, &args);
    run(Command::new("qemu-io").args(["-f", "raw", "-c", "write -P 0x22 8M 8M", &uri]));
    let (code, err) = stop(c);
    assert_eq!(code, Some(0), "{err}");
    assert!(err.contains("closed cleanly"), "{err}");
    let resumed = err.contains("stopped at segment");
    // serve again with the same --replace: resumes (no --force needed)
    // and, unpaced, finishes while qemu-io writes more
    args.truncate(args.len() - 2);
    let (c, uri) = serve(d, &args);
    run(Command::new("qemu-io").args(["-f", "raw", "-c", "write -P 0x33 16M 4M", &uri]));
    let mut now = m.clone();
    now[2] = new.clone();
    let mut done = false;
    let mut c = Some(c);
    for _ in 0..30 {
        let (code, err) = stop(c.take().unwrap());
        assert_eq!(code, Some(0), "{err}");
        if err.contains("the replaced member is rebuilt") {
            done = true;
            break;
        }
        assert!(err.contains("stopped at segment"), "{err}");
        let (c2, _) = serve(d, &args);
        std::thread::sleep(Duration::from_millis(500));
        c = Some(c2);
    }
    assert!(done, "the rebuild never finished");
    eprintln!("first serve stopped the rebuild part done: {resumed}");
    let mut info = vec!["info".to_string()];
    info.extend(devs(&now));
    let out = stdout(Command::new(BIN).args(&info));
    assert!(
        out.contains("healthy") && !out.contains("rebuild "),
        "{out}"
    );
    // another member gone: check passes and the bytes read back
    let some: Vec<PathBuf> = now
        .iter()
        .enumerate()
        .filter(|(i, _)| *i != 0)
        .map(|(_, p)| p.clone())
        .collect();
    let mut check = vec!["check".to_string()];
    check.extend(devs(&some));
    let out = Command::new(BIN).args(&check).output().unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    let mut ro = devs(&some);
    ro.push("--read-only".into());
    let (c, uri) = serve(d, &ro);
    let out = stdout(Command::new("qemu-io").args([
        "-f",
        "raw",
        "-r",
        "-c",
        "read -P 0x11 0 8M",
        "-c",
        "read -P 0x22 8M 8M",
        "-c",
        "read -P 0x33 16M 4M",
        &uri,
    ]));
    assert!(!out.contains("Pattern verification failed"), "{out}");
    assert_eq!(stop(c).0, Some(0));
}
