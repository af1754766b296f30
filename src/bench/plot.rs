//! SVG charts of bench results (plotters, SVG backend only): IOPS over time for
//! steady, MB/s by block size for grid, latency by size for slog, IOPS per phase
//! for mix / ceiling / fill, and, when the report carries it (in-process sluice
//! targets), the access pattern front (host requests) and back (media writes):
//! sequential share, seek-distance and request-size histograms.
//!
//! Layout rules, so a chart reads at a glance: one panel per question (grid: one
//! per request type and thread count, the targets compared inside it); a series
//! keeps its colour and marker in every panel; colours and markers are distinct
//! (up to 8 series, then markers still differ); the legend is a strip above the
//! panels, never over the data.
//!
//! Invariant: plotting reads a `Report` only; a report with nothing measured still
//! produces a valid (empty) chart rather than an error.

use super::{Report, Workload};
use crate::metrics::pattern::PatternSnapshot;
use anyhow::{anyhow, Result};
use plotters::coord::Shift;
use plotters::prelude::*;

/// A series: its key (colour and marker follow the key) and points.
type Line = (usize, Vec<(f64, f64)>);

/// Colour-blind-safe palette (Okabe-Ito) plus black: 8 distinct colours.
const COLORS: [RGBColor; 8] = [
    RGBColor(0, 114, 178),
    RGBColor(230, 159, 0),
    RGBColor(0, 158, 115),
    RGBColor(204, 121, 167),
    RGBColor(86, 180, 233),
    RGBColor(213, 94, 0),
    RGBColor(0, 0, 0),
    RGBColor(240, 228, 66),
];
const MARKERS: usize = 5;

/// One chart: the question it answers and its series.
struct Panel {
    title: String,
    xd: String,
    yd: String,
    xlog: bool,
    ylog: bool,
    lines: Vec<Line>,
    /// Tick labels for a categorical x axis (index -> name).
    xcats: Vec<String>,
}

impl Panel {
    fn new(title: String, xd: &str, yd: &str, xlog: bool, ylog: bool) -> Panel {
        Panel {
            title,
            xd: xd.into(),
            yd: yd.into(),
            xlog,
            ylog,
            lines: vec![],
            xcats: vec![],
        }
    }
}

/// A figure: a title, the legend's entries (key order), panels in rows.
struct Figure {
    title: String,
    legend: Vec<String>,
    rows: Vec<Vec<Panel>>,
}

fn phase_panels(r: &Report) -> Figure {
    let legend: Vec<String> = r.targets.iter().map(|t| t.target.clone()).collect();
    let mut rows = vec![];
    match r.workload {
        Workload::Steady => {
            let mut p = Panel::new(
                "Sustained 4 KiB random write: IOPS over time".into(),
                "seconds",
                "IOPS",
                false,
                false,
            );
            for (i, t) in r.targets.iter().enumerate() {
                for ph in t.phases.iter().filter(|p| p.name == "steady") {
                    // a partial last interval would draw a false drop
                    p.lines.push((
                        i,
                        ph.samples
                            .iter()
                            .filter(|s| !s.partial)
                            .map(|s| (s.t_s, s.iops))
                            .collect(),
                    ));
                }
            }
            rows.push(vec![p]);
        }
        Workload::Grid => {
            let mut threads: Vec<usize> = r
                .targets
                .iter()
                .flat_map(|t| t.phases.iter().map(|p| p.threads))
                .collect();
            threads.sort();
            threads.dedup();
            for (name, what) in [("randread", "random read"), ("randwrite", "random write")] {
                let mut row = vec![];
                for &th in &threads {
                    let mut p = Panel::new(
                        format!("{what}, {th} thread{}", if th == 1 { "" } else { "s" }),
                        "block size (KiB, log)",
                        "MiB/s (log)",
                        true,
                        true,
                    );
                    for (i, t) in r.targets.iter().enumerate() {
                        let pts: Vec<(f64, f64)> = t
                            .phases
                            .iter()
                            .filter(|p| p.name == name && p.threads == th && p.measured())
                            .map(|p| (p.block_bytes as f64 / 1024.0, p.mib_s.max(0.01)))
                            .collect();
                        if !pts.is_empty() {
                            p.lines.push((i, pts));
                        }
                    }
                    row.push(p);
                }
                if !row.is_empty() {
                    rows.push(row);
                }
            }
        }
        Workload::Slog => {
            let mut p = Panel::new(
                "Synchronous write + flush latency by size".into(),
                "write size (KiB, log)",
                "usec per IO (log)",
                true,
                true,
            );
            for (i, t) in r.targets.iter().enumerate() {
                let pts = t
                    .phases
                    .iter()
                    .filter(|p| p.measured())
                    .map(|p| {
                        (
                            p.block_bytes as f64 / 1024.0,
                            p.seconds * 1e6 / p.ops.max(1) as f64,
                        )
                    })
                    .collect();
                p.lines.push((i, pts));
            }
            rows.push(vec![p]);
        }
        Workload::Mix | Workload::Ceiling | Workload::Fill | Workload::Durable => {
            let mut p = Panel::new(
                format!("{} workload: IOPS per phase", r.workload.name()),
                "phase",
                "IOPS",
                false,
                false,
            );
            p.xcats = r
                .targets
                .first()
                .map(|t| {
                    t.phases
                        .iter()
                        .map(|p| match r.workload {
                            // one phase per thread count
                            Workload::Durable => format!("{} x{}", p.name, p.threads),
                            _ => p.name.clone(),
                        })
                        .collect()
                })
                .unwrap_or_default();
            for (i, t) in r.targets.iter().enumerate() {
                let pts = t
                    .phases
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.measured())
                    .map(|(k, p)| (k as f64, p.iops))
                    .collect();
                p.lines.push((i, pts));
            }
            rows.push(vec![p]);
        }
    }
    Figure {
        title: format!("sluice bench {}", r.workload.name()),
        legend,
        rows,
    }
}

