//! Trace files: one request a line, `timestamp_ms[,key[,cost[,duration_ms[,real_cost]]]]`,
//! as CSV (RFC 4180: a key with a comma or a quote is quoted, `"a,b"`, `"say ""hi"""`).
//!
//! Blank lines and lines starting with `#` are skipped, as is a first line naming the
//! columns (`timestamp_ms,key,cost`). Timestamps are milliseconds (fractions allowed), in any
//! order; they may count from 0 or be Unix times. Unix times are shifted back by whole days,
//! so windows that divide a day stay aligned as they were in production. A missing key is
//! `client`; a missing cost is 1. `duration_ms` (how long the request ran) and `real_cost`
//! (what it really cost, settled when it ends) may be missing or empty: not modelled.

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

/// Parses trace text; an error is `(1-based line, reason)`. Fields are CSV (RFC 4180,
/// read by the `csv` crate): a key with a comma or a quote is written in double quotes,
/// a quote inside doubled.
///
/// ```
/// let traffic = sluicegate_sim::trace::parse("timestamp_ms,key,cost\n0,alice\n1500,bob,3\n").unwrap();
/// assert_eq!(traffic.arrivals().len(), 2);
/// assert_eq!(traffic.keys(), ["alice", "bob"]);
/// assert_eq!(traffic.arrivals()[1].at, 1_500_000);
/// assert!(sluicegate_sim::trace::parse("0,alice,many\n").is_err());
/// ```
pub fn parse(text: &str) -> Result<Traffic, (usize, String)> {
    let mut reader = csv::ReaderBuilder::new()
        .has_headers(false)
        .flexible(true)
        .comment(Some(b'#'))
        .trim(csv::Trim::All)
        .from_reader(text.as_bytes());
    let mut keys = Keys::default();
    let mut arrivals = Vec::new();
    let mut record = csv::StringRecord::new();
    let mut first = true;
    loop {
        let line = reader.position().line() as usize;
        match reader.read_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {}
            Err(e) => return Err((line_of(&e).unwrap_or(line), e.to_string())),
        }
        let line = record.position().map_or(line, |p| p.line() as usize);
        // A first line naming the columns.
        if std::mem::take(&mut first) && record.get(0).is_some_and(|f| f.starts_with("timestamp")) {
            continue;
        }
        if arrivals.len() as u64 >= MAX_REQUESTS {
            return Err((
                line,
                format!("the trace has over {MAX_REQUESTS} requests, the simulator's bound"),
            ));
        }
        let (at, key, cost) = fields(&record).map_err(|reason| (line, reason))?;
        let key = keys.index(key).map_err(|reason| (line, reason))?;
        let (duration, real) = model_fields(&record).map_err(|reason| (line, reason))?;
        arrivals.push(Arrival {
            duration,
            real,
            ..Arrival::new(at, key, cost)
        });
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
    Ok(Traffic::new(arrivals, keys.names, 0))
}

/// The line of a CSV error, when it has one.
fn line_of(error: &csv::Error) -> Option<usize> {
    error.position().map(|p| p.line() as usize)
}

/// One request's `timestamp_ms[,key[,cost]]`.
fn fields(record: &csv::StringRecord) -> Result<(Micros, &str, u64), String> {
    if record.len() > 5 {
        return Err(format!(
            "expected timestamp_ms[,key[,cost[,duration_ms[,real_cost]]]], got {} fields",
            record.len()
        ));
    }
    let at = parse_timestamp(record.get(0).unwrap_or(""))?;
    let key = record.get(1).filter(|k| !k.is_empty()).unwrap_or("client");
    if key.len() > MAX_KEY_LEN {
        return Err(format!(
            "key is {} bytes, over the limit of {MAX_KEY_LEN}",
            key.len()
        ));
    }
    let cost = match record.get(2) {
        None => 1,
        Some(text) => match text.parse::<u64>() {
            Ok(cost) if cost >= 1 => cost,
            _ => return Err(format!("cost {text:?} is not a whole number of at least 1")),
        },
    };
    Ok((at, key, cost))
}

/// One request's optional `duration_ms` and `real_cost` (missing or empty: not modelled).
fn model_fields(record: &csv::StringRecord) -> Result<(Option<Micros>, Option<u64>), String> {
    let duration = match record.get(3).filter(|t| !t.is_empty()) {
        None => None,
        Some(text) => Some(
            parse_timestamp(text)
                .map_err(|_| format!("duration {text:?} is not a number of milliseconds"))?
                .min(crate::model::MAX_DRAW),
        ),
    };
    let real = match record.get(4).filter(|t| !t.is_empty()) {
        None => None,
        Some(text) => match text.parse::<u64>() {
            Ok(real) if real <= crate::model::MAX_DRAW => Some(real),
            _ => return Err(format!("real cost {text:?} is not a whole number")),
        },
    };
    Ok((duration, real))
}

/// The trace's distinct keys, each numbered in order of first appearance.
#[derive(Default)]
struct Keys {
    names: Vec<String>,
    index: HashMap<String, u32>,
}

impl Keys {
    fn index(&mut self, key: &str) -> Result<u32, String> {
        if let Some(&i) = self.index.get(key) {
            return Ok(i);
        }
        let i = u32::try_from(self.names.len()).map_err(|_| "too many keys".to_owned())?;
        self.names.push(key.to_owned());
        self.index.insert(key.to_owned(), i);
        Ok(i)
    }
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
    fn keys_with_commas_and_quotes_are_read_as_rfc_4180() {
        let t = parse("0,\"a,b\",2\n1,\"say \"\"hi\"\"\"\n2,a\n").unwrap();
        assert_eq!(t.keys(), ["a,b", "say \"hi\"", "a"]);
        let at: Vec<_> = t.arrivals().iter().map(|a| (a.at, a.key, a.cost)).collect();
        assert_eq!(at, [(0, 0, 2), (1_000, 1, 1), (2_000, 2, 1)]);
        // Unquoted, the comma still separates fields: "b" is then a cost.
        assert!(parse("0,a,b\n").unwrap_err().1.contains("cost \"b\""));
        assert_eq!(
            parse("0,\"a,b\",1,2,3,x\n").unwrap_err(),
            (
                1,
                "expected timestamp_ms[,key[,cost[,duration_ms[,real_cost]]]], got 6 fields"
                    .to_owned()
            )
        );
    }

    #[test]
    fn durations_and_real_costs_are_optional_columns() {
        let t = parse("0,a,10,1500,7\n1,a,10,,\n2,a,10,250.5\n").unwrap();
        let got: Vec<_> = t.arrivals().iter().map(|a| (a.duration, a.real)).collect();
        assert_eq!(
            got,
            [
                (Some(1_500_000), Some(7)),
                (None, None),
                (Some(250_500), None)
            ]
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
            ("0,a,1,2,3,extra\n", 1, "6 fields"),
            ("0,a,1,soon\n", 1, "duration \"soon\""),
            ("0,a,1,5,-3\n", 1, "real cost \"-3\""),
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
