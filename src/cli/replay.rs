//! `sluice replay`: JESD219-style trace replay on the real engine over in-memory
//! or simulated-flash media: optional linear fill, then the trace's writes and
//! trims; WA measured over the playback only.
//!
//! Invariant: host bytes reported are exactly the 4 KiB-aligned bytes the trace
//! writes (times --passes); input errors are reported, never panics.

use anyhow::{bail, Context};
use indicatif::{ProgressBar, ProgressStyle};
use sluice::media::{FlashCounters, Ftl};
use sluice::sim::drive::{self, AddrMap, BlockTrace, MediaKind, Setup};
use sluice::sim::Measure;
use sluice::size::human;
use sluice::trace::{self, Format};
use sluice::GcPolicy;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// Trace file (.gz is decompressed).
    #[arg(long)]
    pub trace: PathBuf,
    /// msr, spc, disksim|mqsim, cloudphysics, blkparse, fio, sluice (default: a
    /// `# sluice-trace v1` header says sluice, else guessed from the file name).
    #[arg(long, value_parser = Format::parse)]
    pub format: Option<Format>,
    /// Spare space kept for GC, percent of the segment area [default: the recorded
    /// volume's for a `--record` trace, else 10].
    #[arg(long)]
    pub overprovision: Option<f64>,
    /// Segment size, e.g. 4M [default: the recorded volume's, else 4M].
    #[arg(long, value_parser = super::parse_size)]
    pub segment_size: Option<u64>,
    /// Logical size of the replay volume [default: the recorded volume's for a
    /// `--record` trace, else the highest block the trace touches].
    #[arg(long, value_parser = super::parse_size)]
    pub size: Option<u64>,
    /// GC policy (default decay-cb; greedy, cost-benefit, generational, sepbit, ...).
    #[arg(long, value_parser = GcPolicy::parse)]
    pub gc: Option<GcPolicy>,
    /// memory or flash-sim.
    #[arg(long, default_value = "memory", value_parser = MediaKind::parse)]
    pub media: MediaKind,
    /// Replay on the bare flash-sim (no sluice) too: its WA on the raw trace.
    #[arg(long)]
    pub bare: bool,
    /// flash-sim pages (4 KiB) per erase block.
    #[arg(long, default_value_t = 256)]
    pub flash_pages_per_block: u32,
    /// flash-sim over-provisioning percent (7 consumer, 28 enterprise).
    #[arg(long, default_value_t = 7.0)]
    pub flash_op: f64,
    /// Fill the logical space linearly before playback (JESD219).
    #[arg(long)]
    pub fill: bool,
    /// Drop the trace's trims.
    #[arg(long)]
    pub no_trim: bool,
    /// Address map: concat (each device's space up to its highest block, end to end)
    /// or dense (only the blocks the trace touches) [default: concat, or dense with a
    /// warning when concat would be a huge, mostly untouched space].
    #[arg(long, value_parser = AddrMap::parse)]
    pub map: Option<AddrMap>,
    /// Play the trace this many times.
    #[arg(long, default_value_t = 1)]
    pub passes: u32,
    /// Skip malformed lines (counted) instead of failing.
    #[arg(long)]
    pub lenient: bool,
    /// Run the engine's housekeeper thread (clean-ahead GC, timed checkpoints) as a
    /// server does [default: on for a `--record` trace, so it replays to the WA it
    /// had live; off otherwise, so runs are deterministic].
    #[arg(long)]
    pub background: Option<bool>,
    /// Print the report as JSON on stdout.
    #[arg(long)]
    pub json: bool,
}

/// A concat space larger than this many times the blocks the trace touches (and
/// larger than `SPARSE_MIN_BYTES`) is replayed densely unless --map concat is given.
const SPARSE_FACTOR: u64 = 4;
const SPARSE_MIN_BYTES: u64 = 16 << 30;

/// Progress on stderr every few seconds when it is not a terminal (a log, CI):
/// indicatif draws nothing there.
struct Heartbeat {
    on: bool,
    last: Instant,
}

impl Heartbeat {
    fn new() -> Heartbeat {
        use std::io::IsTerminal;
        Heartbeat {
            on: !std::io::stderr().is_terminal(),
            last: Instant::now(),
        }
    }
    fn tick(&mut self, phase: &str, done: u64, total: u64) {
        if self.on && self.last.elapsed().as_secs_f64() >= 5.0 {
            self.last = Instant::now();
            eprintln!(
                "sluice replay: {phase} {done}/{total} ({:.0}%)",
                100.0 * done as f64 / total.max(1) as f64
            );
        }
    }
}

/// Bytes of RAM available now (MemAvailable), if known.
fn mem_available() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/meminfo").ok()?;
    let l = s.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kb: u64 = l.split_whitespace().nth(1)?.parse().ok()?;
    Some(kb * 1024)
}

