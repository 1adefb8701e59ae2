//! Calendar windows against an independent computation: Python's `zoneinfo` over the
//! system's copy of the IANA database (another implementation and another copy of the data
//! than jiff's bundled one). Random instants from 1995 to 2045, half of them in the weeks
//! where DST changes usually happen, in zones with midnight DST changes (Santiago),
//! half-hour DST (Lord Howe), a skipped day (Apia), no DST (Kolkata) and the usual ones;
//! every unit, leap years included.

use std::io::Write;
use std::process::{Command, Stdio};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluicegate_core::calendar::{Calendar, CalendarUnit};

/// Zones whose rules the two copies of the database agree on. (Cuba is left out: jiff's
/// bundled tzdb is newer than Debian's 2025b and keeps Havana on summer time in 2027, a
/// difference of data, not of arithmetic.)
const ZONES: &[&str] = &[
    "UTC",
    "Europe/Berlin",
    "America/New_York",
    "America/Santiago",
    "Australia/Lord_Howe",
    "Pacific/Apia",
    "Asia/Kolkata",
    "Pacific/Auckland",
    "America/Sao_Paulo",
];
const UNITS: &[CalendarUnit] = &[
    CalendarUnit::Day,
    CalendarUnit::Week,
    CalendarUnit::Month,
    CalendarUnit::Year,
];

/// For each `zone unit micros` line: `start end` of the window, by bisection on the local
/// date (the first instant whose local date is at least the window's first day).
const PYTHON: &str = r#"
import sys
from datetime import datetime, date, timedelta
from zoneinfo import ZoneInfo

def first_instant(d, tz):
    lo = int(datetime(d.year, d.month, d.day).timestamp()) - 40 * 3600
    hi = lo + 80 * 3600
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if datetime.fromtimestamp(mid, tz).date() >= d:
            hi = mid
        else:
            lo = mid
    return hi

def next_first(d, unit):
    if unit == "day": return d + timedelta(days=1)
    if unit == "week": return d + timedelta(days=7)
    if unit == "month": return date(d.year + d.month // 12, d.month % 12 + 1, 1)
    return date(d.year + 1, 1, 1)

for line in sys.stdin:
    zone, unit, micros = line.split()
    tz = ZoneInfo(zone)
    d = datetime.fromtimestamp(int(micros) // 1000000, tz).date()
    if unit == "week": d -= timedelta(days=d.weekday())
    elif unit == "month": d = d.replace(day=1)
    elif unit == "year": d = date(d.year, 1, 1)
    print(first_instant(d, tz) * 1000000, first_instant(next_first(d, unit), tz) * 1000000)
"#;

fn random_instant(rng: &mut StdRng) -> u64 {
    let year = rng.random_range(1995..=2045);
    // Half the time, the weeks where DST changes (March, April, September to November).
    let (month, day) = if rng.random_bool(0.5) {
        let month = [3, 4, 9, 10, 11][rng.random_range(0..5)];
        (
            month,
            [1, 2, 3, 4, 5, 6, 7, 24, 25, 26, 27, 28, 29, 30][rng.random_range(0..14)],
        )
    } else {
        (rng.random_range(1..=12), rng.random_range(1..=28))
    };
    let ts: jiff::Timestamp = format!("{year:04}-{month:02}-{day:02}T00:00:00Z")
        .parse()
        .unwrap();
    let base = u64::try_from(ts.as_microsecond()).unwrap();
    base + rng.random_range(0..86_400_000_000)
}

#[test]
fn windows_match_python_zoneinfo() {
    let Ok(mut python) = Command::new("python3")
        .args(["-c", PYTHON])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
    else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "python3 is required (scripts/install-test-deps.sh)"
        );
        eprintln!("SKIPPED: python3 is not installed");
        return;
    };
    let mut rng = StdRng::seed_from_u64(rand::random());
    let mut cases = Vec::new();
    let mut input = String::new();
    for _ in 0..3000 {
        let zone = ZONES[rng.random_range(0..ZONES.len())];
        let unit = UNITS[rng.random_range(0..UNITS.len())];
        let now = random_instant(&mut rng);
        input.push_str(&format!("{zone} {} {now}\n", unit.name()));
        cases.push((zone, unit, now));
    }
    python
        .stdin
        .take()
        .unwrap()
        .write_all(input.as_bytes())
        .unwrap();
    let out = python.wait_with_output().unwrap();
    assert!(out.status.success(), "python failed");
    let expected: Vec<(u64, u64)> = String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (a, b) = l.split_once(' ').unwrap();
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect();
    assert_eq!(expected.len(), cases.len());
    for ((zone, unit, now), want) in cases.into_iter().zip(expected) {
        let calendar = Calendar::new(unit, zone).unwrap();
        let got = calendar.window(now).unwrap();
        assert_eq!(got, want, "{} in {zone} at {now} µs", unit.name());
        // Contiguous, holding `now`, and no longer than the unit's longest window.
        assert!(got.0 <= now && now < got.1);
        assert_eq!(calendar.window(got.1).unwrap().0, got.1);
        assert!(got.1 - got.0 <= unit.longest(), "{} in {zone}", unit.name());
    }
}
