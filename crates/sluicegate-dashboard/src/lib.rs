//! Sluicegate's live dashboard: `GET /dashboard`, one self-contained HTML page (script and
//! style inline, embedded in the binary, nothing from a CDN), which polls
//! `GET /dashboard/data` for decisions per second by policy and outcome, the most limited
//! keys of the last minutes, the store's health, the `[[pools]]` (in flight, queued,
//! limit, rejections and wait per level), the concurrency policies' slots held (read from
//! the store, see [`leases`]) and what settles and releases did.
//!
//! Decisions arrive through [`DashboardObserver`], a
//! [`VerdictObserver`](sluicegate_core::VerdictObserver) the server adds next to its metrics
//! observer. Its memory is fixed by [`DashboardConfig`] whatever the traffic: per-second
//! counters for a minute, and the most limited keys in a [space-saving sketch](sketch) per
//! minute, never a map of every key.
//!
//! It is not a metrics system: nothing is persisted, and a restart starts from zero. For
//! history, scrape `/metrics`.
//!
//! ```no_run
//! use std::sync::Arc;
//! use sluicegate_core::{MemoryStore, Store, VerdictObserver};
//! use sluicegate_dashboard::{Dashboard, DashboardObserver};
//!
//! # async fn serve() -> std::io::Result<()> {
//! let store: Arc<dyn Store> = Arc::new(MemoryStore::new(100_000));
//! let observer = Arc::new(DashboardObserver::default());
//! // Give `observer` (as an Arc<dyn VerdictObserver>) to whatever decides requests.
//! let app: axum::Router = sluicegate_dashboard::router(Dashboard::new(observer).with_probe(store));
//! let listener = tokio::net::TcpListener::bind("127.0.0.1:8080").await?;
//! axum::serve(listener, app).await
//! # }
//! ```

#![deny(missing_docs)]

mod health;
pub mod leases;
mod recorder;
pub mod sketch;
mod snapshot;
mod tallied;

use std::sync::Arc;

use axum::extract::State;
use axum::http::header;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};

pub use health::{HealthProbe, PROBE_TIMEOUT, PoolSource};
pub use leases::{LeaseRead, LeaseReader, MAX_LEASE_KEYS, SettleActivity};
pub use recorder::{DashboardConfig, DashboardObserver, MAX_DISPLAY_KEY, MAX_POLICIES, OUTCOMES};
pub use snapshot::{
    KeyRow, LeaseKeyRow, LeaseRow, OutcomeCounts, PolicyRow, PoolLevelRow, PoolRow, SettleCounts,
    Snapshot, StoreHealth,
};
pub use tallied::Tallied;

/// The page, script and style inline.
pub const PAGE: &str = include_str!("page.html");

/// Nothing but the page's own inline code may run, and it may only fetch from this server.
const CSP: &str = "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; \
                   connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; \
                   frame-ancestors 'none'";

/// What the dashboard's routes share: the observer that counts, and the store to probe.
#[derive(Clone)]
pub struct Dashboard {
    observer: Arc<DashboardObserver>,
    probe: Option<Arc<dyn HealthProbe>>,
    pools: Option<Arc<dyn PoolSource>>,
    leases: Option<Arc<dyn LeaseReader>>,
}

impl std::fmt::Debug for Dashboard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Dashboard")
            .field("observer", &self.observer)
            .field("probe", &self.probe.is_some())
            .field("pools", &self.pools.is_some())
            .field("leases", &self.leases.is_some())
            .finish()
    }
}

impl Dashboard {
    /// A dashboard showing what `observer` saw.
    pub fn new(observer: Arc<DashboardObserver>) -> Self {
        Dashboard {
            observer,
            probe: None,
            pools: None,
            leases: None,
        }
    }

    /// Also shows the slots held by the keys given leases, read through `reader` at each
    /// poll (at most [`MAX_LEASE_KEYS`] cost-0 reads, within [`PROBE_TIMEOUT`]).
    pub fn with_leases(mut self, reader: impl LeaseReader) -> Self {
        self.leases = Some(Arc::new(reader));
        self
    }