/// Rough RAM a replay volume of `blocks` logical blocks needs (map, segment table,
/// per-block bookkeeping), whatever the media.
fn replay_memory(blocks: u64) -> u64 {
    blocks * 24
}

#[derive(serde::Serialize)]
struct Report {
    trace: String,
    format: &'static str,
    address_map: &'static str,
    recorded_volume: Option<sluice::trace::VolumeInfo>,
    lines: u64,
    skipped_lines: u64,
    reads_dropped: u64,
    logical_bytes: u64,
    overprovision_pct: f64,
    effective_spare: f64,
    segment_bytes: u64,
    gc_policy: &'static str,
    media: &'static str,
    fill: bool,
    trims: bool,
    passes: u32,
    trace_write_bytes: u64,
    trace_trim_bytes: u64,
    playback: Measure,
    seconds: f64,
    writes_4k_per_sec: f64,
    flash: Option<FlashReport>,
    bare_flash: Option<FlashReport>,
}

#[derive(serde::Serialize)]
struct FlashReport {
    pages_per_block: u32,
    op_pct: f64,
    counters: FlashCounters,
    device_wa: f64,
    end_to_end_wa: f64,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    let header =
        trace::read_header(&a.trace).with_context(|| format!("reading {}", a.trace.display()))?;
    let rec = header.volume.clone();
    let overprovision = a
        .overprovision
        .or(rec.as_ref().map(|v| v.overprovision_pct))
        .unwrap_or(10.0);
    let segment_size = a
        .segment_size
        .or(rec.as_ref().map(|v| v.segment_bytes))
        .unwrap_or(4 << 20);
    if !(3.0..=80.0).contains(&overprovision) {
        bail!("--overprovision {overprovision} is outside 3..80 percent");
    }
    if !segment_size.is_multiple_of(4096) || segment_size < 64 << 10 {
        bail!("--segment-size must be a multiple of 4K, at least 64K");
    }
    if !(0.0..=400.0).contains(&a.flash_op) || a.flash_pages_per_block == 0 {
        bail!("--flash-op must be 0..400 and --flash-pages-per-block > 0");
    }
    if a.passes == 0 {
        bail!("--passes must be at least 1");
    }
    let fmt = match a.format {
        Some(f) => {
            if header.sluice && f != Format::Sluice {
                eprintln!(
                    "sluice: warning: {} starts with `{}` but --format {} was given",
                    a.trace.display(),
                    trace::capture::HEADER,
                    f.name()
                );
            }
            f
        }
        None if header.sluice => Format::Sluice,
        None => trace::guess_format(&a.trace).with_context(|| {
            format!(
                "cannot tell the format of {}: give --format",
                a.trace.display()
            )
        })?,
    };
    let t = trace::parse_file(fmt, &a.trace, a.lenient)
        .with_context(|| format!("reading {}", a.trace.display()))?;
    let mut map = a.map.unwrap_or(AddrMap::Concat);
    let mut bt = drive::block_trace(&t, map);
    if map == AddrMap::Concat && bt.blocks * 4096 > SPARSE_MIN_BYTES {
        let dense = drive::block_trace(&t, AddrMap::Dense);
        if bt.blocks > SPARSE_FACTOR * dense.blocks {
            if a.map.is_none() {
                eprintln!(
                    "sluice: warning: the trace spans {} of address space but touches only {}; \
                     replaying with --map dense (give --map concat to keep the sparse space)",
                    human(bt.blocks * 4096),
                    human(dense.blocks * 4096)
                );
                bt = dense;
                map = AddrMap::Dense;
            } else {
                eprintln!(
                    "sluice: warning: --map concat spans {} of address space; the trace touches only {}",
                    human(bt.blocks * 4096),
                    human(dense.blocks * 4096)
                );
            }
        }
    }
    if a.no_trim {
        // Keep flush points where they were relative to the remaining ops.
        let mut new_index = Vec::with_capacity(bt.ops.len() + 1);
        let mut n = 0;
        for o in &bt.ops {
            new_index.push(n);
            n += usize::from(!o.0);
        }
        new_index.push(n);
        let mut fps: Vec<usize> = bt.flush_points.iter().map(|&p| new_index[p]).collect();
        fps.dedup();
        bt.flush_points = fps;
        bt.ops.retain(|o| !o.0);
        bt.trim_blocks = 0;
    }
    if bt.write_blocks == 0 {
        bail!("{} has no writes: nothing to replay", a.trace.display());
    }
    let recorded_gc = rec.as_ref().and_then(|v| GcPolicy::parse(&v.gc).ok());
    let policy = a.gc.or(recorded_gc).unwrap_or(sluice::gc::DEFAULT_POLICY);
    let size_blocks = match (a.size, &rec) {
        (Some(s), _) => s / 4096,
        (None, Some(v)) if map == AddrMap::Concat => v.logical_bytes / 4096,
        _ => bt.blocks,
    };
    if size_blocks < bt.blocks {
        bail!(
            "the trace touches {} but the replay volume is {} (--size or the recorded size)",
            human(bt.blocks * 4096),
            human(size_blocks * 4096)
        );
    }
    if let Some(v) = &rec {
        if v.live_bytes > 0 && !a.fill {
            eprintln!(
                "sluice: note: the recorded volume held {} of live data when recording \
                 started; this replay starts empty (--fill starts full)",
                human(v.live_bytes)
            );
        }
    }
    let need = replay_memory(size_blocks);
    if let Some(avail) = mem_available() {
        if need > avail / 2 {
            bail!(
                "a replay volume of {} needs about {} of RAM, more than half of the {} available; \
                 use --map dense (only the blocks the trace touches) or a smaller --size",
                human(size_blocks * 4096),
                human(need),
                human(avail)
            );
        }
    }
    let setup = Setup {
        logical_blocks: size_blocks,
        overprovision: overprovision / 100.0,
        segment_bytes: segment_size,
        policy,
        media: a.media,
        flash_pages_per_block: a.flash_pages_per_block,
        flash_op: a.flash_op / 100.0,
    };
    let background = a.background.unwrap_or(rec.is_some());
    let (vol, flash) = drive::build_with(&setup, background)?;
    let geo = vol.geometry();
    let total = bt.ops.len() as u64 * a.passes as u64 + if a.fill { geo.logical_blocks } else { 0 };
    let pb = if a.json {
        ProgressBar::hidden()
    } else {
        ProgressBar::new(total)
    };
    pb.set_style(
        ProgressStyle::with_template("{msg:8} [{bar:40}] {pos}/{len} ops {per_sec} eta {eta}")
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
    );
    let mut hb = Heartbeat::new();
    let mut d = drive::Driver::new(&vol);
    if a.fill {
        pb.set_message("fill");
        let mut n = 0u64;
        d.fill(|k| {
            n += k;
            if n % 65536 < k {
                pb.set_position(n);
                hb.tick("fill", n, geo.logical_blocks);
            }
        })?;
    }
    let s0 = vol.stats();
    let f0 = flash.as_ref().map(|f| f.counters());
    pb.set_message("replay");
    let t0 = Instant::now();
    let mut done = 0u64;
    for _ in 0..a.passes {
        let mut fp = bt.flush_points.iter().peekable();
        for (i, &(trim, l, n)) in bt.ops.iter().enumerate() {
            while fp.next_if(|&&p| p <= i).is_some() {
                vol.flush()?;
            }
            if trim {
                d.trim_blocks(l, n as u64)?;
            } else {
                d.write_blocks(l, n as u64)?;
            }
            done += 1;
            if done.is_multiple_of(65536) {
                pb.inc(65536);
                hb.tick("replay", done, bt.ops.len() as u64 * a.passes as u64);
            }
        }
    }
    vol.flush()?;
    let secs = t0.elapsed().as_secs_f64();
    pb.finish_and_clear();
    let s1 = vol.stats();
    let m = Measure::between(&s0, &s1);
    let flash_rep = match (&flash, f0) {
        (Some(f), Some(f0)) => {
            let c1 = f.counters();
            let c = FlashCounters {
                host_pages: c1.host_pages - f0.host_pages,
                nand_programs: c1.nand_programs - f0.nand_programs,
                gc_pages: c1.gc_pages - f0.gc_pages,
                erases: c1.erases - f0.erases,
                trimmed_pages: c1.trimmed_pages - f0.trimmed_pages,
            };
            Some(FlashReport {
                pages_per_block: a.flash_pages_per_block,
                op_pct: a.flash_op,
                counters: c,
                device_wa: c.wa(),
                end_to_end_wa: c.nand_programs as f64 * 4096.0 / m.host_bytes.max(1) as f64,
            })
        }
        _ => None,
    };
    let bare = if a.bare {
        Some(bare_flash(
            &bt,
            a.fill,
            a.passes,
            a.flash_pages_per_block,
            a.flash_op / 100.0,
            size_blocks,
        )?)
    } else {
        None
    };
    let rep = Report {
        trace: a.trace.display().to_string(),
        format: fmt.name(),
        address_map: match map {
            AddrMap::Concat => "concat",
            AddrMap::Dense => "dense",
        },
        recorded_volume: rec,
        lines: t.lines,
        skipped_lines: t.skipped,
        reads_dropped: bt.reads,
        logical_bytes: geo.logical_bytes(),
        overprovision_pct: overprovision,
        effective_spare: drive::effective_spare(&geo),
        segment_bytes: segment_size,
        gc_policy: policy.name(),
        media: match a.media {
            MediaKind::Memory => "memory",
            MediaKind::FlashSim => "flash-sim",
        },
        fill: a.fill,
        trims: !a.no_trim,
        passes: a.passes,
        trace_write_bytes: bt.write_blocks * 4096 * a.passes as u64,
        trace_trim_bytes: bt.trim_blocks * 4096 * a.passes as u64,
        playback: m,
        seconds: secs,
        writes_4k_per_sec: m.host_bytes as f64 / 4096.0 / secs.max(1e-9),
        flash: flash_rep,
        bare_flash: bare,
    };
    if a.json {
        println!("{}", serde_json::to_string_pretty(&rep)?);
    } else {
        print_report(&rep);
    }
    Ok(0)
}

