//! TLS interop: `sluice serve --tls` with a test CA made here by openssl;
//! libnbd (nbdinfo, nbdcopy with `nbds://` URIs) and qemu-img (x509 creds)
//! connect, move data and read it back; plaintext is refused when TLS is
//! required; with --tls-verify-peer a client without a certificate is refused.

mod nbd_common;

use nbd_common::BIN;
use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

fn openssl(dir: &Path, args: &[&str]) {
    nbd_common::run(Command::new("openssl").current_dir(dir).args(args));
}

/// ca-cert.pem, server-cert.pem/-key.pem (localhost, 127.0.0.1) in `srv`;
/// ca-cert.pem plus client-cert.pem/-key.pem in `cli`; ca-cert.pem only in `anon`.
fn make_ca(root: &Path) {
    for d in ["ca", "srv", "cli", "anon"] {
        std::fs::create_dir_all(root.join(d)).unwrap();
    }
    let ca = root.join("ca");
    let ec = [
        "-newkey",
        "ec",
        "-pkeyopt",
        "ec_paramgen_curve:prime256v1",
        "-nodes",
    ];
    let mut a = vec!["req", "-x509"];
    a.extend_from_slice(&ec);
    a.extend_from_slice(&[
        "-keyout",
        "ca-key.pem",
        "-out",
        "ca-cert.pem",
        "-days",
        "2",
        "-subj",
        "/CN=sluice test CA",
    ]);
    openssl(&ca, &a);
    for (name, cn, ext) in [
        ("server", "localhost", "subjectAltName=DNS:localhost,IP:127.0.0.1\nextendedKeyUsage=serverAuth\nbasicConstraints=CA:FALSE\n"),
        ("client", "sluice-client", "extendedKeyUsage=clientAuth\nbasicConstraints=CA:FALSE\n"),
    ] {
        std::fs::write(ca.join(format!("{name}.ext")), ext).unwrap();
        let mut a = vec!["req"];
        a.extend_from_slice(&ec);
        let (key, csr, cert, subj) = (
            format!("{name}-key.pem"),
            format!("{name}.csr"),
            format!("{name}-cert.pem"),
            format!("/CN={cn}"),
        );
        a.extend_from_slice(&["-keyout", &key, "-out", &csr, "-subj", &subj]);
        openssl(&ca, &a);
        let ext = format!("{name}.ext");
        openssl(
            &ca,
            &["x509", "-req", "-in", &csr, "-CA", "ca-cert.pem", "-CAkey", "ca-key.pem", "-CAcreateserial", "-out", &cert, "-days", "2", "-extfile", &ext],
        );
    }
    let cp = |from: &str, to: &str| std::fs::copy(ca.join(from), root.join(to)).unwrap();
    cp("ca-cert.pem", "srv/ca-cert.pem");
    cp("server-cert.pem", "srv/server-cert.pem");
    cp("server-key.pem", "srv/server-key.pem");
    cp("ca-cert.pem", "cli/ca-cert.pem");
    cp("client-cert.pem", "cli/client-cert.pem");
    cp("client-key.pem", "cli/client-key.pem");
    cp("ca-cert.pem", "anon/ca-cert.pem");
}

/// A server killed if the test panics.
struct Guard(Child);

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// `sluice serve --port 0 ...`: (server, port).
fn serve(img: &Path, extra: &[&str]) -> (Guard, u16) {
    let mut child = Command::new(BIN)
        .arg("serve")
        .arg(img)
        .args(["--port", "0"])
        .args(extra)
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let port = line
        .trim()
        .rsplit(':')
        .next()
        .and_then(|p| p.split('/').next())
        .and_then(|p| p.parse().ok())
        .unwrap_or_else(|| panic!("no port in {line:?}"));
    (Guard(child), port)
}

fn stop(mut g: Guard) {
    // SAFETY: signalling our own child.
    unsafe { libc::kill(g.0.id() as i32, libc::SIGTERM) };
    let st = nbd_common::wait_timeout(&mut g.0, Duration::from_secs(30)).unwrap();
    assert_eq!(st.code(), Some(0));
}

#[test]
fn libnbd_and_qemu_over_tls_and_plaintext_refused() {
    require_tools!("nbd_tls", "openssl", "nbdinfo", "nbdcopy", "qemu-img");
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path();
    make_ca(root);
    let img = root.join("v.img");
    nbd_common::run(
        Command::new(BIN)
            .arg("create")
            .arg(&img)
            .args(["--size", "64M"]),
    );
    let srv = root.join("srv");
    let (child, port) = serve(&img, &["--tls-certificates", srv.to_str().unwrap()]);
    let uri = format!(
        "nbds://localhost:{port}/?tls-certificates={}",
        root.join("anon").display()
    );
    let info = nbd_common::stdout(Command::new("nbdinfo").arg(&uri));
    assert!(
        info.contains("TLS: true") || info.contains("tls: true") || info.contains("export-size"),
        "{info}"
    );
    // plaintext is refused when TLS is required
    let plain = Command::new("nbdinfo")
        .arg(format!("nbd://localhost:{port}/"))
        .output()
        .unwrap();
    assert!(
        !plain.status.success(),
        "plaintext client served under --tls require"
    );
    // data through TLS, both ways
    let mut data = vec![0u8; 4 << 20];
    nbd_common::fill_random(&mut data, 42);
    let src = root.join("in.bin");
    let back = root.join("back.bin");
    std::fs::write(&src, &data).unwrap();
    nbd_common::run(Command::new("nbdcopy").arg(&src).arg(&uri));
    nbd_common::run(Command::new("nbdcopy").arg(&uri).arg(&back));
    assert_eq!(&std::fs::read(&back).unwrap()[..data.len()], &data[..]);
    // qemu-img with x509 credentials
    let out = nbd_common::stdout(
        Command::new("qemu-img")
            .args(["compare", "--image-opts"])
            .arg(format!("driver=raw,file.driver=file,file.filename={}", back.display()))
            .arg(format!(
                "driver=raw,file.driver=nbd,file.host=localhost,file.port={port},file.tls-creds=tls0"
            ))
            .arg("--object")
            .arg(format!("tls-creds-x509,id=tls0,dir={},endpoint=client", root.join("anon").display())),
    );
    assert!(out.contains("identical"), "{out}");
    stop(child);

    // client certificates
    let (child, port) = serve(
        &img,
        &[
            "--tls-certificates",
            srv.to_str().unwrap(),
            "--tls-verify-peer",
        ],
    );
    let anon = Command::new("nbdinfo")
        .arg(format!(
            "nbds://localhost:{port}/?tls-certificates={}",
            root.join("anon").display()
        ))
        .output()
        .unwrap();
    assert!(
        !anon.status.success(),
        "a client without a certificate was served"
    );
    let with = nbd_common::stdout(Command::new("nbdinfo").arg("--size").arg(format!(
        "nbds://localhost:{port}/?tls-certificates={}",
        root.join("cli").display()
    )));
    assert!(with.trim().parse::<u64>().unwrap() > 0);
    stop(child);
}
