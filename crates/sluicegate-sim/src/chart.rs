//! The SVG chart: one panel per policy, offered and admitted requests over time, the
//! delayed ones in delay mode, and the busiest key's admitted count over the last period
//! against the limit (where a fixed window's boundary burst shows as twice the limit). A
//! concurrency policy's panel shows instead the busiest key's slots held by leases and,
//! with a request-duration model, its requests running, against the limit, and the
//! rejections per bucket.

use plotters::chart::DualCoordChartContext;
use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use sluicegate_core::{AlgorithmKind, Micros};

use crate::engine::PolicyRun;
use crate::error::SimError;
use crate::report::human;

const WIDTH: u32 = 1000;
const PANEL_HEIGHT: u32 = 300;
const TITLE_HEIGHT: u32 = 40;
const LEGEND_HEIGHT: u32 = 24;

const OFFERED: RGBColor = RGBColor(150, 150, 150);
const ADMITTED: RGBColor = RGBColor(31, 119, 180);
const DELAYED: RGBColor = RGBColor(255, 127, 14);
const IN_PERIOD: RGBColor = RGBColor(44, 160, 44);
const LIMIT: RGBColor = RGBColor(214, 39, 40);
const RUNNING: RGBColor = RGBColor(148, 103, 189);
const REJECTED: RGBColor = RGBColor(140, 86, 75);

/// Renders the runs as one SVG document.
pub fn render(title: &str, runs: &[PolicyRun]) -> Result<String, SimError> {
    let mut svg = String::new();
    let height = TITLE_HEIGHT + LEGEND_HEIGHT + PANEL_HEIGHT * runs.len().max(1) as u32;
    {
        let root = SVGBackend::with_string(&mut svg, (WIDTH, height)).into_drawing_area();
        root.fill(&WHITE).map_err(chart_error)?;
        let root = root
            .titled(title, ("sans-serif", 20))
            .map_err(chart_error)?;
        let (legend_area, panels) = root.split_vertically(LEGEND_HEIGHT);
        draw_legend(&legend_area, Shown::of(runs))?;
        let panels = panels.split_evenly((runs.len().max(1), 1));
        for (run, panel) in runs.iter().zip(panels.iter()) {
            draw_panel(panel, run)?;
        }
        root.present().map_err(chart_error)?;
    }
    Ok(svg)
}

/// Which optional lines some panel draws.
#[derive(Clone, Copy)]
struct Shown {
    delayed: bool,
    leases: bool,
    rates: bool,
    running: bool,
}

impl Shown {
    fn of(runs: &[PolicyRun]) -> Self {
        let leases = |r: &PolicyRun| r.policy.algorithm() == AlgorithmKind::Concurrency;
        Shown {
            delayed: runs.iter().any(|r| r.delayed > 0),
            leases: runs.iter().any(leases),
            rates: !runs.iter().all(leases),
            running: runs
                .iter()
                .any(|r| leases(r) && !r.series.in_flight.is_empty()),
        }
    }
}

