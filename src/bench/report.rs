//! Terminal tables for bench results: the grid in the seed's layout (random read
//! tests left, random write tests right, IOPS and MB/sec per thread count), the
//! diskinfo -S lines for slog, per-interval steady tables with the SNIA verdict,
//! the mix normalisation, and side-by-side comparisons with ratios to the first target.
//!
//! Invariant: rendering is a pure function of a `Report` (a partial report renders
//! what it holds); MB/sec means MiB/s, as in the seed's tables.

use super::run::PhaseResult;
use super::{Report, TargetRun, Workload};
use std::fmt::Write;

/// 512, 1K, 4K, 128K, 2M ...
pub fn size_label(b: u64) -> String {
    if b >= 1 << 20 && b.is_multiple_of(1 << 20) {
        format!("{}M", b >> 20)
    } else if b >= 1 << 10 && b.is_multiple_of(1 << 10) {
        format!("{}K", b >> 10)
    } else {
        format!("{b}")
    }
}

/// 12,880 (integers with thousands separators).
pub fn thousands(v: f64) -> String {
    let n = v.round() as i64;
    let s = n.unsigned_abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 {
        format!("-{out}")
    } else {
        out
    }
}

fn mbs(v: f64) -> String {
    if v >= 1000.0 {
        let whole = thousands(v.trunc());
        format!("{whole}.{}", ((v.fract() * 10.0).round() as i64).min(9))
    } else {
        format!("{v:.1}")
    }
}

fn ratio(a: f64, b: f64) -> String {
    if b > 0.0 && a > 0.0 {
        format!("{:.2}x", a / b)
    } else {
        "-".into()
    }
}

fn cell(p: Option<&PhaseResult>) -> (String, String) {
    match p {
        Some(p) if p.measured() => (thousands(p.iops), mbs(p.mib_s)),
        Some(p) if p.skipped.is_some() => ("n/a".into(), "n/a".into()),
        _ => ("-".into(), "-".into()),
    }
}

fn marks(t: &TargetRun) -> String {
    let mut s = String::new();
    if t.phases.iter().any(|p| !p.complete && p.skipped.is_none()) {
        s.push_str("  (* = cut short)");
    }
    s
}

fn grid_sizes_threads(t: &TargetRun) -> (Vec<u64>, Vec<usize>) {
    let mut sizes: Vec<u64> = t.phases.iter().map(|p| p.block_bytes).collect();
    sizes.sort();
    sizes.dedup();
    let mut threads: Vec<usize> = t.phases.iter().map(|p| p.threads).collect();
    threads.sort();
    threads.dedup();
    (sizes, threads)
}

/// The seed's grid layout for one target.
/// "CPU 12.3 us/op (user 8.1 s, sys 4.2 s), 1.23 cores": what a result costs.
pub fn cpu_line(c: &super::run::Cpu) -> String {
    format!(
        "CPU {:.1} us/op (user {:.2} s, sys {:.2} s), {:.2} cores busy",
        c.us_per_op, c.user_s, c.sys_s, c.cores
    )
}

pub fn grid_table(t: &TargetRun) -> String {
    let (sizes, threads) = grid_sizes_threads(t);
    let mut o = String::new();
    let _ = writeln!(o, "{}  [{}]{}", t.target, t.description, marks(t));
    let half = 7 + threads.len() * 20;
    let _ = writeln!(
        o,
        "{:<half$}   {:<half$}",
        "Random Read Tests", "Random Write Tests"
    );
    let mut h1 = String::new();
    let mut h2 = String::new();
    for _ in 0..2 {
        let _ = write!(h1, "{:<7}", "Block");
        let _ = write!(h2, "{:<7}", "Size");
        for th in &threads {
            let label = if *th == 1 {
                "1 Thread".to_string()
            } else {
                format!("{th} Threads")
            };
            let _ = write!(h1, "{label:>20}");
            let _ = write!(h2, "{:>10}{:>10}", "IOPS", "MB/sec");
        }
        h1.push_str("   ");
        h2.push_str("   ");
    }
    let _ = writeln!(o, "{h1}Block");
    let _ = writeln!(o, "{h2}Size");
    for &b in &sizes {
        let mut line = String::new();
        for name in ["randread", "randwrite"] {
            let _ = write!(line, "{:<7}", size_label(b));
            for &th in &threads {
                let p = t.find(name, b, th);
                let (i, m) = cell(p);
                let star = if p.is_some_and(|p| !p.complete && p.measured()) {
                    "*"
                } else {
                    ""
                };
                let _ = write!(line, "{:>10}{:>10}", format!("{i}{star}"), m);
            }
            line.push_str("   ");
        }
        let _ = writeln!(o, "{line}{}", size_label(b));
    }
    o
}