/// Share of requests per histogram bucket, as (bucket upper bound in KiB, %).
fn hist_share(h: &[(u64, u64)]) -> Vec<(f64, f64)> {
    let total: u64 = h.iter().map(|x| x.1).sum();
    h.iter()
        .filter(|x| x.1 > 0)
        .map(|&(ub, n)| {
            (
                (ub as f64 + 1.0) / 1024.0,
                100.0 * n as f64 / total.max(1) as f64,
            )
        })
        .collect()
}

/// The access-pattern figure: host (front) and media (back) of every target that
/// has one. None when no target carries an access pattern.
fn pattern_figure(r: &Report) -> Option<Figure> {
    let runs: Vec<(&str, &PatternSnapshot, &PatternSnapshot)> = r
        .targets
        .iter()
        .filter_map(|t| {
            t.access_pattern
                .as_ref()
                .map(|a| (t.target.as_str(), &a.host, &a.media))
        })
        .collect();
    if runs.is_empty() {
        return None;
    }
    let mut legend = vec![];
    let mut share = Panel::new(
        "Sequential share of requests".into(),
        "",
        "% sequential",
        false,
        false,
    );
    share.xcats = vec!["host (front)".into(), "media (back)".into()];
    let mut seek = Panel::new(
        "Seek distance of random requests".into(),
        "distance (KiB, log, bucket upper bound)",
        "% of random requests",
        true,
        false,
    );
    let mut size = Panel::new(
        "Request size".into(),
        "size (KiB, log, bucket upper bound)",
        "% of requests",
        true,
        false,
    );
    for (name, host, media) in runs {
        for (side, s) in [("host", host), ("media", media)] {
            let k = legend.len();
            legend.push(format!("{name} {side}"));
            let x = if side == "host" { 0.0 } else { 1.0 };
            share.lines.push((k, vec![(x, 100.0 * s.sequential_share)]));
            seek.lines.push((k, hist_share(&s.seek_bytes)));
            size.lines.push((k, hist_share(&s.size_bytes)));
        }
    }
    Some(Figure {
        title: "Access pattern: random in front, sequential behind".into(),
        legend,
        rows: vec![vec![share, seek, size]],
    })
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

type Area<'a> = DrawingArea<SVGBackend<'a>, Shift>;

fn err(e: impl std::fmt::Display) -> anyhow::Error {
    anyhow!("drawing the chart: {e}")
}

/// Draw marker number `m` of colour `c` at pixel `at` (the legend).
fn draw_marker(area: &Area, m: usize, at: (i32, i32), c: RGBColor) -> Result<()> {
    let (x, y) = at;
    let s = 5;
    match m % MARKERS {
        0 => area.draw(&Circle::new((x, y), s, c.filled())),
        1 => area.draw(&TriangleMarker::new((x, y), s + 1, c.filled())),
        2 => area.draw(&Rectangle::new(
            [(x - s, y - s), (x + s, y + s)],
            c.filled(),
        )),
        3 => area.draw(&Cross::new((x, y), s, c.stroke_width(2))),
        _ => area.draw(&Circle::new((x, y), s, c.stroke_width(2))),
    }
    .map_err(err)
}

fn style(k: usize) -> (RGBColor, usize) {
    (COLORS[k % COLORS.len()], k % MARKERS)
}

/// The legend strip: one entry per key, colour line and marker, wrapped in rows.
fn draw_legend(area: &Area, names: &[String]) -> Result<()> {
    let (w, _) = area.dim_in_pixel();
    let (mut x, mut y) = (20i32, 14i32);
    for (k, name) in names.iter().enumerate() {
        let width = 50 + 8 * name.chars().count() as i32;
        if x + width > w as i32 - 10 && x > 20 {
            x = 20;
            y += 24;
        }
        let (c, m) = style(k);
        area.draw(&PathElement::new(
            vec![(x, y), (x + 30, y)],
            c.stroke_width(2),
        ))
        .map_err(err)?;
        draw_marker(area, m, (x + 15, y), c)?;
        area.draw(&Text::new(
            name.clone(),
            (x + 38, y - 8),
            ("sans-serif", 15),
        ))
        .map_err(err)?;
        x += width;
    }
    Ok(())
}

/// Rows of legend entries `names` needs in a strip `w` pixels wide.
fn legend_rows(names: &[String], w: u32) -> u32 {
    let mut rows = 1;
    let mut x = 20i32;
    for name in names {
        let width = 50 + 8 * name.chars().count() as i32;
        if x + width > w as i32 - 10 && x > 20 {
            rows += 1;
            x = 20;
        }
        x += width;
    }
    rows
}

fn draw_panel(area: &Area, p: &Panel) -> Result<()> {
    let xr = range(p.lines.iter().flat_map(|l| l.1.iter().map(|q| q.0)), p.xlog);
    let mut yr = range(p.lines.iter().flat_map(|l| l.1.iter().map(|q| q.1)), p.ylog);
    let xr = if p.xcats.is_empty() {
        xr
    } else {
        (-0.5, p.xcats.len() as f64 - 0.5)
    };
    if p.yd.starts_with('%') {
        yr = (0.0, 105.0);
    }
    let mut b = ChartBuilder::on(area);
    b.caption(&p.title, ("sans-serif", 18))
        .margin(12)
        .x_label_area_size(42)
        .y_label_area_size(62);
    macro_rules! body {
        ($chart:expr) => {{
            let mut chart = $chart;
            let cats = p.xcats.clone();
            let mut mesh = chart.configure_mesh();
            mesh.x_desc(p.xd.as_str())
                .y_desc(p.yd.as_str())
                .max_light_lines(0)
                .bold_line_style(RGBColor(225, 225, 225))
                .x_labels(8)
                .y_labels(8)
                .y_label_formatter(&|v: &f64| num(*v));
            let fmt = move |v: &f64| {
                let i = v.round();
                if (v - i).abs() < 1e-6 && i >= 0.0 && (i as usize) < cats.len() {
                    cats[i as usize].clone()
                } else if cats.is_empty() {
                    num(*v)
                } else {
                    String::new()
                }
            };
            if !p.xcats.is_empty() {
                mesh.x_labels(p.xcats.len() * 2 + 1);
            }
            mesh.x_label_formatter(&fmt);
            mesh.draw().map_err(err)?;
            // categorical x: series sharing a category stand side by side in it
            let at_cat = |c: f64| {
                p.lines
                    .iter()
                    .filter(|l| l.1.iter().any(|q| q.0 == c))
                    .count()
            };
            let mut seen = std::collections::HashMap::new();
            let n = p.lines.len().max(1) as f64;
            for (k, pts) in p.lines.iter() {
                let (c, m) = style(*k);
                let pts: Vec<(f64, f64)> = pts
                    .iter()
                    .map(|&(x, y)| {
                        if p.xcats.is_empty() {
                            return (x, y);
                        }
                        let here = at_cat(x) as f64;
                        let j = seen.entry(x as i64).or_insert(0.0);
                        let dx = (*j - (here - 1.0) / 2.0) * 0.6 / here;
                        *j += 1.0;
                        (x + dx, y)
                    })
                    .collect();
                if p.xcats.is_empty() && pts.len() > 1 {
                    chart
                        .draw_series(LineSeries::new(pts.iter().cloned(), c.stroke_width(2)))
                        .map_err(err)?;
                }
                if !p.xcats.is_empty() {
                    // a bar from 0 for categorical values
                    chart
                        .draw_series(pts.iter().map(|&(x, y)| {
                            Rectangle::new([(x - 0.25 / n, 0.0), (x + 0.25 / n, y)], c.filled())
                        }))
                        .map_err(err)?;
                }
                chart
                    .draw_series(pts.iter().map(|&q| {
                        EmptyElement::at(q)
                            + match m % MARKERS {
                                0 => Circle::new((0, 0), 5, c.filled()).into_dyn(),
                                1 => TriangleMarker::new((0, 0), 6, c.filled()).into_dyn(),
                                2 => Rectangle::new([(-5, -5), (5, 5)], c.filled()).into_dyn(),
                                3 => Cross::new((0, 0), 5, c.stroke_width(2)).into_dyn(),
                                _ => Circle::new((0, 0), 5, c.stroke_width(2)).into_dyn(),
                            }
                    }))
                    .map_err(err)?;
            }
        }};
    }
    match (p.xlog, p.ylog) {
        (true, true) => body!(b
            .build_cartesian_2d((xr.0..xr.1).log_scale(), (yr.0..yr.1).log_scale())
            .map_err(err)?),
        (true, false) => body!(b
            .build_cartesian_2d((xr.0..xr.1).log_scale(), yr.0..yr.1)
            .map_err(err)?),
        (false, true) => body!(b
            .build_cartesian_2d(xr.0..xr.1, (yr.0..yr.1).log_scale())
            .map_err(err)?),
        (false, false) => body!(b.build_cartesian_2d(xr.0..xr.1, yr.0..yr.1).map_err(err)?),
    }
    Ok(())
}

/// An axis value without noise: 4, 128, 1.5, 0.25, 12000.
fn num(v: f64) -> String {
    if v == 0.0 {
        "0".into()
    } else if v.abs() >= 10.0 || v == v.trunc() {
        format!("{v:.0}")
    } else if v.abs() >= 1.0 {
        format!("{v:.1}")
    } else {
        format!("{v:.2}")
    }
}

const WIDTH: u32 = 1200;
const PANEL_H: u32 = 380;

fn figure_height(f: &Figure) -> u32 {
    40 + 24 * legend_rows(&f.legend, WIDTH) + 10 + PANEL_H * f.rows.len().max(1) as u32
}

fn draw_figure(area: &Area, f: &Figure) -> Result<()> {
    let (title, rest) = area.split_vertically(40);
    title
        .draw(&Text::new(f.title.clone(), (20, 10), ("sans-serif", 22)))
        .map_err(err)?;
    let (legend, panels) = rest.split_vertically(24 * legend_rows(&f.legend, WIDTH) + 10);
    draw_legend(&legend, &f.legend)?;
    let rows = panels.split_evenly((f.rows.len().max(1), 1));
    for (row, area) in f.rows.iter().zip(rows.iter()) {
        let cells = area.split_evenly((1, row.len().max(1)));
        for (p, a) in row.iter().zip(cells.iter()) {
            draw_panel(a, p)?;
        }
    }
    Ok(())
}

/// Render `r` as SVG into a string: the workload's panels, then the access
/// pattern when the report has one.
pub fn svg(r: &Report) -> Result<String> {
    let mut figs = vec![phase_panels(r)];
    figs.extend(pattern_figure(r));
    let heights: Vec<u32> = figs.iter().map(figure_height).collect();
    let total: u32 = heights.iter().sum();
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, (WIDTH, total)).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut rest = root.clone();
        for (f, h) in figs.iter().zip(&heights) {
            let (this, next) = rest.split_vertically(*h);
            draw_figure(&this, f)?;
            rest = next;
        }
        root.present().map_err(err)?;
    }
    Ok(out)
}
