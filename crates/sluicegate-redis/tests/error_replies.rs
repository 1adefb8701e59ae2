//! Redis answering with an error reply that means "I cannot decide now" is an outage, like
//! a timeout: each call fails with an outage error (so `on_store_error` applies), the
//! circuit breaker opens, `ping` (what `/readyz` asks) fails, and once the cause is gone
//! decisions use Redis again. Each cause is produced for real on a real redis-server:
//! OOM (`maxmemory` 1 byte, `noeviction`), READONLY (a replica), MASTERDOWN (a replica cut
//! off from its master with `replica-serve-stale-data no`), BUSY (a script that never ends)
//! LOADING (`DEBUG RELOAD` of a dataset loaded slowly with `key-load-delay`), MISCONF (a
//! snapshot that cannot be written, with `stop-writes-on-bgsave-error`) and NOREPLICAS
//! (`min-replicas-to-write` on a master without replicas) and CLUSTERDOWN (a Redis Cluster
//! with a slot no node serves, under the default `cluster-require-full-coverage yes`).
//! A key of the wrong type is replaced, not an error forever.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluicegate_core::{AlgorithmKind, CheckRequest, Policy, Store, StoreError};
use sluicegate_redis::{RedisConfig, RedisStore};
use sluicegate_testkit::redis::cli;
use sluicegate_testkit::{RedisCluster, RedisServer, free_port};

const GENEROUS: Duration = Duration::from_secs(20);

async fn store(url: &str) -> RedisStore {
    let mut config = RedisConfig::standalone(url);
    config.key_prefix = "replies".into();
    // Long enough that an error reply, not a timeout, is what the store sees.
    config.timeout = Duration::from_millis(1500);
    RedisStore::connect(config).await.unwrap()
}

fn policy(name: &str, kind: AlgorithmKind) -> Arc<Policy> {
    Arc::new(
        Policy::builder(name, kind, 1000, Duration::from_secs(60))
            .build()
            .unwrap(),
    )
}

fn policies() -> [Arc<Policy>; 2] {
    [
        policy("tb", AlgorithmKind::TokenBucket),
        policy("log", AlgorithmKind::SlidingLog),
    ]
}

async fn decide(store: &RedisStore, key: &str) -> Result<bool, StoreError> {
    let policies = policies();
    store
        .check(CheckRequest::new(&policies, key, 1))
        .await
        .map(|v| v.allowed)
}

/// Polls `f` until it holds, for at most [`GENEROUS`].
async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + GENEROUS;
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// With the cause in place: every decision fails as an outage (never `Internal`), the
/// breaker opens, `ping` fails; `reply` is the error code seen at least once.
async fn assert_outage(store: &RedisStore, reply: &str) {
    let mut seen = Vec::new();
    let deadline = Instant::now() + GENEROUS;
    while store.is_connected() {
        assert!(
            Instant::now() < deadline,
            "{reply}: the circuit never opened: {seen:?}"
        );
        if let Err(e) = decide(store, "client").await {
            assert!(e.is_outage(), "{reply}: not an outage: {e}");
            seen.push(e.to_string());
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(
        // The client names some codes its own way (READONLY: "ReadOnly", LOADING: "BusyLoading").
        seen.iter()
            .any(|e| e.to_lowercase().contains(&reply.to_lowercase())),
        "no {reply} reply among {seen:?}"
    );
    assert!(store.ping().await.is_err(), "ping must fail while {reply}");
    let err = decide(store, "client").await.unwrap_err();
    assert!(err.is_outage(), "{err}");
}

/// With the cause gone: the probe closes the circuit and decisions admit again.
async fn assert_recovers(store: &RedisStore) {
    eventually("decisions use Redis again", || async {
        matches!(decide(store, "client").await, Ok(true))
    })
    .await;
    assert!(store.ping().await.is_ok());
}

#[tokio::test]
async fn oom_under_noeviction_is_an_outage() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = store(&server.url()).await;
    assert_eq!(decide(&store, "client").await, Ok(true));
    server.cli(&["config", "set", "maxmemory-policy", "noeviction"]);
    server.cli(&["config", "set", "maxmemory", "1"]);
    assert_outage(&store, "OOM").await;
    server.cli(&["config", "set", "maxmemory", "0"]);
    assert_recovers(&store).await;
}

#[tokio::test]
async fn readonly_replica_and_masterdown_are_outages() {
    let (Some(master), Some(replica)) = (RedisServer::start(), RedisServer::start()) else {
        return;
    };
    let store = store(&replica.url()).await;
    assert_eq!(decide(&store, "client").await, Ok(true));
    // What a failover does to the old master: it becomes a replica.
    let port = master.port.to_string();
    replica.cli(&["replicaof", "127.0.0.1", &port]);
    assert_outage(&store, "READONLY").await;
    replica.cli(&["replicaof", "no", "one"]);
    assert_recovers(&store).await;

    // A replica whose master is gone and that must not serve stale data.
    replica.cli(&["config", "set", "replica-serve-stale-data", "no"]);
    let dead = free_port().to_string();
    replica.cli(&["replicaof", "127.0.0.1", &dead]);
    assert_outage(&store, "MASTERDOWN").await;
    replica.cli(&["replicaof", "no", "one"]);
    assert_recovers(&store).await;
}

#[tokio::test]
async fn busy_with_a_script_is_an_outage() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = store(&server.url()).await;
    assert_eq!(decide(&store, "client").await, Ok(true));
    server.cli(&["config", "set", "busy-reply-threshold", "100"]);
    let port = server.port;
    let busy = std::thread::spawn(move || cli(port, &["eval", "while true do end", "0"]));
    assert_outage(&store, "BUSY").await;
    eventually("the script is killed", || async {
        server.cli(&["script", "kill"]).contains("OK")
    })
    .await;
    busy.join().unwrap();
    assert_recovers(&store).await;
}

