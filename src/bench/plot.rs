//! SVG charts of bench results (plotters, SVG backend only): IOPS over time for
//! steady, MB/s by block size for grid, latency by size for slog, and IOPS per phase
//! for mix / ceiling / fill.
//!
//! Invariant: plotting reads a `Report` only; a report with nothing measured still
//! produces a valid (empty) chart rather than an error.

use super::{Report, Workload};
use anyhow::{anyhow, bail, Result};
use plotters::prelude::*;
use std::path::Path;

type Line = (String, Vec<(f64, f64)>);

const COLORS: [RGBColor; 8] = [
    RGBColor(31, 119, 180),
    RGBColor(255, 127, 14),
    RGBColor(44, 160, 44),
    RGBColor(214, 39, 40),
    RGBColor(148, 103, 189),
    RGBColor(140, 86, 75),
    RGBColor(227, 119, 194),
    RGBColor(127, 127, 127),
];

fn lines_for(r: &Report) -> (String, String, String, bool, bool, Vec<Line>) {
    let mut lines: Vec<Line> = vec![];
    match r.workload {
        Workload::Steady => {
            for t in &r.targets {
                for p in t.phases.iter().filter(|p| p.name == "steady") {
                    lines.push((
                        t.target.clone(),
                        p.samples.iter().map(|s| (s.t_s, s.iops)).collect(),
                    ));
                }
            }
            (
                "Sustained 4 KiB random write".into(),
                "seconds".into(),
                "IOPS".into(),
                false,
                false,
                lines,
            )
        }
        Workload::Grid => {
            for t in &r.targets {
                let mut threads: Vec<usize> = t.phases.iter().map(|p| p.threads).collect();
                threads.sort();
                threads.dedup();
                for name in ["randread", "randwrite"] {
                    for &th in &threads {
                        let pts: Vec<(f64, f64)> = t
                            .phases
                            .iter()
                            .filter(|p| p.name == name && p.threads == th && p.measured())
                            .map(|p| (p.block_bytes as f64 / 1024.0, p.mib_s.max(0.01)))
                            .collect();
                        if !pts.is_empty() {
                            lines.push((format!("{} {name} x{th}", t.target), pts));
                        }
                    }
                }
            }
            (
                "Random read / write by block size".into(),
                "block size (KiB, log)".into(),
                "MiB/s (log)".into(),
                true,
                true,
                lines,
            )
        }
        Workload::Slog => {
            for t in &r.targets {
                let pts = t
                    .phases
                    .iter()
                    .filter(|p| p.measured())
                    .map(|p| {
                        (
                            p.block_bytes as f64 / 1024.0,
                            p.seconds * 1e6 / p.ops as f64,
                        )
                    })
                    .collect();
                lines.push((t.target.clone(), pts));
            }
            (
                "Synchronous write + flush latency by size".into(),
                "write size (KiB, log)".into(),
                "usec per IO (log)".into(),
                true,
                true,
                lines,
            )
        }
        Workload::Mix | Workload::Ceiling | Workload::Fill => {
            for t in &r.targets {
                let pts = t
                    .phases
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.measured())
                    .map(|(i, p)| (i as f64, p.iops))
                    .collect();
                lines.push((t.target.clone(), pts));
            }
            let names: Vec<String> = r
                .targets
                .first()
                .map(|t| {
                    t.phases
                        .iter()
                        .enumerate()
                        .map(|(i, p)| format!("{i}={}", p.name))
                        .collect()
                })
                .unwrap_or_default();
            (
                format!("{} workload, IOPS per phase", r.workload.name()),
                format!("phase ({})", names.join(", ")),
                "IOPS".into(),
                false,
                false,
                lines,
            )
        }
    }
}

fn range(vals: impl Iterator<Item = f64>, log: bool) -> (f64, f64) {
    let (mut lo, mut hi) = (f64::MAX, f64::MIN);
    for v in vals {
        lo = lo.min(v);
        hi = hi.max(v);
    }
    if lo > hi {
        return if log { (1.0, 10.0) } else { (0.0, 1.0) };
    }
    if log {
        let lo = lo.max(1e-3);
        (lo / 1.5, (hi * 1.5).max(lo * 2.0))
    } else {
        (0.0_f64.min(lo), if hi > 0.0 { hi * 1.1 } else { 1.0 })
    }
}

fn draw<X, Y>(
    root: &DrawingArea<SVGBackend, plotters::coord::Shift>,
    title: &str,
    xd: &str,
    yd: &str,
    xr: X,
    yr: Y,
    lines: &[Line],
) -> Result<()>
where
    X: plotters::coord::ranged1d::AsRangedCoord<Value = f64>,
    Y: plotters::coord::ranged1d::AsRangedCoord<Value = f64>,
    X::CoordDescType: plotters::coord::ranged1d::ValueFormatter<f64>,
    Y::CoordDescType: plotters::coord::ranged1d::ValueFormatter<f64>,
{
    let e = |e: &dyn std::fmt::Display| anyhow!("drawing the chart: {e}");
    let mut chart = ChartBuilder::on(root)
        .caption(title, ("sans-serif", 22))
        .margin(15)
        .x_label_area_size(45)
        .y_label_area_size(70)
        .build_cartesian_2d(xr, yr)
        .map_err(|x| e(&x))?;
    chart
        .configure_mesh()
        .x_desc(xd)
        .y_desc(yd)
        .draw()
        .map_err(|x| e(&x))?;
    for (i, (name, pts)) in lines.iter().enumerate() {
        let c = COLORS[i % COLORS.len()];
        chart
            .draw_series(LineSeries::new(pts.iter().cloned(), c.stroke_width(2)))
            .map_err(|x| e(&x))?
            .label(name.clone())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2)));
        chart
            .draw_series(pts.iter().map(|&p| Circle::new(p, 3, c.filled())))
            .map_err(|x| e(&x))?;
    }
    if !lines.is_empty() {
        chart
            .configure_series_labels()
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK)
            .draw()
            .map_err(|x| e(&x))?;
    }
    Ok(())
}

/// Render `r` as SVG into a string.
pub fn svg(r: &Report) -> Result<String> {
    let (title, xd, yd, xlog, ylog, lines) = lines_for(r);
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (1100, 650)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| anyhow!("{e}"))?;
        let xr = range(lines.iter().flat_map(|l| l.1.iter().map(|p| p.0)), xlog);
        let yr = range(lines.iter().flat_map(|l| l.1.iter().map(|p| p.1)), ylog);
        match (xlog, ylog) {
            (true, true) => draw(
                &root,
                &title,
                &xd,
                &yd,
                (xr.0..xr.1).log_scale(),
                (yr.0..yr.1).log_scale(),
                &lines,
            )?,
            _ => draw(&root, &title, &xd, &yd, xr.0..xr.1, yr.0..yr.1, &lines)?,
        }
        root.present().map_err(|e| anyhow!("{e}"))?;
    }
    Ok(out)
}

/// Write the chart to `path` (SVG only).
pub fn write(r: &Report, path: &Path) -> Result<()> {
    match path.extension().and_then(|e| e.to_str()) {
        Some(e) if e.eq_ignore_ascii_case("svg") => {}
        _ => bail!(
            "--plot {}: only .svg output is supported (convert with any SVG tool for PNG)",
            path.display()
        ),
    }
    let s = svg(r)?;
    std::fs::write(path, s).map_err(|e| anyhow!("writing {}: {e}", path.display()))
}
