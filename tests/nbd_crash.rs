//! kill -9 of `sluice serve` under a libnbd write load with periodic flushes; the
//! restarted server recovers and every write acknowledged before the last
//! completed FLUSH reads back (tests/nbd_scripts/flush_load.py checks content).

mod nbd_common;

use nbd_common::{run, Server};
use std::process::{Command, Stdio};
use std::time::Duration;

fn last_round(state: &str, what: &str) -> u64 {
    state
        .lines()
        .filter_map(|l| l.strip_prefix(what))
        .filter_map(|n| n.trim().parse().ok())
        .max()
        .unwrap_or(0)
}

#[test]
fn kill_9_under_flushing_write_load_keeps_every_flushed_write() {
    require_tools!("kill -9 under libnbd load", "nbdsh");
    let Some(probe) = nbd_common::nbdsh("kill -9 under libnbd load") else {
        return;
    };
    let nbdsh = || {
        let mut c = Command::new(probe.get_program());
        c.args(probe.get_args());
        c
    };
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/nbd_scripts/flush_load.py"
    );
    let exec = format!("exec(open({script:?}).read())");
    let dir = tempfile::tempdir().unwrap();
    let img = dir.path().join("v.img");
    for cycle in 0..2 {
        let state = dir.path().join(format!("state{cycle}"));
        let s = Server::start(dir.path(), &img, "256M", &[]);
        let mut load = nbdsh()
            .args(["-u", &s.uri, "-c", &exec])
            .env("MODE", "load")
            .env("STATE", &state)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        // Let the load run (past several flushes), then crash the server under it.
        let t0 = std::time::Instant::now();
        while last_round(
            &std::fs::read_to_string(&state).unwrap_or_default(),
            "flushed ",
        ) < 12
            && t0.elapsed() < Duration::from_secs(60)
        {
            std::thread::sleep(Duration::from_millis(100));
        }
        std::thread::sleep(Duration::from_millis(300 + 400 * cycle));
        s.kill9();
        let _ = load.wait();
        let st = std::fs::read_to_string(&state).unwrap();
        let (flushed, started) = (last_round(&st, "flushed "), last_round(&st, "start "));
        assert!(flushed >= 12, "load made too little progress: {st}");

        let s = Server::start(dir.path(), &img, "256M", &[]);
        let out = run(nbdsh()
            .args(["-u", &s.uri, "-c", &exec])
            .env("MODE", "verify")
            .env("FLUSHED", flushed.to_string())
            .env("STARTED", started.to_string()));
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains(": 0 bad"), "{text}");
        eprintln!("cycle {cycle}: {}", text.trim());
        // Wipe the pattern so the next cycle's rounds start from a known state.
        run(nbdsh().args([
            "-u",
            &s.uri,
            "-c",
            "h.zero(h.get_size(), 0)",
            "-c",
            "h.flush()",
        ]));
        let (code, err) = s.stop();
        assert_eq!(code, Some(0), "{err}");
    }
    let out = Command::new(nbd_common::BIN)
        .arg("check")
        .arg(&img)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sluice check after crashes: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
