//! [`HealthProbe`]: how the dashboard asks the store whether it is well; [`PoolSource`]:
//! how it reads the pools' counters.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluicegate_core::{BoxFuture, Store};

use crate::snapshot::{PoolRow, StoreHealth};

/// Longest the dashboard waits for a ping before calling the store unreachable.
pub const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// Something that reports the store's health. Implemented for any `Arc<S: Store>`, so the
/// server passes its `Arc<dyn Store>`.
pub trait HealthProbe: Send + Sync + 'static {
    /// Probes now.
    fn health(&self) -> BoxFuture<'_, StoreHealth>;
}

impl<S: Store + ?Sized> HealthProbe for Arc<S> {
    fn health(&self) -> BoxFuture<'_, StoreHealth> {
        Box::pin(async move {
            let started = Instant::now();
            let ping = tokio::time::timeout(PROBE_TIMEOUT, self.ping()).await;
            let ping_ms = started.elapsed().as_secs_f64() * 1_000.0;
            let error = match ping {
                Ok(Ok(())) => None,
                // Not the error's text: it can name hosts and ports, and the page is
                // seen by more people than the log (the server's /readyz logs it).
                Ok(Err(_)) => Some("the store refused the ping".to_owned()),
                Err(_) => Some(format!("no answer within {} ms", PROBE_TIMEOUT.as_millis())),
            };
            StoreHealth {
                kind: self.kind().to_owned(),
                reachable: error.is_none(),
                error,
                tracked_keys: self.tracked_keys(),
                ping_ms,
            }
        })
    }
}

/// Something that reports the pools as they are now (the server's current configuration's
/// `[[pools]]`). Read at each poll; cheap (a lock per pool, no I/O).
pub trait PoolSource: Send + Sync + 'static {
    /// The pools now, in configuration order.
    fn pools(&self) -> Vec<PoolRow>;
}

impl<F: Fn() -> Vec<PoolRow> + Send + Sync + 'static> PoolSource for F {
    fn pools(&self) -> Vec<PoolRow> {
        self()
    }
}
