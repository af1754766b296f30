//! A SeaweedFS S3 server of one test (`scripts/s3-server.sh` under the
//! test's own temporary directory, on ports free when it starts), stopped
//! when the `Weed` is dropped: shared by the tests that run sluice's
//! command line against S3 (tests/objects_volume.rs, tests/bench_objects.rs).
//! tests/objects_s3.rs keeps its own, which can also name an external
//! server (SLUICE_S3_ENDPOINT).
//!
//! A server that cannot start fails the test when CI is set and prints a
//! SKIP line otherwise (the project's rule for tests that cannot run).
#![allow(dead_code)]

use std::net::TcpListener;
use std::path::PathBuf;
use std::process::Command;

/// The test server's credentials (scripts/s3-server.sh sets them).
pub const KEY: &str = "sluice-test";
pub const SECRET: &str = "sluice-test-secret";

pub fn script() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("scripts/s3-server.sh")
}

/// A SeaweedFS of this test (stopped on drop).
pub struct Weed {
    /// The test's directory: the server's data under `srv`, the rest is
    /// the test's own (cache directories, sockets).
    pub dir: tempfile::TempDir,
    pub port: u16,
}

/// A base port whose 10 ports (the server's listeners) are free now.
fn free_ports() -> u16 {
    for _ in 0..200 {
        let base = 20_000 + (rand::random::<u16>() % 4000) * 10;
        let held: Vec<_> = (0..10)
            .map_while(|i| TcpListener::bind(("127.0.0.1", base + i)).ok())
            .collect();
        if held.len() == 10 {
            return base;
        }
    }
    panic!("no 10 free consecutive ports on 127.0.0.1");
}

impl Weed {
    /// Started; or None after a SKIP line, and a panic when CI is set.
    pub fn start(test: &str) -> Option<Weed> {
        let dir = tempfile::tempdir().unwrap();
        let mut why = String::new();
        for _ in 0..3 {
            let port = free_ports();
            let out = Command::new(script())
                .arg("start")
                .arg(dir.path().join("srv"))
                .arg(port.to_string())
                .output()
                .expect("run scripts/s3-server.sh");
            if out.status.success() {
                return Some(Weed { dir, port });
            }
            why = String::from_utf8_lossy(&out.stderr).into_owned();
            if why.contains("not installed") || why.contains("no weed") {
                break;
            }
        }
        let why = format!("no S3 server (scripts/install-deps installs SeaweedFS): {why}");
        if std::env::var_os("CI").is_some() {
            panic!("{test} cannot run: {why} (CI is set: a test that cannot run fails)");
        }
        eprintln!("\n*** SKIP: {test}: {why} ***\n");
        None
    }

    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `scripts/s3-server.sh WHAT` on this server (stop, start: the store
    /// going away and coming back under a running volume).
    pub fn server(&self, what: &str) {
        let st = Command::new(script())
            .arg(what)
            .arg(self.dir.path().join("srv"))
            .arg(self.port.to_string())
            .status()
            .unwrap();
        assert!(st.success(), "s3-server.sh {what} failed");
    }
}

impl Drop for Weed {
    fn drop(&mut self) {
        let _ = Command::new(script())
            .arg("stop")
            .arg(self.dir.path().join("srv"))
            .status();
    }
}
