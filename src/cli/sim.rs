//! `sluice sim`: synthetic workloads on the real engine, swept over
//! over-provisioning, printed beside Desnoyers' analytic greedy WA; `--plot`
//! writes the chart (SVG).
//!
//! Invariant: each point is measured on a fresh volume after a linear fill and a
//! warm-up, over a window of `--measure` times the logical size of host writes.

use anyhow::{bail, Context};
use indicatif::ProgressBar;
use sluice::media::outfile::{self, Output};
use sluice::sim::drive::{self, MediaKind, Setup};
use sluice::sim::workload::SimOp;
use sluice::sim::{greedy_wa_analytic, Gen, Measure, Workload};
use sluice::GcPolicy;
use std::path::PathBuf;
use std::time::Instant;

#[derive(clap::Args)]
pub struct Args {
    /// uniform, zipf:THETA, hotcold:OPS/SPACE, seq, mix:W@weight,W@weight...
    #[arg(long, default_value = "uniform", value_parser = Workload::parse)]
    pub workload: Workload,
    /// Logical size.
    #[arg(long, value_parser = super::parse_size, default_value = "1G")]
    pub size: u64,
    /// Over-provisioning percents to sweep, e.g. 5,7,10,20,30,50.
    #[arg(long, value_delimiter = ',', default_value = "10")]
    pub sweep: Vec<f64>,
    /// Segment (write block) size, e.g. 4M.
    #[arg(long, value_parser = super::parse_size, default_value = "4M")]
    pub segment_size: u64,
    /// GC policies to compare (comma separated).
    #[arg(long, value_delimiter = ',', value_parser = GcPolicy::parse)]
    pub gc: Vec<GcPolicy>,
    /// Fraction of operations that are trims (0..0.5).
    #[arg(long, default_value_t = 0.0)]
    pub trim: f64,
    /// Warm-up writes, in multiples of the logical size (after the linear fill).
    #[arg(long, default_value_t = 2.0)]
    pub warmup: f64,
    /// Measured writes, in multiples of the logical size.
    #[arg(long, default_value_t = 2.0)]
    pub measure: f64,
    /// Media under the engine: memory (headers only) or flash-sim.
    #[arg(long, default_value = "memory", value_parser = MediaKind::parse)]
    pub media: MediaKind,
    /// Seed of the workload generator (same seed, same run).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write an SVG chart of WA against over-provisioning.
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// Print the results as JSON on stdout.
    #[arg(long)]
    pub json: bool,
    /// Replace an existing --plot file that is not a chart sluice drew.
    #[arg(long)]
    pub force: bool,
}

#[derive(serde::Serialize, Clone)]
struct Point {
    workload: String,
    gc_policy: &'static str,
    overprovision_pct: f64,
    effective_spare: f64,
    analytic_greedy_uniform: Option<f64>,
    /// Time-averaged spare among closed+open segments (reserve and pending excluded).
    spare_seen_by_gc: Option<f64>,
    analytic_at_spare_seen: Option<f64>,
    measured: Measure,
    seconds: f64,
    writes_4k_per_sec: f64,
    flash_device_wa: Option<f64>,
}