/// A table with one column per (read/write, thread count) and one row per
/// block size of `t`'s grid, each cell `cell(phase name, block, threads)`.
fn grid_cells(t: &TargetRun, title: &str, cell: impl Fn(&str, u64, usize) -> String) -> String {
    let (sizes, threads) = grid_sizes_threads(t);
    let mut o = String::new();
    let _ = writeln!(o, "{title}");
    let mut h = format!("{:<7}", "Size");
    for name in ["read", "write"] {
        for th in &threads {
            let _ = write!(h, "{:>12}", format!("{name} x{th}"));
        }
    }
    let _ = writeln!(o, "{h}");
    for &b in &sizes {
        let mut line = format!("{:<7}", size_label(b));
        for name in ["randread", "randwrite"] {
            for &th in &threads {
                let _ = write!(line, "{:>12}", cell(name, b, th));
            }
        }
        let _ = writeln!(o, "{line}");
    }
    o
}

/// CPU microseconds per operation of every grid cell (process CPU, user + sys):
/// how many cores a given speed needs.
fn grid_cpu(t: &TargetRun) -> String {
    let title = format!(
        "{}: CPU us per operation (user + sys, this process)",
        t.target
    );
    grid_cells(t, &title, |name, b, th| {
        t.find(name, b, th)
            .filter(|p| p.measured())
            .and_then(|p| p.cpu)
            .map_or("-".to_string(), |c| format!("{:.1}", c.us_per_op))
    })
}

/// IOPS of every grid cell relative to the first target.
fn grid_ratios(base: &TargetRun, t: &TargetRun) -> String {
    let title = format!("{} / {} (IOPS ratio)", t.target, base.target);
    grid_cells(t, &title, |name, b, th| {
        let iops = |r: &TargetRun| r.find(name, b, th).filter(|p| p.measured()).map(|p| p.iops);
        ratio(iops(t).unwrap_or(0.0), iops(base).unwrap_or(0.0))
    })
}

fn slog_table(r: &Report) -> String {
    let mut o = String::new();
    for t in &r.targets {
        let _ = writeln!(o, "{}  [{}]{}", t.target, t.description, marks(t));
        let _ = writeln!(
            o,
            "Synchronous random writes (each followed by a cache flush):"
        );
        for p in &t.phases {
            if let Some(s) = &p.skipped {
                let _ = writeln!(
                    o,
                    "\t{:>6} kbytes: skipped ({s})",
                    p.block_bytes as f64 / 1024.0
                );
                continue;
            }
            if p.ops == 0 {
                continue;
            }
            let _ = writeln!(
                o,
                "\t{:>6} kbytes: {:>8.1} usec/IO = {:>8.1} Mbytes/s   (p99 {:.1} usec, {} writes){}",
                format!("{:.4}", p.block_bytes as f64 / 1024.0).trim_end_matches('0').trim_end_matches('.'),
                p.seconds * 1e6 / p.ops as f64,
                p.mib_s,
                p.latency.p99_us,
                p.ops,
                if p.complete { "" } else { " *" }
            );
        }
        o.push('\n');
    }
    if r.targets.len() > 1 {
        let base = &r.targets[0];
        let _ = writeln!(o, "Side by side: usec/IO (ratio to {})", base.target);
        let mut h = format!("{:<7}", "Size");
        for t in &r.targets {
            let _ = write!(h, "{:>22}", short(&t.target, 21));
        }
        let _ = writeln!(o, "{h}");
        let sizes: Vec<u64> = base.phases.iter().map(|p| p.block_bytes).collect();
        for b in sizes {
            let us = |t: &TargetRun| {
                t.phases
                    .iter()
                    .find(|p| p.block_bytes == b && p.measured())
                    .map(|p| p.seconds * 1e6 / p.ops as f64)
            };
            let z = us(base);
            let mut line = format!("{:<7}", size_label(b));
            for t in &r.targets {
                let v = us(t);
                let s = match (v, z) {
                    (Some(v), Some(z)) => format!("{v:.1} ({})", ratio(v, z)),
                    (Some(v), None) => format!("{v:.1}"),
                    _ => "-".into(),
                };
                let _ = write!(line, "{s:>22}");
            }
            let _ = writeln!(o, "{line}");
        }
    }
    o
}

fn short(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let tail: String = s
            .chars()
            .rev()
            .take(n - 1)
            .collect::<Vec<_>>()
            .into_iter()
            .rev()
            .collect();
        format!("…{tail}")
    }
}

