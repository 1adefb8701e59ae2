//! The plain-text summary table, one row per policy.

use std::fmt::Write as _;
use std::time::Duration;

use sluicegate_core::{AlgorithmKind, Micros, Mode};

use crate::engine::PolicyRun;
use crate::traffic::Traffic;

/// Formats µs the way periods are written in config: `1m`, `250ms`, `1h 30m`.
pub fn human(us: Micros) -> String {
    if us == 0 {
        return "0s".to_owned();
    }
    // Sub-millisecond precision only clutters a table.
    let rounded = if us >= 1_000 { us / 1_000 * 1_000 } else { us };
    humantime::format_duration(Duration::from_micros(rounded)).to_string()
}

/// The summary table of a simulation.
///
/// Columns: offered, admitted (including delayed and shadow-denied), rejected, delayed, the
/// most admitted for one key in any interval of one period (and that as a multiple of the
/// limit; for concurrency, the most slots one key held), and the peak bytes of one key's
/// algorithm state. Below: waits, leases (held, running, released, expired) and settles.
pub fn table(description: &str, traffic: &Traffic, runs: &[PolicyRun]) -> String {
    let mut out = String::new();
    let keys = traffic.keys().len();
    let _ = writeln!(
        out,
        "{description}: {} requests over {}, {} key{}",
        traffic.arrivals().len(),
        human(traffic.duration()),
        keys,
        if keys == 1 { "" } else { "s" }
    );
    let _ = writeln!(out);
    let header = [
        "policy",
        "algorithm",
        "limit",
        "mode",
        "admitted",
        "rejected",
        "delayed",
        "max in 1 period",
        "state bytes/key",
    ];
    let mut rows: Vec<[String; 9]> = vec![header.map(str::to_owned)];
    rows.extend(runs.iter().map(row));
    write_aligned(&mut out, &rows);
    let delayed: Vec<&PolicyRun> = runs.iter().filter(|r| r.delayed > 0).collect();
    for run in delayed {
        let _ = writeln!(
            out,
            "\n{}: {} requests waited, the longest {}",
            run.policy.name(),
            run.delayed,
            human(run.max_delay)
        );
    }
    for run in runs {
        notes(&mut out, run);
    }
    out
}

/// The lines under the table for leases and settles.
fn notes(out: &mut String, run: &PolicyRun) {
    let name = label(run);
    if let Some(l) = &run.leases {
        let _ = writeln!(
            out,
            "\n{name}: at most {} slots held by one key and {} of its requests running at once; \
             {} leases released when their request ended, {} expired first (the request outlived the lease)",
            l.peak_held, l.peak_running, l.released, l.expired
        );
    }
    if let Some(s) = &run.settle {
        let what = if s.settled {
            format!(
                "settled at each request's end: {} gave cost back, {} charged more",
                s.refunded, s.charged
            )
        } else {
            "not settled: the estimate stayed charged".to_owned()
        };
        let _ = writeln!(
            out,
            "\n{name}: admitted {} estimated, {} real cost; {what}",
            s.estimated, s.real
        );
    }
}

/// The policy's name, and whether real costs were settled when the traffic has them.
pub fn label(run: &PolicyRun) -> String {
    match &run.settle {
        Some(s) if s.settled => format!("{} (settled)", run.policy.name()),
        Some(_) => format!("{} (estimate only)", run.policy.name()),
        None => run.policy.name().to_owned(),
    }
}

/// One policy's row of the table.
fn row(run: &PolicyRun) -> [String; 9] {
    let p = &run.policy;
    let concurrency = p.algorithm() == AlgorithmKind::Concurrency;
    let limit = if concurrency {
        format!("{} in flight, lease {}", p.limit(), human(p.period()))
    } else if p.algorithm().uses_burst() && p.burst() != p.limit() {
        format!("{}/{} burst {}", p.limit(), human(p.period()), p.burst())
    } else {
        format!("{}/{}", p.limit(), human(p.period()))
    };
    let ratio = run.peak_in_period as f64 / p.limit() as f64;
    let mode = match p.mode() {
        Mode::Delay => format!("delay≤{}", human(p.max_delay())),
        other => other.name().to_owned(),
    };
    let rejected = if run.shadow_denied > 0 {
        format!("{} (shadow {})", run.rejected, run.shadow_denied)
    } else {
        run.rejected.to_string()
    };
    let peak = if concurrency {
        format!("{} held ({ratio:.2}×)", run.peak_in_period)
    } else {
        format!("{} ({ratio:.2}×)", run.peak_in_period)
    };
    [
        label(run),
        p.algorithm().name().to_owned(),
        limit,
        mode,
        run.admitted.to_string(),
        rejected,
        run.delayed.to_string(),
        peak,
        run.state_bytes.to_string(),
    ]
}

/// Writes `rows` in columns: text columns left-aligned, numbers right-aligned.
fn write_aligned(out: &mut String, rows: &[[String; 9]]) {
    let widths: Vec<usize> = (0..9)
        .map(|c| rows.iter().map(|r| r[c].chars().count()).max().unwrap_or(0))
        .collect();
    for row in rows {
        let mut line = String::new();
        for (c, cell) in row.iter().enumerate() {
            let pad = widths[c] - cell.chars().count();
            if c < 4 {
                line.push_str(cell);
                line.push_str(&" ".repeat(pad));
            } else {
                line.push_str(&" ".repeat(pad));
                line.push_str(cell);
            }
            line.push_str("  ");
        }
        let _ = writeln!(out, "{}", line.trim_end());
    }
}
