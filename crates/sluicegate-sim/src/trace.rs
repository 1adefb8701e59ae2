//! Trace files: one request a line, `timestamp_ms[,key[,cost]]`.
//!
//! Blank lines and lines starting with `#` are skipped, as is a first line naming the
//! columns (`timestamp_ms,key,cost`). Timestamps are milliseconds (fractions allowed), in any
//! order; they may count from 0 or be Unix times. Unix times are shifted back by whole days,
//! so windows that divide a day stay aligned as they were in production. A missing key is
//! `client`; a missing cost is 1.

use std::collections::HashMap;
use std::path::Path;

use sluicegate_core::Micros;
use sluicegate_core::store::MAX_KEY_LEN;

use crate::error::SimError;
use crate::traffic::{Arrival, MAX_REQUESTS, Traffic};

const DAY: Micros = 86_400 * 1_000_000;

/// Reads a trace file.
pub fn read(path: &Path) -> Result<Traffic, SimError> {
    let text = std::fs::read_to_string(path).map_err(|source| SimError::Io {
        path: path.to_owned(),
        source,
    })?;
    parse(&text).map_err(|(line, reason)| SimError::Trace {
        path: path.to_owned(),
        line,
        reason,
    })
}

/// Parses trace text; an error is `(1-based line, reason)`.
///
/// ```
/// let traffic = sluicegate_sim::trace::parse("timestamp_ms,key,cost\n0,alice\n1500,bob,3\n").unwrap();
/// assert_eq!(traffic.arrivals().len(), 2);
/// assert_eq!(traffic.keys(), ["alice", "bob"]);
/// assert_eq!(traffic.arrivals()[1].at, 1_500_000);
/// assert!(sluicegate_sim::trace::parse("0,alice,many\n").is_err());
/// ```
pub fn parse(text: &str) -> Result<Traffic, (usize, String)> {
    let mut keys: Vec<String> = Vec::new();
    let mut index: HashMap<String, u32> = HashMap::new();
    let mut arrivals = Vec::new();
    let mut seen_data = false;
    for (n, raw) in text.lines().enumerate() {
        let line_no = n + 1;
        let line = raw.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        if !seen_data && fields[0].starts_with("timestamp") {
            seen_data = true;
            continue;
        }
        seen_data = true;
        if fields.len() > 3 {
            return Err((
                line_no,
                format!(
                    "expected timestamp_ms[,key[,cost]], got {} fields",
                    fields.len()
                ),
            ));
        }
        let at = parse_timestamp(fields[0]).map_err(|reason| (line_no, reason))?;
        let key = fields
            .get(1)
            .copied()
            .filter(|k| !k.is_empty())
            .unwrap_or("client");
        if key.len() > MAX_KEY_LEN {
            return Err((
                line_no,
                format!(
                    "key is {} bytes, over the limit of {MAX_KEY_LEN}",
                    key.len()
                ),
            ));
        }
        let cost = match fields.get(2) {
            None => 1,
            Some(text) => match text.parse::<u64>() {
                Ok(cost) if cost >= 1 => cost,
                _ => {
                    return Err((
                        line_no,
                        format!("cost {text:?} is not a whole number of at least 1"),
                    ));
                }
            },
        };
        if arrivals.len() as u64 >= MAX_REQUESTS {
            return Err((
                line_no,
                format!("the trace has over {MAX_REQUESTS} requests, the simulator's bound"),
            ));
        }
        let key = match index.get(key) {
            Some(&i) => i,
            None => {
                let i =
                    u32::try_from(keys.len()).map_err(|_| (line_no, "too many keys".to_owned()))?;
                keys.push(key.to_owned());
                index.insert(key.to_owned(), i);
                i
            }
        };
        arrivals.push(Arrival { at, key, cost });
    }
    if arrivals.is_empty() {
        return Err((
            text.lines().count().max(1),
            "the trace has no requests".to_owned(),
        ));
    }
    let first = arrivals.iter().map(|a| a.at).min().unwrap_or(0);
    let origin = first / DAY * DAY;
    for arrival in &mut arrivals {
        arrival.at -= origin;
    }
    Ok(Traffic::new(arrivals, keys, 0))
}

fn parse_timestamp(text: &str) -> Result<Micros, String> {
    let bad = || format!("timestamp {text:?} is not a number of milliseconds");
    let ms: f64 = text.parse().map_err(|_| bad())?;
    if !ms.is_finite() || ms < 0.0 {
        return Err(bad());
    }
    let us = (ms * 1_000.0).round();
    if us >= u64::MAX as f64 / 2.0 {
        return Err(format!("timestamp {text:?} is too large"));
    }
    Ok(us as Micros)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_costs_comments_and_order() {
        let t = parse("# a comment\n\n2000,b,2\n1000\n1000.5,a\n").unwrap();
        assert_eq!(t.keys(), ["b", "client", "a"]);
        let at: Vec<_> = t.arrivals().iter().map(|a| (a.at, a.key, a.cost)).collect();
        assert_eq!(
            at,
            [(1_000_000, 1, 1), (1_000_500, 2, 1), (2_000_000, 0, 2)]
        );
    }

    #[test]
    fn unix_times_are_shifted_by_whole_days() {
        // 2026-11-30T10:00:00.250Z
        let t = parse("1796032800250,k\n").unwrap();
        assert_eq!(t.arrivals()[0].at, 10 * 3_600_000_000 + 250_000);
    }

    #[test]
    fn bad_lines_name_the_line_and_the_reason() {
        let cases = [
            ("0\nsoon\n", 2, "not a number"),
            ("0\n-5\n", 2, "not a number"),
            ("0,a,0\n", 1, "at least 1"),
            ("0,a,1.5\n", 1, "at least 1"),
            ("0,a,1,extra\n", 1, "4 fields"),
            ("# nothing\n", 1, "no requests"),
            ("timestamp_ms\n5,a\nNaN\n", 3, "not a number"),
        ];
        for (text, line, reason) in cases {
            let (got_line, got_reason) = parse(text).unwrap_err();
            assert_eq!(got_line, line, "{text:?}");
            assert!(got_reason.contains(reason), "{text:?}: {got_reason}");
        }
        let long = format!("0,{}\n", "k".repeat(MAX_KEY_LEN + 1));
        assert!(parse(&long).unwrap_err().1.contains("over the limit"));
    }

    #[test]
    fn read_reports_the_path() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.csv");
        std::fs::write(&path, "0\nlater\n").unwrap();
        let err = read(&path).unwrap_err().to_string();
        assert!(
            err.ends_with("t.csv:2: timestamp \"later\" is not a number of milliseconds"),
            "{err}"
        );
        assert!(read(&dir.path().join("missing.csv")).is_err());
    }
}