fn steady_table(r: &Report) -> String {
    let mut o = String::new();
    for t in &r.targets {
        let _ = writeln!(o, "{}  [{}]{}", t.target, t.description, marks(t));
        let Some(p) = t.phases.iter().find(|p| p.name == "steady") else {
            let _ = writeln!(o, "  (no steady phase measured)");
            continue;
        };
        let _ = writeln!(
            o,
            "{:>9} {:>10} {:>10} {:>8}",
            "t (s)", "IOPS", "MB/sec", "WA"
        );
        for s in &p.samples {
            let _ = writeln!(
                o,
                "{:>9.1} {:>10} {:>10} {:>8}{}",
                s.t_s,
                thousands(s.iops),
                mbs(s.mib_s),
                s.write_amplification
                    .map(|w| format!("{w:.2}"))
                    .unwrap_or_else(|| "-".into()),
                if s.partial { "  (partial)" } else { "" }
            );
        }
        let _ = writeln!(
            o,
            "whole run: {} IOPS, {} MB/sec, latency mean {:.0} us, p99 {:.0} us, p99.9 {:.0} us, max {:.0} us{}",
            thousands(p.iops),
            mbs(p.mib_s),
            p.latency.mean_us,
            p.latency.p99_us,
            p.latency.p999_us,
            p.latency.max_us,
            p.write_amplification
                .map(|w| format!(", write amplification {w:.2}"))
                .unwrap_or_default()
        );
        if let Some(c) = &p.cpu {
            let _ = writeln!(o, "{}", cpu_line(c));
        }
        if let Some(ss) = &t.steady_state {
            let _ = writeln!(
                o,
                "steady state (SNIA PTS, last {} intervals): {} - {}",
                ss.window,
                if ss.reached { "REACHED" } else { "not reached" },
                ss.reason
            );
        }
        o.push('\n');
    }
    if r.targets.len() > 1 {
        let base = &r.targets[0];
        let last5 = |t: &TargetRun| t.steady_state.as_ref().map(|s| s.average).unwrap_or(0.0);
        let _ = writeln!(o, "Side by side (IOPS averaged over the last 5 intervals):");
        for t in &r.targets {
            let _ = writeln!(
                o,
                "  {:<50} {:>10}  {}",
                short(&t.target, 50),
                thousands(last5(t)),
                ratio(last5(t), last5(base))
            );
        }
    }
    o
}

fn mix_table(r: &Report) -> String {
    let mut o = String::new();
    let base = r.targets.first();
    let _ = writeln!(
        o,
        "4 KiB random, {} outstanding IOs; composite = R / (0.7 + 0.3 R / W)",
        r.config.threads.first().copied().unwrap_or(1)
    );
    let _ = writeln!(
        o,
        "{:<40} {:>10} {:>10} {:>12} {:>12} {:>8}",
        "target", "read R", "write W", "70/30 meas.", "composite", "ratio"
    );
    for t in &r.targets {
        match &t.mix {
            Some(m) => {
                let n = m.normalised_iops.unwrap_or(0.0);
                let z = base
                    .and_then(|b| b.mix.as_ref())
                    .and_then(|m| m.normalised_iops)
                    .unwrap_or(0.0);
                let _ = writeln!(
                    o,
                    "{:<40} {:>10} {:>10} {:>12} {:>12} {:>8}",
                    short(&t.target, 40),
                    thousands(m.read_iops),
                    thousands(m.write_iops),
                    thousands(m.mixed_iops),
                    thousands(n),
                    ratio(n, z)
                );
            }
            None => {
                let _ = writeln!(
                    o,
                    "{:<40} (incomplete: {})",
                    short(&t.target, 40),
                    t.error.clone().unwrap_or_else(|| "interrupted".into())
                );
            }
        }
    }
    o
}

