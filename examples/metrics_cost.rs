//! Cost of the metrics hooks on the request path, in nanoseconds per request
//! (single thread, metrics off vs on), to compare with the server's CPU time per
//! 4 KiB write (scripts/bench-metrics.sh). Not a test.
//! Run: cargo run --release --example metrics_cost

use sluice::metrics::{self, Req};
use std::time::Instant;

fn per_request(n: u64) -> f64 {
    let t = Instant::now();
    let mut x = 0x9e3779b97f4a7c15u64;
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let t0 = metrics::start();
        std::hint::black_box(&t0);
        metrics::done(Req::Write, (x % (1 << 18)) * 4096, 4096, true, t0);
    }
    t.elapsed().as_nanos() as f64 / n as f64
}

fn main() {
    clock_cost();
    let n = 20_000_000;
    let off = per_request(n);
    let m = metrics::enable();
    let on = per_request(n);
    let t = Instant::now();
    for i in 0..n {
        m.media.observe(i << 20, 1 << 20);
    }
    let media = t.elapsed().as_nanos() as f64 / n as f64;
    println!("hooks per request: off {off:.1} ns, on {on:.1} ns (host pattern + latency); media pattern per write {media:.1} ns");
}

#[allow(dead_code)]
fn clock_cost() {
    let n = 10_000_000u64;
    let t = Instant::now();
    for _ in 0..n {
        std::hint::black_box(Instant::now());
    }
    println!(
        "Instant::now {:.1} ns",
        t.elapsed().as_nanos() as f64 / n as f64
    );
    #[cfg(target_arch = "x86_64")]
    {
        let t = Instant::now();
        for _ in 0..n {
            // SAFETY: rdtsc has no preconditions.
            std::hint::black_box(unsafe { core::arch::x86_64::_rdtsc() });
        }
        println!("rdtsc {:.1} ns", t.elapsed().as_nanos() as f64 / n as f64);
    }
}
