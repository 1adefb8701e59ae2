//! A circuit breaker: after a run of failures the store stops waiting on Redis and fails
//! at once, until a background probe finds Redis answering again.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Consecutive connection failures or timeouts that open the circuit.
pub(crate) const FAILURE_THRESHOLD: u32 = 3;

#[derive(Debug, Default)]
pub(crate) struct Breaker {
    failures: AtomicU32,
    open: AtomicBool,
}

impl Breaker {
    /// Whether calls should fail at once.
    pub(crate) fn is_open(&self) -> bool {
        self.open.load(Ordering::Acquire)
    }

    /// A call (or probe) succeeded: close.
    pub(crate) fn success(&self) {
        if self.failures.load(Ordering::Relaxed) != 0 {
            self.failures.store(0, Ordering::Relaxed);
        }
        if self.is_open() {
            self.open.store(false, Ordering::Release);
        }
    }

    /// A call failed for a reason that says Redis is unreachable or slow. Returns whether
    /// this failure opened the circuit.
    pub(crate) fn failure(&self) -> bool {
        let failures = self
            .failures
            .fetch_add(1, Ordering::Relaxed)
            .saturating_add(1);
        failures >= FAILURE_THRESHOLD && !self.open.swap(true, Ordering::AcqRel)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_a_run_and_closes_on_success() {
        let b = Breaker::default();
        assert!(!b.failure());
        b.success();
        assert!(!b.failure());
        assert!(!b.failure());
        assert!(!b.is_open());
        assert!(b.failure());
        assert!(b.is_open());
        assert!(!b.failure(), "opens once");
        b.success();
        assert!(!b.is_open());
    }
}
