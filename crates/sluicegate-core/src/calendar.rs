//! Calendar periods for `fixed_window` (`calendar = "day" | "week" | "month" | "year"`):
//! windows that start at local midnight in an IANA time zone, weeks on Monday, so a day is
//! 23 or 25 hours across a DST change and a month 28 to 31 days.
//!
//! Time zones come from [`jiff`] with its bundled copy of the IANA database, so windows do
//! not depend on the machine's `/usr/share/zoneinfo` (two gateways with different system
//! packages still agree on every boundary).

use std::fmt;
use std::str::FromStr;

use jiff::civil::Date;
use jiff::tz::TimeZone;
use jiff::{Timestamp, ToSpan};

use crate::clock::Micros;

/// The length of a calendar window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum CalendarUnit {
    /// From local midnight to the next.
    Day,
    /// From Monday's local midnight to the next Monday's.
    Week,
    /// From the first of the month to the first of the next.
    Month,
    /// From the first of January to the next.
    Year,
}

impl CalendarUnit {
    /// The configuration name.
    pub fn name(self) -> &'static str {
        match self {
            CalendarUnit::Day => "day",
            CalendarUnit::Week => "week",
            CalendarUnit::Month => "month",
            CalendarUnit::Year => "year",
        }
    }

    /// The longest window, µs (a 25-hour day, a 31-day month of 25-hour days, …): what a
    /// calendar policy reports as its `period` and what bounds its stored state's life.
    pub fn longest(self) -> Micros {
        const HOUR: Micros = 3_600_000_000;
        match self {
            CalendarUnit::Day => 25 * HOUR,
            CalendarUnit::Week => 7 * 24 * HOUR + HOUR,
            CalendarUnit::Month => 31 * 24 * HOUR + HOUR,
            CalendarUnit::Year => 366 * 24 * HOUR + HOUR,
        }
    }

    fn first_day(self, date: Date) -> Option<Date> {
        match self {
            CalendarUnit::Day => Some(date),
            CalendarUnit::Week => {
                let back = i64::from(date.weekday().to_monday_zero_offset());
                date.checked_sub(back.days()).ok()
            }
            CalendarUnit::Month => Some(date.first_of_month()),
            CalendarUnit::Year => Some(date.first_of_year()),
        }
    }

    fn next_first_day(self, first: Date) -> Option<Date> {
        let step = match self {
            CalendarUnit::Day => 1.day(),
            CalendarUnit::Week => 7.days(),
            CalendarUnit::Month => 1.month(),
            CalendarUnit::Year => 1.year(),
        };
        first.checked_add(step).ok()
    }
}

impl FromStr for CalendarUnit {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "day" => Ok(CalendarUnit::Day),
            "week" => Ok(CalendarUnit::Week),
            "month" => Ok(CalendarUnit::Month),
            "year" => Ok(CalendarUnit::Year),
            other => Err(format!(
                "unknown calendar {other:?}; expected day, week, month or year"
            )),
        }
    }
}

/// Calendar windows of one unit in one time zone.
///
/// ```
/// use sluicegate_core::calendar::{Calendar, CalendarUnit};
/// let berlin = Calendar::new(CalendarUnit::Day, "Europe/Berlin")?;
/// // 2024-03-31, the day Berlin moves to summer time, is 23 hours long.
/// let noon = 1_711_882_800_000_000; // 2024-03-31T11:00:00Z
/// let (start, end) = berlin.window(noon).unwrap();
/// assert_eq!(end - start, 23 * 3_600_000_000);
/// assert_eq!(start, 1_711_839_600_000_000); // 2024-03-30T23:00:00Z, local midnight
/// # Ok::<(), String>(())
/// ```
#[derive(Clone)]
pub struct Calendar {
    unit: CalendarUnit,
    zone: String,
    tz: TimeZone,
}

impl Calendar {
    /// Windows of `unit` in the IANA zone `zone` (e.g. `"Europe/Berlin"`, `"UTC"`); an
    /// error names a zone the bundled database does not know.
    pub fn new(unit: CalendarUnit, zone: &str) -> Result<Self, String> {
        let tz = TimeZone::get(zone)
            .map_err(|_| format!("unknown time zone {zone:?} (write an IANA name such as \"Europe/Berlin\" or \"UTC\")"))?;
        Ok(Calendar {
            unit,
            zone: zone.to_owned(),
            tz,
        })
    }

    /// The unit.
    pub fn unit(&self) -> CalendarUnit {
        self.unit
    }

    /// The IANA zone name as configured.
    pub fn zone(&self) -> &str {
        &self.zone
    }