fn ceiling_table(r: &Report) -> String {
    let mut o = String::new();
    let base_seq = r
        .targets
        .first()
        .and_then(|t| t.ceiling.as_ref())
        .map(|c| c.seq_write_mib_s)
        .unwrap_or(0.0);
    let _ = writeln!(
        o,
        "4 KiB random write ({} outstanding) vs 1 MiB sequential write (1 outstanding)",
        r.config.threads.first().copied().unwrap_or(1)
    );
    let _ = writeln!(
        o,
        "{:<40} {:>11} {:>11} {:>11} {:>10} {:>12} {:>6}",
        "target", "seq MB/s", "rand IOPS", "rand MB/s", "rand/own", "rand/first", "WA"
    );
    for t in &r.targets {
        let wa = t
            .phases
            .iter()
            .find(|p| p.name == "randwrite")
            .and_then(|p| p.write_amplification)
            .map(|w| format!("{w:.2}"))
            .unwrap_or_else(|| "-".into());
        match &t.ceiling {
            Some(c) => {
                let _ = writeln!(
                    o,
                    "{:<40} {:>11} {:>11} {:>11} {:>9.0}% {:>11.0}% {:>6}",
                    short(&t.target, 40),
                    mbs(c.seq_write_mib_s),
                    thousands(c.rand_write_iops),
                    mbs(c.rand_write_mib_s),
                    c.rand_over_own_seq * 100.0,
                    c.rand_write_mib_s / base_seq.max(1e-9) * 100.0,
                    wa
                );
            }
            None => {
                let _ = writeln!(o, "{:<40} (incomplete)", short(&t.target, 40));
            }
        }
    }
    o
}

/// Every measured phase's CPU cost (grid and steady print theirs in place).
fn phase_cpu(r: &Report) -> String {
    let mut o = String::new();
    for t in &r.targets {
        for p in t.phases.iter().filter(|p| p.measured()) {
            if let Some(c) = &p.cpu {
                let label = format!("{} {} {}", t.target, p.name, size_label(p.block_bytes));
                let _ = writeln!(o, "{:<48} {}", short(&label, 48), cpu_line(c));
            }
        }
    }
    o
}

fn fill_table(r: &Report) -> String {
    let mut o = String::new();
    for t in &r.targets {
        for p in &t.phases {
            let _ = writeln!(
                o,
                "{:<40} wrote {} MiB in {:.1} s = {} MB/sec{}",
                short(&t.target, 40),
                thousands(p.bytes as f64 / (1 << 20) as f64),
                p.seconds,
                mbs(p.mib_s),
                if p.complete { "" } else { " (cut short)" }
            );
        }
    }
    o
}

/// `durable`: per target and thread count, durable writes per second (each
/// counted once its FLUSH returned), the ratio to the first target at the
/// same count, the latency of write + FLUSH and of the FLUSH alone, CPU per
/// write, and what the engine (and its store) did for the FLUSHes.
fn durable_table(r: &Report) -> String {
    let mut o = String::new();
    let block = r.config.sizes.first().copied().unwrap_or(4096);
    let _ = writeln!(
        o,
        "{} random writes, each followed by a FLUSH, per thread (IOPS = writes durable when their FLUSH returned)",
        size_label(block)
    );
    let _ = writeln!(
        o,
        "{:<40} {:>4} {:>9} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8}",
        "target",
        "thr",
        "IOPS",
        "/first",
        "op p50",
        "op p99",
        "fl p50",
        "fl p99",
        "fl p99.9",
        "CPU/wr",
        "wr/flush"
    );
    let first = r.targets.first();
    for t in &r.targets {
        for p in t.phases.iter().filter(|p| p.name == "durable") {
            let base = first
                .and_then(|f| f.find("durable", p.block_bytes, p.threads))
                .filter(|b| b.measured())
                .map(|b| b.iops)
                .unwrap_or(0.0);
            let fl = p.flush_latency.clone().unwrap_or_default();
            let us = |v: f64| format!("{v:.0}us");
            let _ = writeln!(
                o,
                "{:<40} {:>4} {:>9} {:>7} {:>9} {:>9} {:>9} {:>9} {:>9} {:>9} {:>8}{}",
                short(&t.target, 40),
                p.threads,
                thousands(p.iops),
                ratio(p.iops, base),
                us(p.latency.p50_us),
                us(p.latency.p99_us),
                us(fl.p50_us),
                us(fl.p99_us),
                us(fl.p999_us),
                p.cpu
                    .map(|c| format!("{:.1}us", c.us_per_op))
                    .unwrap_or_else(|| "-".into()),
                p.durable
                    .as_ref()
                    .map(|d| format!("{:.1}", d.writes_per_media_flush))
                    .unwrap_or_else(|| "-".into()),
                if p.complete { "" } else { " *" }
            );
        }
    }
    for t in &r.targets {
        for p in t.phases.iter().filter(|p| p.name == "durable") {
            let Some(d) = &p.durable else { continue };
            let _ = writeln!(
                o,
                "{} x{}: {} writes, {} FLUSHes, {} media flushes ({:.1} writes each), {} log records, {} chunks sealed, {} group-commit waits",
                t.target,
                p.threads,
                d.writes,
                d.host_flushes,
                d.media_flushes,
                d.writes_per_media_flush,
                d.log_records,
                d.chunks_sealed,
                d.group_commit_waits
            );
            if let Some(st) = &d.store {
                let _ = writeln!(
                    o,
                    "{} x{}: store: {} FLUSH log PUTs ({:.0}/s, {:.2} ms each, {:.1} writes each, {:.1} MiB), {} segment uploads ({:.1} MiB), {} GETs",
                    t.target,
                    p.threads,
                    st.log_puts,
                    st.log_puts_per_s,
                    st.log_put_ms,
                    st.writes_per_log_put,
                    st.log_bytes as f64 / (1 << 20) as f64,
                    st.uploads,
                    st.upload_bytes as f64 / (1 << 20) as f64,
                    st.gets
                );
            }
        }
    }
    o
}