/// The same block trace straight on a flash-sim the size of the logical space.
fn bare_flash(
    bt: &BlockTrace,
    fill: bool,
    passes: u32,
    ppb: u32,
    op: f64,
    blocks: u64,
) -> anyhow::Result<FlashReport> {
    let mut f = Ftl::new(blocks.max(1), ppb, op)?;
    if fill {
        f.write_pages(0, blocks);
    }
    let c0 = f.c;
    for _ in 0..passes {
        for &(trim, l, n) in &bt.ops {
            if trim {
                f.trim_pages(l, n as u64);
            } else {
                f.write_pages(l, n as u64);
            }
        }
    }
    let c = FlashCounters {
        host_pages: f.c.host_pages - c0.host_pages,
        nand_programs: f.c.nand_programs - c0.nand_programs,
        gc_pages: f.c.gc_pages - c0.gc_pages,
        erases: f.c.erases - c0.erases,
        trimmed_pages: f.c.trimmed_pages - c0.trimmed_pages,
    };
    Ok(FlashReport {
        pages_per_block: ppb,
        op_pct: op * 100.0,
        counters: c,
        device_wa: c.wa(),
        end_to_end_wa: c.wa(),
    })
}

fn print_report(r: &Report) {
    println!(
        "trace        {} ({}, {} lines, {} skipped, {} reads dropped, map {})",
        r.trace, r.format, r.lines, r.skipped_lines, r.reads_dropped, r.address_map
    );
    if let Some(v) = &r.recorded_volume {
        println!(
            "recorded on  {} logical, {} segments, {}% OP, gc {}",
            human(v.logical_bytes),
            human(v.segment_bytes),
            v.overprovision_pct,
            v.gc
        );
    }
    println!(
        "volume       {} logical, {:.1}% OP (effective spare {:.2}%), {} segments, gc {}, media {}",
        human(r.logical_bytes),
        r.overprovision_pct,
        r.effective_spare * 100.0,
        human(r.segment_bytes),
        r.gc_policy,
        r.media
    );
    println!(
        "playback     fill {}, trims {}, passes {}: {} written, {} trimmed",
        r.fill,
        r.trims,
        r.passes,
        human(r.trace_write_bytes),
        human(r.trace_trim_bytes)
    );
    let m = &r.playback;
    println!("host         {} ({} B)", human(m.host_bytes), m.host_bytes);
    println!(
        "media        {} = user {} + gc {} + headers {} + checkpoints {} + superblock {}",
        human(m.media_bytes),
        human(m.user_data_bytes),
        human(m.gc_data_bytes),
        human(m.header_bytes),
        human(m.checkpoint_bytes),
        human(m.superblock_bytes)
    );
    println!("WA           {:.4} (data only {:.4})", m.wa, m.wa_data);
    println!(
        "GC           {} runs, {} blocks moved, {} read ({:.2} bytes read per byte moved)",
        m.gc_runs,
        m.gc_blocks_moved,
        human(m.gc_bytes_read),
        m.gc_bytes_read as f64 / (m.gc_blocks_moved * 4096).max(1) as f64
    );
    println!(
        "speed        {:.2} s, {:.0} 4K writes/s",
        r.seconds, r.writes_4k_per_sec
    );
    if let Some(f) = &r.flash {
        println!(
            "flash-sim    device WA {:.4}, end-to-end WA {:.4} ({} programs, {} erases, {} pages/block, {:.0}% OP)",
            f.device_wa, f.end_to_end_wa, f.counters.nand_programs, f.counters.erases, f.pages_per_block, f.op_pct
        );
    }
    if let Some(f) = &r.bare_flash {
        println!(
            "bare flash   device WA {:.4} ({} programs, {} erases) without sluice",
            f.device_wa, f.counters.nand_programs, f.counters.erases
        );
    }
}