/// One legend line for all panels, so no panel's data hides behind it.
fn draw_legend<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    shown: Shown,
) -> Result<(), SimError> {
    enum Mark {
        Fill(RGBAColor),
        Line(RGBColor),
        Dash(RGBColor),
    }
    let mut items = vec![
        (Mark::Fill(OFFERED.mix(0.5)), "offered"),
        (Mark::Fill(ADMITTED.mix(0.6)), "admitted"),
    ];
    if shown.delayed {
        items.push((Mark::Line(DELAYED), "delayed (at arrival)"));
    }
    if shown.leases {
        items.push((Mark::Line(REJECTED), "rejected"));
    }
    if shown.rates {
        let text = "admitted in the last period (right axis)";
        items.push((Mark::Line(IN_PERIOD), text));
    }
    if shown.leases {
        items.push((Mark::Line(IN_PERIOD), "slots held (right axis)"));
    }
    if shown.running {
        items.push((Mark::Line(RUNNING), "requests running (right axis)"));
    }
    items.push((Mark::Dash(LIMIT), "limit (right axis)"));
    let font = ("sans-serif", 13).into_font().color(&BLACK);
    let mut x = 70;
    let y = 10;
    for (mark, label) in items {
        match mark {
            Mark::Fill(color) => area.draw(&Rectangle::new(
                [(x, y - 5), (x + 16, y + 5)],
                color.filled(),
            )),
            Mark::Line(color) => area.draw(&PathElement::new(
                [(x, y), (x + 16, y)],
                color.stroke_width(2),
            )),
            Mark::Dash(color) => area
                .draw(&PathElement::new(
                    [(x, y), (x + 6, y)],
                    color.stroke_width(1),
                ))
                .and_then(|_| {
                    area.draw(&PathElement::new(
                        [(x + 10, y), (x + 16, y)],
                        color.stroke_width(1),
                    ))
                }),
        }
        .map_err(chart_error)?;
        area.draw(&Text::new(label, (x + 22, y - 7), font.clone()))
            .map_err(chart_error)?;
        // The SVG backend has no font metrics; about 6.5 px a character at 13 px.
        x += 22 + label.len() as i32 * 13 / 2 + 20;
    }
    Ok(())
}

/// The x axis unit for a span of µs: seconds, minutes, hours or days, so labels are short.
fn time_unit(span: Micros) -> (f64, &'static str) {
    const S: f64 = 1e6;
    match span as f64 / S {
        x if x >= 3.0 * 86_400.0 => (86_400.0 * S, "days"),
        x if x >= 3.0 * 3_600.0 => (3_600.0 * S, "hours"),
        x if x >= 180.0 => (60.0 * S, "minutes"),
        x if x >= 3.0 => (S, "seconds"),
        _ => (1_000.0, "ms"),
    }
}

fn chart_error<E: std::fmt::Display>(e: E) -> SimError {
    SimError::Chart(e.to_string())
}

/// Step-shaped points for per-bucket values: flat across each bucket.
fn steps(values: &[u64], width: f64) -> Vec<(f64, f64)> {
    let mut points = Vec::with_capacity(values.len() * 2 + 2);
    for (i, v) in values.iter().enumerate() {
        let v = *v as f64;
        points.push((i as f64 * width, v));
        points.push(((i + 1) as f64 * width, v));
    }
    points
}

/// A panel's title: the policy, its numbers, and what it did with the traffic.
fn caption(run: &PolicyRun) -> String {
    let policy = &run.policy;
    let label = crate::report::label(run);
    let name = if policy.name() == policy.algorithm().name() {
        label
    } else {
        format!("{label} ({})", policy.algorithm())
    };
    if let Some(l) = &run.leases {
        return format!(
            "{name}, {} in flight, lease {}: admitted {} of {}, most held {}, most running {}",
            policy.limit(),
            human(policy.period()),
            run.admitted,
            run.offered,
            l.peak_held,
            l.peak_running,
        );
    }
    format!(
        "{name}, {} per {}{}: admitted {} of {}, most in one period {}",
        policy.limit(),
        human(policy.period()),
        match policy.mode() {
            sluicegate_core::Mode::Reject => String::new(),
            mode => format!(", {}", mode.name()),
        },
        run.admitted,
        run.offered,
        run.peak_in_period,
    )
}

/// The right axis's top and title: slots for concurrency, cost in the last period else.
fn right_axis(run: &PolicyRun) -> (f64, String) {
    let policy = &run.policy;
    let running_top = run.series.in_flight.iter().copied().max().unwrap_or(0);
    let concurrency = run.leases.is_some();
    let top = if concurrency {
        run.peak_in_period.max(running_top)
    } else {
        run.peak_in_period
    };
    let top = (top.max(policy.limit()) as f64 * 1.25).max(1.0);
    let title = if concurrency {
        "slots held / requests running (busiest key)".to_owned()
    } else if run.settle.is_some() {
        format!("real cost admitted in the last {}", human(policy.period()))
    } else {
        format!("admitted in the last {}", human(policy.period()))
    };
    (top, title)
}

