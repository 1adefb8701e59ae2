//! What the dashboard shows beyond verdicts: the current configuration's `[[pools]]`,
//! read from the running pools at each poll (so a reload shows the new ones at once).

use sluicegate_dashboard::{PoolLevelRow, PoolRow};
use sluicegate_middleware::Pool;

use crate::state::AppState;

/// The dashboard's rows for the pools of `state`'s current configuration.
pub fn pool_rows(state: &AppState) -> Vec<PoolRow> {
    state.runtime().pools.iter().map(|p| row(p)).collect()
}

fn row(pool: &Pool) -> PoolRow {
    let status = pool.status();
    PoolRow {
        pool: pool.name().to_owned(),
        limit: u64::from(status.limit),
        adaptive: status
            .adaptive
            .map(|(min, max)| (u64::from(min), u64::from(max))),
        latency_floor_ms: status.latency_floor.map(|f| f.as_secs_f64() * 1_000.0),
        levels: status
            .levels
            .into_iter()
            .map(|l| PoolLevelRow {
                level: l.name.to_string(),
                shares: l.shares,
                in_flight: u64::from(l.running),
                queued: l.queued as u64,
                admitted: l.admitted,
                rejected_queue_full: l.rejected_full,
                rejected_timeout: l.rejected_timeout,
                cancelled: l.cancelled,
                waited_seconds: l.waited_micros as f64 / 1e6,
            })
            .collect(),
    }
}
