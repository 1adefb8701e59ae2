//! Pools on the virtual clock: closed-loop clients through `sluicegate-throttle`'s real
//! [`Scheduler`] to a modelled upstream, to show `concurrency = "adaptive"` at work.
//!
//! The upstream's latency is a base that changes by phase, stretched when more requests
//! are in it than it can work on at once (`capacity`): `latency = base × max(1, in_flight /
//! capacity)`, fixed when a request starts. Each client sends its next request as soon as
//! the previous one answers. The scheduler decides; this module only moves the clock.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use plotters::coord::types::RangedCoordf64;
use plotters::prelude::*;
use sluicegate_core::Micros;
use sluicegate_throttle::{Arrival, PoolSpec, Scheduler};

use crate::error::SimError;

/// An adaptive pool in front of an upstream whose latency changes in phases.
#[derive(Debug, Clone)]
pub struct AdaptiveScenario {
    /// Clients, each with one request outstanding.
    pub clients: usize,
    /// `min_concurrency`.
    pub min: u32,
    /// `max_concurrency`.
    pub max: u32,
    /// Requests the upstream works on at once before latency stretches.
    pub capacity: u32,
    /// `(until, base latency)`, in order; the last phase lasts until its `until`.
    pub phases: Vec<(Micros, Micros)>,
    /// Width of one chart bucket.
    pub bucket: Micros,
}

/// What happened, per bucket.
#[derive(Debug, Clone, Default)]
pub struct AdaptiveRun {
    /// Bucket width.
    pub bucket: Micros,
    /// The pool's limit at the end of each bucket.
    pub limit: Vec<u32>,
    /// Mean requests in the upstream.
    pub in_flight: Vec<f64>,
    /// Mean round-trip time of responses ending in the bucket (ms; 0 when none).
    pub rtt_ms: Vec<f64>,
    /// The upstream's base latency (ms).
    pub base_ms: Vec<f64>,
    /// `(min, max)`.
    pub bounds: (u32, u32),
}

impl AdaptiveScenario {
    fn base_at(&self, t: Micros) -> Micros {
        self.phases
            .iter()
            .find(|(until, _)| t < *until)
            .or(self.phases.last())
            .map_or(1, |(_, base)| *base)
    }
    fn end(&self) -> Micros {
        self.phases.last().map_or(0, |(until, _)| *until)
    }
}

/// Runs the scenario.
pub fn run_adaptive(s: &AdaptiveScenario) -> Result<AdaptiveRun, SimError> {
    let spec = PoolSpec::adaptive("sim", s.min, s.max)
        .queue(s.clients)
        .max_wait_micros(sluicegate_throttle::spec::MAX_WAIT)
        .validate()
        .map_err(|e| SimError::Usage(e.to_string()))?;
    let mut pool = Scheduler::new(&spec);
    let buckets = (s.end() / s.bucket.max(1)) as usize;
    let mut run = AdaptiveRun {
        bucket: s.bucket,
        limit: vec![0; buckets],
        in_flight: vec![0.0; buckets],
        rtt_ms: vec![0.0; buckets],
        base_ms: (0..buckets)
            .map(|b| s.base_at(b as Micros * s.bucket) as f64 / 1000.0)
            .collect(),
        bounds: (s.min, s.max),
    };
    let mut rtt_count = vec![0u32; buckets];
    let mut ends: BinaryHeap<Reverse<(Micros, u64)>> = BinaryHeap::new();
    let mut started: HashMap<u64, Micros> = HashMap::new();
    let mut in_upstream = 0u32;
    let (mut now, mut last) = (0, 0);
    let start = |id: u64,
                 now: Micros,
                 in_upstream: &mut u32,
                 ends: &mut BinaryHeap<_>,
                 started: &mut HashMap<u64, Micros>| {
        *in_upstream += 1;
        let stretch = (*in_upstream as f64 / s.capacity.max(1) as f64).max(1.0);
        ends.push(Reverse((
            now + (s.base_at(now) as f64 * stretch) as Micros,
            id,
        )));
        started.insert(id, now);
    };
    for c in 0..s.clients {
        if let Arrival::Admitted(id) = pool.arrive(0, 0, &c.to_string(), 1) {
            start(id, 0, &mut in_upstream, &mut ends, &mut started);
        }
    }
    while let Some(Reverse((end, id))) = ends.pop() {
        if end >= s.end() {
            break;
        }
        // Integrate in-flight over the buckets between the last event and this one.
        while last < end {
            let b = (last / s.bucket) as usize;
            let edge = ((b as Micros + 1) * s.bucket).min(end);
            run.in_flight[b] += f64::from(in_upstream) * (edge - last) as f64 / s.bucket as f64;
            run.limit[b] = pool.limit();
            last = edge;
        }
        now = end;
        in_upstream -= 1;
        let b = (now / s.bucket) as usize;
        run.rtt_ms[b] += (now - started.remove(&id).unwrap_or(now)) as f64 / 1000.0;
        rtt_count[b] += 1;
        for next in pool.release(id, now).admitted {
            start(next, now, &mut in_upstream, &mut ends, &mut started);
        }
        // The same client sends again at once.
        if let Arrival::Admitted(next) = pool.arrive(now, 0, &format!("r{id}"), 1) {
            start(next, now, &mut in_upstream, &mut ends, &mut started);
        }
        run.limit[b] = pool.limit();
    }
    let _ = now;
    for (rtt, n) in run.rtt_ms.iter_mut().zip(rtt_count) {
        *rtt /= f64::from(n.max(1));
    }
    Ok(run)
}

