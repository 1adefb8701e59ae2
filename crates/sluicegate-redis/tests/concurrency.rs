//! Exactness under concurrency: 4 store instances (4 connections, as 4 gateways would have)
//! × 64 concurrent tasks on one key admit exactly `limit`, for every algorithm, and for a
//! multi-policy request exactly the smallest limit, consuming from every policy alike.

use std::sync::Arc;
use std::time::Duration;

use sluicegate_core::{AlgorithmKind, CheckRequest, Store};
use sluicegate_testkit::{RedisServer, redis, shared_policy, storm};

const DAY: Duration = Duration::from_secs(86_400);

async fn four_stores(url: &str, prefix: &str) -> Vec<Arc<sluicegate_redis::RedisStore>> {
    let mut stores = Vec::new();
    for _ in 0..4 {
        stores.push(Arc::new(redis::store(url, prefix).await));
    }
    stores
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_instances_admit_exactly_the_limit() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let stores = four_stores(&server.url(), "exact").await;
    for kind in AlgorithmKind::ALL {
        // A day-long period: no refill or window change can happen during the storm.
        let p = [shared_policy("p", kind, 100, DAY)];
        let admitted = storm(&stores, &p, &format!("hot-{kind}"), 64, 3).await;
        assert_eq!(admitted, 100, "{kind}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_policy_requests_are_all_or_nothing_under_concurrency() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let stores = four_stores(&server.url(), "exact-multi").await;
    let policies = [
        shared_policy("burst", AlgorithmKind::TokenBucket, 90, DAY),
        shared_policy("window", AlgorithmKind::SlidingWindow, 60, DAY),
        shared_policy("log", AlgorithmKind::SlidingLog, 75, DAY),
    ];
    let admitted = storm(&stores, &policies, "hot", 64, 3).await;
    assert_eq!(admitted, 60);
    // Denied requests consumed nothing: each policy saw exactly the 60 admitted.
    for (p, left) in policies.iter().zip([30, 0, 15]) {
        let read = stores[0]
            .check(CheckRequest::new(std::slice::from_ref(p), "hot", 0))
            .await
            .unwrap();
        assert_eq!(read.decisions[0].decision.remaining, left, "{}", p.name());
    }
}