/// The whole report as terminal text.
pub fn render(r: &Report) -> String {
    let mut o = String::new();
    if r.interrupted {
        let _ = writeln!(o, "INTERRUPTED: what was measured before Ctrl-C\n");
    }
    if r.config.compressible > 0 {
        let _ = writeln!(
            o,
            "payload: {pct}% of every 4 KiB block zeros after a random head (fio \
             buffer_compress_percentage={pct}, buffer_compress_chunk=4k); LZ4 alone keeps \
             {:.0}% of such a block. A sluice target's WA is media bytes per host byte: \
             with compression, bytes stored per byte written.\n",
            super::workload::lz4_share(r.config.seed, r.config.compressible) * 100.0,
            pct = r.config.compressible
        );
    }
    for t in &r.targets {
        if let Some(p) = &t.prefill {
            let _ = writeln!(
                o,
                "{}: prefilled {} in {:.1} s ({} MB/sec)",
                t.target,
                super::super::size::human(p.bytes),
                p.seconds,
                mbs(p.mib_s)
            );
        }
    }
    match r.workload {
        Workload::Grid => {
            for t in &r.targets {
                o.push_str(&grid_table(t));
                o.push('\n');
            }
            for t in &r.targets {
                o.push_str(&grid_cpu(t));
                o.push('\n');
            }
            if let Some(base) = r.targets.first() {
                for t in r.targets.iter().skip(1) {
                    o.push_str(&grid_ratios(base, t));
                    o.push('\n');
                }
            }
        }
        Workload::Slog => o.push_str(&slog_table(r)),
        Workload::Steady => o.push_str(&steady_table(r)),
        Workload::Mix => o.push_str(&mix_table(r)),
        Workload::Ceiling => o.push_str(&ceiling_table(r)),
        Workload::Fill => o.push_str(&fill_table(r)),
        Workload::Durable => o.push_str(&durable_table(r)),
    }
    if matches!(
        r.workload,
        Workload::Slog | Workload::Mix | Workload::Ceiling | Workload::Durable
    ) {
        o.push_str(&phase_cpu(r));
    }
    for t in &r.targets {
        if let Some(e) = &t.error {
            let _ = writeln!(o, "{}: stopped by an error: {e}", t.target);
        }
        if let Some(w) = t.write_amplification {
            let st = t.stats_after.as_ref();
            let _ = writeln!(
                o,
                "{}: engine write amplification over the run {:.3}; map {:.2} bytes per logical block; GC runs {}",
                t.target,
                w,
                st.map(|s| s.map_bytes_per_block).unwrap_or(0.0),
                st.map(|s| s.gc_runs).unwrap_or(0)
            );
        }
        if let (Some(a), Some(b)) = (&t.stats_before, &t.stats_after) {
            if t.description.contains("stripe set") {
                let _ = writeln!(
                    o,
                    "{}: stripe set member reads over the run {} (GC runs {})",
                    t.target,
                    b.stripe_member_reads.saturating_sub(a.stripe_member_reads),
                    b.gc_runs.saturating_sub(a.gc_runs)
                );
            }
        }
    }
    o
}

#[cfg(test)]
mod tests {
    use super::*;
    #[test]
    fn labels_and_numbers_print_like_the_seed() {
        assert_eq!(size_label(512), "512");
        assert_eq!(size_label(4096), "4K");
        assert_eq!(size_label(128 << 10), "128K");
        assert_eq!(size_label(2 << 20), "2M");
        assert_eq!(thousands(12880.4), "12,880");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(1_234_567.0), "1,234,567");
        assert_eq!(thousands(-1500.0), "-1,500");
        assert_eq!(mbs(16.54), "16.5");
        assert_eq!(mbs(1108.0), "1,108.0");
        assert_eq!(ratio(2.0, 1.0), "2.00x");
        assert_eq!(ratio(2.0, 0.0), "-");
        assert_eq!(short("abcdef", 4), "…def");
    }
}