#[tokio::test]
async fn loading_a_dataset_is_an_outage() {
    let Some(server) = RedisServer::start_with(&["--enable-debug-command", "yes"]) else {
        return;
    };
    let store = store(&server.url()).await;
    assert_eq!(decide(&store, "client").await, Ok(true));
    // 100,000 keys at 50 µs each: about 5 s of loading, answering LOADING meanwhile.
    server.cli(&["debug", "populate", "100000"]);
    server.cli(&["config", "set", "key-load-delay", "50"]);
    server.cli(&[
        "config",
        "set",
        "loading-process-events-interval-bytes",
        "1024",
    ]);
    let port = server.port;
    let reload = std::thread::spawn(move || cli(port, &["debug", "reload"]));
    assert_outage(&store, "LOADING").await;
    reload.join().unwrap();
    assert_recovers(&store).await;
}

/// A server that cannot persist (its snapshot directory is gone, a full or read-only disk)
/// refuses writes with MISCONF while `stop-writes-on-bgsave-error` is on.
#[tokio::test]
async fn misconf_after_a_failed_snapshot_is_an_outage() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = store(&server.url()).await;
    assert_eq!(decide(&store, "client").await, Ok(true));
    // MISCONF needs save points; the kit starts servers without any.
    server.cli(&["config", "set", "save", "3600 1"]);
    std::fs::remove_dir_all(server.dir()).unwrap();
    server.cli(&["bgsave"]);
    assert_outage(&store, "MISCONF").await;
    server.cli(&["config", "set", "stop-writes-on-bgsave-error", "no"]);
    assert_recovers(&store).await;
}

/// A master told to write only with a replica in sync (`min-replicas-to-write`) and without
/// one refuses writes with NOREPLICAS.
#[tokio::test]
async fn noreplicas_is_an_outage() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = store(&server.url()).await;
    assert_eq!(decide(&store, "client").await, Ok(true));
    server.cli(&["config", "set", "min-replicas-to-write", "1"]);
    assert_outage(&store, "NOREPLICAS").await;
    server.cli(&["config", "set", "min-replicas-to-write", "0"]);
    assert_recovers(&store).await;
}

/// A Redis Cluster that lost the coverage of a slot (a dead master without a replica, here
/// a slot taken away with `CLUSTER DELSLOTS`) answers CLUSTERDOWN to every command while
/// `cluster-require-full-coverage` is on. The slot is taken away in every node's view: a
/// `DELSLOTS` on its owner alone leaves the other nodes serving (they keep the old owner in
/// their table), and the health probe, whose key may live on one of them, then rightly finds
/// Redis usable and closes the circuit again — a partial outage, which decisions still meet
/// as outages (`on_store_error`) slot by slot.
#[tokio::test]
async fn clusterdown_is_an_outage() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let mut config = RedisConfig::cluster(cluster.seeds());
    config.key_prefix = "replies".into();
    config.timeout = Duration::from_millis(1500);
    let store = RedisStore::connect(config).await.unwrap();
    assert_eq!(decide(&store, "client").await, Ok(true));
    // A slot far from the client's: every node then reports cluster_state:fail.
    let node = &cluster.nodes[0];
    let nodes = node.cli(&["cluster", "nodes"]);
    let myself = nodes.lines().find(|l| l.contains("myself")).unwrap();
    // The first slot of the node's first range (`0-5460`).
    let slot = myself
        .split_whitespace()
        .nth(8)
        .and_then(|range| range.split('-').next())
        .unwrap_or_else(|| panic!("no slots in {myself}"))
        .to_owned();
    for node in &cluster.nodes {
        node.cli(&["cluster", "delslots", &slot]);
    }
    assert_outage(&store, "CLUSTERDOWN").await;
    node.cli(&["cluster", "addslots", &slot]);
    assert_recovers(&store).await;
}

/// A key holding another type (an operator's `SET`, an old version's state) is replaced by
/// the next decision instead of failing every request on it forever.
#[tokio::test]
async fn a_key_of_the_wrong_type_is_replaced() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = store(&server.url()).await;
    let policies = policies();
    for (i, policy) in policies.iter().enumerate() {
        let key = store.state_key(policy, "client");
        // A hash where a string is expected, a string where a list is expected.
        if i == 0 {
            server.cli(&["hset", &key, "f", "v"]);
        } else {
            server.cli(&["set", &key, "junk"]);
        }
    }
    for expected_remaining in [999, 998] {
        let verdict = store
            .check(CheckRequest::new(&policies, "client", 1))
            .await
            .unwrap();
        assert!(verdict.allowed);
        for d in &verdict.decisions {
            assert_eq!(
                d.decision.remaining,
                expected_remaining,
                "{}",
                d.policy.name()
            );
        }
    }
    for policy in &policies {
        let key = store.state_key(policy, "client");
        let ttl: i64 = server.cli(&["pttl", &key]).trim().parse().unwrap();
        assert!(ttl > 0, "{key} has no TTL");
    }
}
