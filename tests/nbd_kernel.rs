//! The Linux kernel's NBD client against `sluice serve`: runs
//! `scripts/kernel-nbd.sh` (Debian's 6.1 kernel under qemu TCG with a busybox
//! initramfs; nbd-client, ext4 with mkfs/fstrim/e2fsck at 4 KiB and 512 B block
//! sizes, two connections, a read-only export; then `sluice check` and every
//! file read back on the host). 40-70 s here once the packages are cached.
//! A loud SKIP when it cannot run (exit status 2: no qemu, no packages), a
//! failure under env CI.

mod nbd_common;

use std::process::Command;

#[test]
fn linux_kernel_client_ext4_block_sizes_multi_conn_read_only() {
    let script = concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/kernel-nbd.sh");
    let out = Command::new("bash")
        .arg(script)
        .env("SLUICE", nbd_common::BIN)
        .output()
        .expect("run scripts/kernel-nbd.sh");
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    println!("{stdout}");
    eprintln!("{stderr}");
    match out.status.code() {
        Some(0) => assert!(
            stdout.contains("kernel-nbd: PASS (all 8 cases)"),
            "exit 0 without the PASS line"
        ),
        Some(2) => nbd_common::cannot_run(
            "linux_kernel_client",
            &format!("scripts/kernel-nbd.sh could not run: {}", stderr.trim()),
        ),
        c => panic!("scripts/kernel-nbd.sh failed (exit {c:?}): see the case lines above"),
    }
}