pub fn run(a: Args) -> anyhow::Result<i32> {
    if let Some(p) = &a.plot {
        plot_output(a.force).check(p)?;
    }
    if a.size < 64 << 20 || !a.size.is_multiple_of(4096) {
        bail!("--size must be a multiple of 4K, at least 64M");
    }
    if a.sweep.iter().any(|&p| !(3.0..=80.0).contains(&p)) {
        bail!("--sweep values must be within 3..80 percent");
    }
    if !(0.0..=0.5).contains(&a.trim) {
        bail!("--trim must be within 0..0.5");
    }
    if !(a.warmup >= 0.0 && a.measure > 0.0 && a.warmup + a.measure <= 50.0) {
        bail!("--warmup >= 0, --measure > 0, and together at most 50");
    }
    let policies = if a.gc.is_empty() {
        vec![sluice::gc::DEFAULT_POLICY]
    } else {
        a.gc.clone()
    };
    let blocks = a.size / 4096;
    let mut points = Vec::new();
    for &policy in &policies {
        for &op in &a.sweep {
            let setup = Setup {
                logical_blocks: blocks,
                overprovision: op / 100.0,
                segment_bytes: a.segment_size,
                policy,
                media: a.media,
                flash_pages_per_block: 256,
                flash_op: 0.07,
            };
            let (vol, flash) = drive::build(&setup)?;
            let geo = vol.geometry();
            let spare = drive::effective_spare(&geo);
            let mut d = drive::Driver::new(&vol);
            let pb = if a.json {
                ProgressBar::hidden()
            } else {
                ProgressBar::new(blocks)
            };
            pb.set_message(format!("{} {} {op}%", a.workload.name(), policy.name()));
            d.fill(|_| {})?;
            let mut g = Gen::new(&a.workload, blocks, a.trim, a.seed);
            let warm = (a.warmup * blocks as f64) as u64;
            let meas = (a.measure * blocks as f64) as u64;
            pb.set_length(warm + meas);
            // Spare as the cleaner sees it: segments neither free nor pending
            // (closed + open) hold all data; sampled during the measured window.
            let mut seen = (0.0f64, 0u64, false);
            let seg_data = geo.segment_blocks as f64 * 255.0 / 256.0;
            let mut step =
                |d: &mut drive::Driver, target: u64, sample: bool| -> anyhow::Result<()> {
                    let start = d.host_write_bytes / 4096;
                    while d.host_write_bytes / 4096 - start < target {
                        match g.next_op() {
                            SimOp::Write(l, n) => d.write_blocks(l, n)?,
                            SimOp::Trim(l, n) => d.trim_blocks(l, n)?,
                        }
                        let w = d.host_write_bytes / 4096;
                        if w.is_multiple_of(65536) {
                            pb.set_position(w - blocks);
                        }
                        if sample && w.is_multiple_of(1024) {
                            let st = d.vol.stats();
                            let used = (st.segments_closed + st.segments_open) as f64 * seg_data;
                            seen.0 += 1.0 - st.live_data_blocks as f64 / used;
                            seen.1 += 1;
                        }
                    }
                    Ok(())
                };
            step(&mut d, warm, false)?;
            let s0 = vol.stats();
            let f0 = flash.as_ref().map(|f| f.counters());
            let t0 = Instant::now();
            step(&mut d, meas, true)?;
            seen.2 = seen.1 > 0;
            vol.flush()?;
            let secs = t0.elapsed().as_secs_f64();
            pb.finish_and_clear();
            let m = Measure::between(&s0, &vol.stats());
            let spare_seen = seen.2.then(|| seen.0 / seen.1 as f64);
            let fwa = match (&flash, f0) {
                (Some(f), Some(f0)) => {
                    let c = f.counters();
                    Some(
                        (c.nand_programs - f0.nand_programs) as f64
                            / (c.host_pages - f0.host_pages).max(1) as f64,
                    )
                }
                _ => None,
            };
            let p = Point {
                workload: a.workload.name(),
                gc_policy: policy.name(),
                overprovision_pct: op,
                effective_spare: spare,
                analytic_greedy_uniform: greedy_wa_analytic(spare),
                spare_seen_by_gc: spare_seen,
                analytic_at_spare_seen: spare_seen.and_then(greedy_wa_analytic),
                measured: m,
                seconds: secs,
                writes_4k_per_sec: m.host_bytes as f64 / 4096.0 / secs.max(1e-9),
                flash_device_wa: fwa,
            };
            if !a.json {
                println!(
                    "{:<16} {:<13} OP {:>5.1}%  spare_eff {:>6.2}%  WA {:>7.4}  data WA {:>7.4}  analytic(greedy,uniform) {:>7.4}  spare_seen {:>6.2}% -> analytic {:>7.4}{}  [{:.1}s, {:.2}M writes/s]",
                    p.workload,
                    p.gc_policy,
                    op,
                    spare * 100.0,
                    m.wa,
                    m.wa_data,
                    p.analytic_greedy_uniform.unwrap_or(f64::NAN),
                    p.spare_seen_by_gc.unwrap_or(f64::NAN) * 100.0,
                    p.analytic_at_spare_seen.unwrap_or(f64::NAN),
                    fwa.map(|w| format!("  flash WA {w:.4}")).unwrap_or_default(),
                    secs,
                    p.writes_4k_per_sec / 1e6
                );
            }
            points.push(p);
        }
    }
    if let Some(path) = &a.plot {
        plot(path, &points, a.force)?;
        if !a.json {
            println!("chart written to {}", path.display());
        }
    }
    if a.json {
        println!("{}", serde_json::to_string_pretty(&points)?);
    }
    Ok(0)
}

/// WA against the effective spare (over-provisioning plus the GC reserve and the
/// open segments' slack, `drive::effective_spare`), the x of Desnoyers' curve:
/// measured points and the analytic curve share one axis, each point labelled with
/// the nominal `--overprovision` it was created with.
fn plot(path: &std::path::Path, pts: &[Point], force: bool) -> anyhow::Result<()> {
    let mut svg = String::new();
    draw(&mut svg, pts)?;
    plot_output(force)
        .write(path, outfile::mark_chart(&svg).as_bytes())
        .with_context(|| format!("writing {}", path.display()))
}

