//! What the dashboard shows beyond verdicts: the current configuration's `[[pools]]`,
//! read from the running pools at each poll (so a reload shows the new ones at once); the
//! slots held by concurrency leases, read from the store ([`LeaseReads`]). (What settles
//! and releases did is counted around the store by `sluicegate_dashboard::Tallied`.)

use std::sync::Arc;

use sluicegate_core::{BoxFuture, CheckRequest, Policy};
use sluicegate_dashboard::leases::LeaseItem;
use sluicegate_dashboard::{LeaseRead, LeaseReader, PoolLevelRow, PoolRow};
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

/// The dashboard's reads of the slots held by keys given leases: a cost-0 decision (which
/// takes nothing and is not observed) per `(policy, key)`, on the current configuration's
/// policies and the server's store, in one batch.
pub struct LeaseReads(pub AppState);

impl LeaseReader for LeaseReads {
    fn read<'a>(&'a self, items: &'a [LeaseItem]) -> BoxFuture<'a, Vec<Option<LeaseRead>>> {
        Box::pin(async move {
            let runtime = self.0.runtime();
            // A policy removed by a reload, or no longer concurrency, is not read.
            let policies: Vec<Option<[Arc<Policy>; 1]>> = items
                .iter()
                .map(|(name, _)| {
                    runtime
                        .policy(name)
                        .filter(|p| p.algorithm().is_concurrency())
                        .map(|p| [Arc::clone(p)])
                })
                .collect();
            let requests: Vec<CheckRequest<'_>> = items
                .iter()
                .zip(&policies)
                .filter_map(|((_, key), p)| p.as_ref().map(|p| CheckRequest::new(p, key, 0)))
                .collect();
            let mut answers = self.0.store.check_batch(&requests).await.into_iter();
            policies
                .iter()
                .map(|p| {
                    let policy = p.as_ref()?;
                    let verdict = answers.next()?.ok()?;
                    let d = &verdict.decisions.first()?.decision;
                    Some(LeaseRead {
                        held: d.limit.saturating_sub(d.remaining),
                        limit: d.limit,
                        policy_limit: policy[0].limit(),
                    })
                })
                .collect()
        })
    }
}
