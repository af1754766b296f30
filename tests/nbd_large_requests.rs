//! Requests at and above the 32 MiB payload limit (`proto::MAX_PAYLOAD`, the
//! maximum block size sluice advertises with NBD_INFO_BLOCK_SIZE), from real
//! clients: libnbd (nbdsh's Python bindings, strict mode off so it sends what
//! the server refuses) gets EOVERFLOW / EINVAL for one byte-block over and the
//! connection and the data stay as they were; qemu-io's 48 MiB write and read
//! pass because qemu splits requests at the advertised maximum.

mod nbd_common;

use nbd_common::{stdout, Server};
use std::process::Command;

const PY: &str = r#"
import nbd, sys
h = nbd.NBD()
h.connect_uri(sys.argv[1])
MAX = 32 << 20
assert h.get_block_size(nbd.SIZE_MAXIMUM) == MAX, h.get_block_size(nbd.SIZE_MAXIMUM)
h.set_strict_mode(0)  # libnbd may not check the maximum itself: send what the server must refuse
h.pwrite(b"\x5a" * MAX, 4096)
assert h.pread(MAX, 4096) == b"\x5a" * MAX, "a 32 MiB write and read"
for n in (MAX + 4096, 48 << 20):
    try:
        h.pread(n, 0)
        raise SystemExit("pread of %d accepted" % n)
    except nbd.Error as e:
        assert e.errno == "EOVERFLOW", (n, e.errno, e.string)
    try:
        h.pwrite(b"\xee" * n, 0)
        raise SystemExit("pwrite of %d accepted" % n)
    except nbd.Error as e:
        assert e.errno == "EINVAL", (n, e.errno, e.string)
# The refused writes changed nothing and the connection still works.
assert h.pread(4096, 0) == bytes(4096)
assert h.pread(MAX, 4096) == b"\x5a" * MAX
h.flush()
h.shutdown()
print("large requests ok")
"#;

#[test]
fn over_32_mib_refused_cleanly_at_32_mib_served() {
    require_tools!("large requests", "nbdsh", "qemu-io");
    // nbd_common::nbdsh finds a python3 that imports libnbd's bindings.
    let Some(probe) = nbd_common::nbdsh("large requests") else {
        return;
    };
    let mut py = Command::new(probe.get_program());
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("v.img");
    let s = Server::start(dir.path(), &img, "128M", &[]);
    let out = stdout(py.args(["-c", PY, &s.uri]));
    assert!(out.contains("large requests ok"), "{out}");

    // qemu honours NBD_INFO_BLOCK_SIZE: a 48 MiB request leaves as two.
    let out = stdout(Command::new("qemu-io").args([
        "-f",
        "raw",
        "-c",
        "write -P 0x3c 1M 48M",
        "-c",
        "read -P 0x3c 1M 48M",
        "-c",
        "read -P 0 49M 4k",
        &s.uri,
    ]));
    assert!(!out.contains("fail") && !out.contains("error"), "{out}");
    // qemu-io's summary line of each 48 MiB request ("48 MiB, 1 ops; ...");
    // a bare "48 MiB" also matches a rate such as "718.348 MiB/sec"
    assert_eq!(out.matches("48 MiB, 1 ops").count(), 2, "{out}");
    let (code, err) = s.stop();
    assert_eq!(code, Some(0), "{err}");
}
