//! Time, injected: every algorithm takes `now` as an argument, and stores ask a [`Clock`]
//! for it, so tests drive time by hand instead of sleeping.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// Microseconds since the Unix epoch: the one time unit of every algorithm.
///
/// Microseconds match what Redis `TIME` returns, so the in-memory and Redis stores compute
/// with the same integers and agree to the microsecond.
pub type Micros = u64;

/// Converts a [`Duration`] to whole microseconds, saturating at `u64::MAX`.
///
/// ```
/// use std::time::Duration;
/// assert_eq!(sluicegate_core::clock::micros(Duration::from_millis(250)), 250_000);
/// ```
pub fn micros(duration: Duration) -> Micros {
    u64::try_from(duration.as_micros()).unwrap_or(u64::MAX)
}

/// A source of the current time in [`Micros`].
pub trait Clock: Send + Sync + 'static {
    /// The current time, microseconds since the Unix epoch.
    fn now(&self) -> Micros;
}

/// The wall clock. Fixed and sliding windows align to the Unix epoch, so time must be
/// wall time; algorithms tolerate a clock that steps back by treating it as no time passing.
///
/// ```
/// use sluicegate_core::clock::{Clock, SystemClock};
/// assert!(SystemClock.now() > 1_600_000_000_000_000);
/// ```
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now(&self) -> Micros {
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(micros)
            .unwrap_or(0)
    }
}

/// A clock that moves only when told to; clones share the same time.
///
/// ```
/// use std::time::Duration;
/// use sluicegate_core::clock::{Clock, ManualClock};
/// let clock = ManualClock::new(1_000_000);
/// clock.advance(Duration::from_millis(5));
/// assert_eq!(clock.now(), 1_005_000);
/// ```
#[derive(Debug, Clone, Default)]
pub struct ManualClock(Arc<AtomicU64>);

impl ManualClock {
    /// A clock standing at `start` microseconds.
    pub fn new(start: Micros) -> Self {
        Self(Arc::new(AtomicU64::new(start)))
    }

    /// Moves the clock forward.
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(micros(by), Ordering::SeqCst);
    }

    /// Sets the clock to `to` (may move backwards, to test clock steps).
    pub fn set(&self, to: Micros) {
        self.0.store(to, Ordering::SeqCst);
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Micros {
        self.0.load(Ordering::SeqCst)
    }
}

impl<C: Clock + ?Sized> Clock for Arc<C> {
    fn now(&self) -> Micros {
        (**self).now()
    }
}