const LIMIT: RGBColor = RGBColor(214, 39, 40);
const IN_FLIGHT: RGBColor = RGBColor(31, 119, 180);
const RTT: RGBColor = RGBColor(44, 160, 44);
const BASE: RGBColor = RGBColor(120, 120, 120);

type Panel<'a> = DrawingArea<SVGBackend<'a>, plotters::coord::Shift>;

fn chart_err(e: &dyn std::fmt::Display) -> SimError {
    SimError::Chart(e.to_string())
}

/// Two panels: the limit and the upstream's in-flight count; the latency.
pub fn render_adaptive(title: &str, run: &AdaptiveRun) -> Result<String, SimError> {
    let err = chart_err;
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, (1000, 640)).into_drawing_area();
        root.fill(&WHITE).map_err(|e| err(&e))?;
        let root = root
            .titled(title, ("sans-serif", 20))
            .map_err(|e| err(&e))?;
        let (top, bottom) = root.split_vertically(320);
        draw_limit_panel(&top, run)?;
        draw_latency_panel(&bottom, run)?;
        root.present().map_err(|e| err(&e))?;
    }
    Ok(svg)
}

/// Seconds since the start at bucket `i`, and the run's whole span.
fn seconds(run: &AdaptiveRun) -> (impl Fn(usize) -> f64 + '_, f64) {
    let secs = |i: usize| i as f64 * run.bucket as f64 / 1e6;
    let span = secs(run.limit.len());
    (secs, span)
}

type Chart<'a, 'b> = ChartContext<'a, SVGBackend<'b>, Cartesian2d<RangedCoordf64, RangedCoordf64>>;

/// A panel's chart: its caption, axes from 0 to `span` seconds and from 0 to `high`.
fn axes<'a, 'b>(
    area: &'a Panel<'b>,
    caption: String,
    span: f64,
    high: f64,
) -> Result<Chart<'a, 'b>, SimError> {
    let err = chart_err;
    let mut chart = ChartBuilder::on(area)
        .caption(caption, ("sans-serif", 15))
        .margin(8)
        .x_label_area_size(30)
        .y_label_area_size(50)
        .build_cartesian_2d(0.0..span, 0.0..high)
        .map_err(|e| err(&e))?;
    chart
        .configure_mesh()
        .disable_x_mesh()
        .x_desc("seconds")
        .draw()
        .map_err(|e| err(&e))?;
    Ok(chart)
}

/// One series of `points` as a line, with its legend entry.
fn line(
    chart: &mut Chart<'_, '_>,
    points: impl IntoIterator<Item = (f64, f64)>,
    style: ShapeStyle,
    label: &str,
) -> Result<(), SimError> {
    chart
        .draw_series(LineSeries::new(points, style))
        .map_err(|e| chart_err(&e))?
        .label(label)
        .legend(move |(x, y)| PathElement::new([(x, y), (x + 16, y)], style));
    Ok(())
}

/// The legend box of a panel.
fn legend<'a, 'b: 'a>(chart: &mut Chart<'a, 'b>) -> Result<(), SimError> {
    chart
        .configure_series_labels()
        .border_style(BLACK)
        .background_style(WHITE.mix(0.8))
        .draw()
        .map_err(|e| chart_err(&e))
}

/// The top panel: the pool's limit and the requests in the upstream.
fn draw_limit_panel(area: &Panel<'_>, run: &AdaptiveRun) -> Result<(), SimError> {
    let (secs, span) = seconds(run);
    let caption = format!(
        "pool limit (min {}, max {}) and requests in the upstream",
        run.bounds.0, run.bounds.1
    );
    let mut chart = axes(area, caption, span, f64::from(run.bounds.1) * 1.1)?;
    let limit = run.limit.iter().enumerate();
    let limit = limit.map(|(i, v)| (secs(i), f64::from(*v)));
    line(&mut chart, limit, LIMIT.stroke_width(2), "limit")?;
    let in_flight = run.in_flight.iter().enumerate().map(|(i, v)| (secs(i), *v));
    let style = IN_FLIGHT.stroke_width(1);
    line(&mut chart, in_flight, style, "in the upstream (mean)")?;
    legend(&mut chart)
}

/// The bottom panel: the upstream's own latency and the measured round trip.
fn draw_latency_panel(area: &Panel<'_>, run: &AdaptiveRun) -> Result<(), SimError> {
    let (secs, span) = seconds(run);
    let all = run.rtt_ms.iter().chain(&run.base_ms).copied();
    let top_ms = all.fold(1.0, f64::max) * 1.15;
    let mut chart = axes(area, "upstream latency (ms)".to_owned(), span, top_ms)?;
    let base = run.base_ms.iter().enumerate().map(|(i, v)| (secs(i), *v));
    let style = BASE.stroke_width(1);
    line(&mut chart, base, style, "base latency (the upstream's own)")?;
    let rtt = run.rtt_ms.iter().enumerate().filter(|(_, v)| **v > 0.0);
    let rtt = rtt.map(|(i, v)| (secs(i), *v));
    line(&mut chart, rtt, RTT.stroke_width(2), "measured round trip")?;
    legend(&mut chart)
}