    /// The window holding `now`: its first instant and the first instant of the next one,
    /// µs since the Unix epoch. `None` only for instants outside years -9999..=9999.
    pub fn window(&self, now: Micros) -> Option<(Micros, Micros)> {
        let now = Timestamp::from_microsecond(i64::try_from(now).ok()?).ok()?;
        let date = now.to_zoned_datetime(self.tz.clone()).date();
        let first = self.unit.first_day(date)?;
        let next = self.unit.next_first_day(first)?;
        Some((self.midnight(first)?, self.midnight(next)?))
    }

    /// The first instant of `date` in the zone (later than 00:00 where midnight is skipped).
    fn midnight(&self, date: Date) -> Option<Micros> {
        let zoned = date
            .to_zoned_datetime(self.tz.clone())
            .ok()?
            .start_of_day()
            .ok()?;
        u64::try_from(zoned.timestamp().as_microsecond()).ok()
    }

    /// The start of the window holding `now` and of the next `count - 1` windows after it,
    /// then the end of the last one (`count + 1` boundaries, ascending); what the Redis
    /// script receives so that it can place its own clock's time.
    pub fn boundaries(&self, now: Micros, before: usize, after: usize) -> Option<Vec<Micros>> {
        let (start, end) = self.window(now)?;
        let mut out = vec![start, end];
        let mut first = start;
        for _ in 0..before {
            let (s, _) = self.window(first.checked_sub(1)?)?;
            out.insert(0, s);
            first = s;
        }
        let mut last = end;
        for _ in 0..after {
            let (_, e) = self.window(last)?;
            out.push(e);
            last = e;
        }
        Some(out)
    }
}

impl fmt::Debug for Calendar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Calendar({} in {})", self.unit.name(), self.zone)
    }
}

impl PartialEq for Calendar {
    fn eq(&self, other: &Self) -> bool {
        self.unit == other.unit && self.zone == other.zone
    }
}

impl Eq for Calendar {}

impl std::hash::Hash for Calendar {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.unit.hash(state);
        self.zone.hash(state);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const HOUR: Micros = 3_600_000_000;
    const DAY: Micros = 24 * HOUR;

    fn at(text: &str) -> Micros {
        let ts: Timestamp = text.parse().unwrap();
        u64::try_from(ts.as_microsecond()).unwrap()
    }

    #[test]
    fn lengths_across_dst_and_months() {
        let berlin = |u| Calendar::new(u, "Europe/Berlin").unwrap();
        let len = |c: &Calendar, t: &str| {
            let (s, e) = c.window(at(t)).unwrap();
            e - s
        };
        assert_eq!(
            len(&berlin(CalendarUnit::Day), "2024-10-27T12:00:00Z"),
            25 * HOUR
        );
        assert_eq!(
            len(&berlin(CalendarUnit::Month), "2024-02-10T00:00:00Z"),
            29 * DAY
        );
        assert_eq!(
            len(&berlin(CalendarUnit::Month), "2023-02-10T00:00:00Z"),
            28 * DAY
        );
        // March 2024 holds the spring change: 31 days less an hour.
        assert_eq!(
            len(&berlin(CalendarUnit::Month), "2024-03-10T00:00:00Z"),
            31 * DAY - HOUR
        );
        let utc_year = Calendar::new(CalendarUnit::Year, "UTC").unwrap();
        assert_eq!(len(&utc_year, "2024-06-01T00:00:00Z"), 366 * DAY);
        assert_eq!(len(&utc_year, "2025-06-01T00:00:00Z"), 365 * DAY);
    }

    #[test]
    fn weeks_start_on_monday_at_local_midnight() {
        let ny = Calendar::new(CalendarUnit::Week, "America/New_York").unwrap();
        // Sunday 2025-06-01 20:00 in New York is Monday 00:00Z: still the week of May 26.
        let (start, end) = ny.window(at("2025-06-02T00:00:00Z")).unwrap();
        assert_eq!(start, at("2025-05-26T04:00:00Z"));
        assert_eq!(end, at("2025-06-02T04:00:00Z"));
    }

    #[test]
    fn boundaries_surround_now() {
        let c = Calendar::new(CalendarUnit::Month, "Asia/Kolkata").unwrap();
        let now = at("2025-03-15T00:00:00Z");
        let b = c.boundaries(now, 1, 1).unwrap();
        assert_eq!(b.len(), 4);
        assert!(b.windows(2).all(|w| w[0] < w[1]));
        assert!(b[1] <= now && now < b[2]);
        assert_eq!(b[0], at("2025-01-31T18:30:00Z"));
    }

    #[test]
    fn unknown_zones_are_refused() {
        assert!(Calendar::new(CalendarUnit::Day, "Mars/Olympus").is_err());
        assert!("fortnight".parse::<CalendarUnit>().is_err());
    }
}
