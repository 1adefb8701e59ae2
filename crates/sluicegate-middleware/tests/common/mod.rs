//! Shared by the integration tests: a real axum server on loopback with the layer, and an
//! observer that counts outcomes.
#![allow(dead_code)]

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::routing::any;
use sluicegate_core::{AlgorithmKind, Mode, Outcome, Policy, Verdict, VerdictObserver};
use sluicegate_middleware::{RateLimitLayer, RateLimiter};

/// Serves every path with 200 "ok" behind `limiter`, on `bind` (e.g. "127.0.0.1:0").
/// Returns the address; handler calls are recorded in `calls` (when they happened).
pub async fn serve_on(limiter: RateLimiter, bind: &str) -> (SocketAddr, Arc<Mutex<Vec<Instant>>>) {
    let calls = Arc::new(Mutex::new(Vec::new()));
    let seen = Arc::clone(&calls);
    let app = Router::new()
        .fallback(any(move || {
            let seen = Arc::clone(&seen);
            async move {
                seen.lock().unwrap().push(Instant::now());
                "ok"
            }
        }))
        .layer(RateLimitLayer::new(limiter));
    let listener = tokio::net::TcpListener::bind(bind).await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    (addr, calls)
}

/// [`serve_on`] on 127.0.0.1.
pub async fn serve(limiter: RateLimiter) -> String {
    let (addr, _) = serve_on(limiter, "127.0.0.1:0").await;
    format!("http://{addr}")
}

/// A policy.
pub fn policy(name: &str, algorithm: AlgorithmKind, limit: u64, period: Duration) -> Policy {
    Policy::builder(name, algorithm, limit, period)
        .build()
        .unwrap()
}

/// A policy in a given mode.
pub fn policy_mode(name: &str, limit: u64, period: Duration, mode: Mode) -> Policy {
    Policy::builder(name, AlgorithmKind::TokenBucket, limit, period)
        .mode(mode)
        .build()
        .unwrap()
}

/// Counts (policy, outcome) and keys of every verdict.
#[derive(Default)]
pub struct Counting {
    pub outcomes: Mutex<HashMap<(String, Outcome), u64>>,
    pub keys: Mutex<Vec<String>>,
}

impl Counting {
    pub fn count(&self, policy: &str, outcome: Outcome) -> u64 {
        let map = self.outcomes.lock().unwrap();
        map.get(&(policy.to_owned(), outcome)).copied().unwrap_or(0)
    }
}

impl VerdictObserver for Counting {
    fn observe(&self, key: &str, verdict: &Verdict) {
        self.keys.lock().unwrap().push(key.to_owned());
        let mut map = self.outcomes.lock().unwrap();
        for d in &verdict.decisions {
            *map.entry((d.policy.name().to_owned(), d.outcome))
                .or_default() += 1;
        }
    }
}

/// Sends `n` GETs to `url` one after another; returns the statuses.
pub async fn statuses(client: &reqwest::Client, url: &str, n: usize) -> Vec<u16> {
    let mut out = Vec::with_capacity(n);
    for _ in 0..n {
        out.push(client.get(url).send().await.unwrap().status().as_u16());
    }
    out
}

/// How many of `statuses` are 200.
pub fn ok_count(statuses: &[u16]) -> usize {
    statuses.iter().filter(|s| **s == 200).count()
}
