//! The plain-text summary table, one row per policy.

use std::fmt::Write as _;
use std::time::Duration;

use sluicegate_core::{Micros, Mode};

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
/// limit), and the peak bytes of one key's algorithm state.
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
    out
}

/// One policy's row of the table.
fn row(run: &PolicyRun) -> [String; 9] {
    let p = &run.policy;
    let limit = if p.algorithm().uses_burst() && p.burst() != p.limit() {
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
    [
        p.name().to_owned(),
        p.algorithm().name().to_owned(),
        limit,
        mode,
        run.admitted.to_string(),
        rejected,
        run.delayed.to_string(),
        format!("{} ({ratio:.2}×)", run.peak_in_period),
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