/// `--plot`: replaces a chart sluice drew; any other file only with --force
/// (media::outfile).
fn plot_output(force: bool) -> Output<'static> {
    Output {
        flag: "--plot",
        force: Some(force),
        ours: outfile::is_sluice_chart,
        volumes: &[],
    }
}

fn draw(svg: &mut String, pts: &[Point]) -> anyhow::Result<()> {
    use plotters::prelude::*;
    let e = |e: &dyn std::fmt::Display| anyhow::anyhow!("plot: {e}");
    let root = SVGBackend::with_string(svg, (900, 560)).into_drawing_area();
    root.fill(&WHITE).map_err(|x| e(&x))?;
    let x_of = |p: &Point| p.effective_spare * 100.0;
    let xmax = pts.iter().map(x_of).fold(10.0, f64::max) * 1.08;
    let ymax = pts
        .iter()
        .map(|p| p.measured.wa.max(p.analytic_greedy_uniform.unwrap_or(0.0)))
        .fold(1.5, f64::max)
        .min(30.0)
        * 1.1;
    let mut ch = ChartBuilder::on(&root)
        .caption("Write amplification vs effective spare", ("sans-serif", 20))
        .margin(12)
        .x_label_area_size(45)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..xmax, 0.0..ymax)
        .map_err(|x| e(&x))?;
    ch.configure_mesh()
        .x_desc(
            "effective spare % (over-provisioning + GC reserve; labels: nominal --overprovision)",
        )
        .y_desc("WA")
        .max_light_lines(0)
        .bold_line_style(RGBColor(225, 225, 225))
        .draw()
        .map_err(|x| e(&x))?;
    let analytic: Vec<(f64, f64)> = (10..=int(xmax * 10.0))
        .filter_map(|i| {
            let op = i as f64 / 10.0;
            greedy_wa_analytic(op / 100.0)
                .filter(|a| *a <= ymax)
                .map(|a| (op, a))
        })
        .collect();
    ch.draw_series(LineSeries::new(analytic, BLACK.stroke_width(1)))
        .map_err(|x| e(&x))?
        .label("analytic greedy, uniform (Desnoyers)")
        .legend(|(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], BLACK));
    let colors = [
        RGBColor(0, 114, 178),
        RGBColor(230, 159, 0),
        RGBColor(0, 158, 115),
        RGBColor(204, 121, 167),
        RGBColor(213, 94, 0),
    ];
    let mut keys: Vec<(String, &str)> = pts
        .iter()
        .map(|p| (p.workload.clone(), p.gc_policy))
        .collect();
    keys.dedup();
    for (i, k) in keys.iter().enumerate() {
        let c = colors[i % colors.len()];
        let mine: Vec<&Point> = pts
            .iter()
            .filter(|p| p.workload == k.0 && p.gc_policy == k.1)
            .collect();
        let series: Vec<(f64, f64)> = mine.iter().map(|p| (x_of(p), p.measured.wa)).collect();
        ch.draw_series(LineSeries::new(series.clone(), c.stroke_width(2)))
            .map_err(|x| e(&x))?
            .label(format!("measured: {} {}", k.0, k.1))
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        let marker = i % 3;
        ch.draw_series(series.iter().map(|&p| {
            EmptyElement::at(p)
                + match marker {
                    0 => Circle::new((0, 0), 5, c.filled()).into_dyn(),
                    1 => TriangleMarker::new((0, 0), 6, c.filled()).into_dyn(),
                    _ => Rectangle::new([(-5, -5), (5, 5)], c.filled()).into_dyn(),
                }
        }))
        .map_err(|x| e(&x))?;
        ch.draw_series(mine.iter().map(|p| {
            EmptyElement::at((x_of(p), p.measured.wa))
                + Text::new(
                    format!("OP {:.0}%", p.overprovision_pct),
                    (8, -18),
                    ("sans-serif", 13).into_font().color(&c),
                )
        }))
        .map_err(|x| e(&x))?;
    }
    // upper right, where WA curves (falling with spare) leave room
    ch.configure_series_labels()
        .position(SeriesLabelPosition::UpperRight)
        .border_style(BLACK)
        .background_style(WHITE)
        .draw()
        .map_err(|x| e(&x))?;
    root.present().map_err(|x| e(&x))?;
    Ok(())
}

fn int(x: f64) -> i64 {
    x as i64
}