    /// Also shows the pools `source` reports, read at each poll.
    pub fn with_pools(mut self, source: impl PoolSource) -> Self {
        self.pools = Some(Arc::new(source));
        self
    }

    /// Also shows the health of a store (any `Arc<dyn Store>`), probed at each poll.
    pub fn with_probe(mut self, probe: impl HealthProbe) -> Self {
        self.probe = Some(Arc::new(probe));
        self
    }

    /// The observer.
    pub fn observer(&self) -> &Arc<DashboardObserver> {
        &self.observer
    }

    /// The data the page shows, store probed now.
    pub async fn snapshot(&self) -> Snapshot {
        let mut snapshot = self.observer.snapshot();
        if let Some(probe) = &self.probe {
            snapshot.store = Some(probe.health().await);
        }
        if let Some(pools) = &self.pools {
            snapshot.pools = pools.pools();
        }
        if let Some(reader) = &self.leases {
            let items = self.observer.lease_items();
            if !items.is_empty() {
                // A store that does not answer in time shows no rows, not a stuck page.
                let read = tokio::time::timeout(PROBE_TIMEOUT, reader.read(&items)).await;
                snapshot.leases = lease_rows(&items, &read.unwrap_or_default());
            }
        }
        snapshot
    }
}

/// Keys listed per concurrency policy.
const LEASE_TOP_KEYS: usize = 10;

/// One row per policy from the reads of `items` (same order): slots held summed, the
/// busiest keys, policies by name.
fn lease_rows(items: &[leases::LeaseItem], reads: &[Option<LeaseRead>]) -> Vec<LeaseRow> {
    let mut rows: Vec<LeaseRow> = Vec::new();
    for ((policy, key), read) in items.iter().zip(reads) {
        let Some(LeaseRead {
            held,
            limit,
            policy_limit,
        }) = *read
        else {
            continue;
        };
        let row = match rows.iter().position(|r| *r.policy == **policy) {
            Some(i) => &mut rows[i],
            None => {
                rows.push(LeaseRow {
                    policy: policy.to_string(),
                    limit: policy_limit,
                    in_flight: 0,
                    keys_read: 0,
                    top_keys: Vec::new(),
                });
                rows.last_mut().expect("just pushed")
            }
        };
        row.in_flight += held;
        row.keys_read += 1;
        if held > 0 {
            row.top_keys.push(LeaseKeyRow {
                key: recorder::display_key(key).to_owned(),
                in_flight: held,
                limit,
            });
        }
    }
    for row in &mut rows {
        row.top_keys.sort_by(|a, b| {
            b.in_flight
                .cmp(&a.in_flight)
                .then_with(|| a.key.cmp(&b.key))
        });
        row.top_keys.truncate(LEASE_TOP_KEYS);
    }
    rows.sort_by(|a, b| a.policy.cmp(&b.policy));
    rows
}

/// `GET /dashboard` (the page) and `GET /dashboard/data` (its JSON), for merging into the
/// server's router.
pub fn router<S: Clone + Send + Sync + 'static>(dashboard: Dashboard) -> Router<S> {
    Router::new()
        .route("/dashboard", get(page).fallback(method_not_allowed))
        .route("/dashboard/data", get(data).fallback(method_not_allowed))
        .with_state(dashboard)
}

/// Any method but GET/HEAD: the JSON error shape of the rest of the server's API.
async fn method_not_allowed() -> Response {
    (
        axum::http::StatusCode::METHOD_NOT_ALLOWED,
        [(header::ALLOW, "GET, HEAD")],
        Json(serde_json::json!({
            "error": "method_not_allowed",
            "message": "the dashboard only answers GET",
        })),
    )
        .into_response()
}

async fn page() -> Response {
    (
        [
            (header::CONTENT_TYPE, "text/html; charset=utf-8"),
            (header::CONTENT_SECURITY_POLICY, CSP),
            (header::X_CONTENT_TYPE_OPTIONS, "nosniff"),
            (header::CACHE_CONTROL, "no-cache"),
        ],
        PAGE,
    )
        .into_response()
}

async fn data(State(dashboard): State<Dashboard>) -> Response {
    (
        [(header::CACHE_CONTROL, "no-store")],
        Json(dashboard.snapshot().await),
    )
        .into_response()
}