type Xy = Cartesian2d<RangedCoordf64, RangedCoordf64>;

/// A concurrency panel's own lines: rejections (left axis) and requests running (right).
fn draw_lease_lines<DB: DrawingBackend>(
    chart: &mut DualCoordChartContext<'_, DB, Xy, Xy>,
    s: &crate::engine::Series,
    width: f64,
) -> Result<(), SimError> {
    chart
        .draw_series(LineSeries::new(
            steps(&s.rejected, width),
            REJECTED.stroke_width(1),
        ))
        .map_err(chart_error)?;
    if !s.in_flight.is_empty() {
        chart
            .draw_secondary_series(LineSeries::new(
                steps(&s.in_flight, width),
                RUNNING.stroke_width(1),
            ))
            .map_err(chart_error)?;
    }
    Ok(())
}

fn draw_panel<DB: DrawingBackend>(
    area: &DrawingArea<DB, plotters::coord::Shift>,
    run: &PolicyRun,
) -> Result<(), SimError> {
    let s = &run.series;
    let policy = &run.policy;
    let (unit, unit_name) = time_unit(s.offered.len() as u64 * s.bucket);
    let width = s.bucket as f64 / unit;
    let span = s.offered.len() as f64 * width;
    let top = s.offered.iter().chain(&s.admitted).copied().max();
    let top = top.unwrap_or(1).max(1) as f64 * 1.15;
    let (top2, right) = right_axis(run);
    let mut chart = ChartBuilder::on(area)
        .caption(caption(run), ("sans-serif", 15))
        .margin(8)
        .x_label_area_size(32)
        .y_label_area_size(56)
        .right_y_label_area_size(56)
        .build_cartesian_2d(0.0..span, 0.0..top)
        .map_err(chart_error)?
        .set_secondary_coord(0.0..span, 0.0..top2);
    chart
        .configure_mesh()
        .disable_x_mesh()
        .light_line_style(TRANSPARENT)
        .x_labels(12)
        .y_desc(format!("requests per {}", human(s.bucket)))
        .x_desc(format!("time since start ({unit_name})"))
        .axis_desc_style(("sans-serif", 13))
        .draw()
        .map_err(chart_error)?;
    chart
        .configure_secondary_axes()
        .y_desc(right)
        .axis_desc_style(("sans-serif", 13))
        .draw()
        .map_err(chart_error)?;

    chart
        .draw_series(
            AreaSeries::new(steps(&s.offered, width), 0.0, OFFERED.mix(0.5))
                .border_style(OFFERED.mix(0.9)),
        )
        .map_err(chart_error)?;
    chart
        .draw_series(
            AreaSeries::new(steps(&s.admitted, width), 0.0, ADMITTED.mix(0.45))
                .border_style(ADMITTED),
        )
        .map_err(chart_error)?;
    if run.delayed > 0 {
        chart
            .draw_series(LineSeries::new(
                steps(&s.delayed, width),
                DELAYED.stroke_width(2),
            ))
            .map_err(chart_error)?;
    }
    if run.leases.is_some() {
        draw_lease_lines(&mut chart, s, width)?;
    }
    chart
        .draw_secondary_series(LineSeries::new(
            steps(&s.in_period, width),
            IN_PERIOD.stroke_width(2),
        ))
        .map_err(chart_error)?;
    let limit = policy.limit() as f64;
    chart
        .draw_secondary_series(DashedLineSeries::new(
            [(0.0, limit), (span, limit)],
            6,
            4,
            LIMIT.stroke_width(1),
        ))
        .map_err(chart_error)?;
    Ok(())
}
