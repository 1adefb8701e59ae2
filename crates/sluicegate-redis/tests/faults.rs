//! Redis dying or hanging under load: decisions keep coming back (as errors, so the caller
//! applies `on_store_error`), none slower than the configured timeout allows, no task hangs
//! or panics, an open circuit fails without waiting, and once Redis is back decisions use
//! it again. The timeout is long (1 s) so that the bounds, which are about time because the
//! contract is, stay wide compared with a loaded machine's scheduling delays.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sluicegate_core::{AlgorithmKind, CheckRequest, OnStoreError, Policy, Store, Verdict};
use sluicegate_redis::{RedisConfig, RedisStore};
use sluicegate_testkit::{RedisServer, eventually};

const TIMEOUT: Duration = Duration::from_secs(1);
/// A decision may take the timeout plus this much: wide, a loaded machine is slow.
const SLACK: Duration = Duration::from_secs(1);
/// Recovery is the next health probe after Redis is back; this leaves many probes' room.
const RECOVERY: Duration = Duration::from_secs(5);

struct Load {
    stop: Arc<AtomicBool>,
    decided: Arc<AtomicU64>,
    slowest_us: Arc<AtomicU64>,
    errors: Arc<AtomicU64>,
    handles: Vec<tokio::task::JoinHandle<()>>,
}

fn policies() -> [Arc<Policy>; 2] {
    let open = Policy::builder(
        "open",
        AlgorithmKind::TokenBucket,
        1_000_000,
        Duration::from_secs(1),
    )
    .on_store_error(OnStoreError::Allow)
    .build()
    .unwrap();
    let closed = Policy::builder(
        "closed",
        AlgorithmKind::Gcra,
        1_000_000,
        Duration::from_secs(1),
    )
    .on_store_error(OnStoreError::Deny)
    .build()
    .unwrap();
    [Arc::new(open), Arc::new(closed)]
}

/// 16 tasks deciding in a loop, recording the slowest call.
fn load(store: &Arc<RedisStore>) -> Load {
    let stop = Arc::new(AtomicBool::new(false));
    let decided = Arc::new(AtomicU64::new(0));
    let slowest_us = Arc::new(AtomicU64::new(0));
    let errors = Arc::new(AtomicU64::new(0));
    let handles = (0..16)
        .map(|t| {
            let (store, stop, decided, slowest_us, errors) = (
                Arc::clone(store),
                Arc::clone(&stop),
                Arc::clone(&decided),
                Arc::clone(&slowest_us),
                Arc::clone(&errors),
            );
            tokio::spawn(async move {
                let policies = policies();
                let key = format!("client-{t}");
                while !stop.load(Ordering::Relaxed) {
                    let started = Instant::now();
                    let result = store.check(CheckRequest::new(&policies, &key, 1)).await;
                    let took = started.elapsed();
                    slowest_us.fetch_max(took.as_micros() as u64, Ordering::Relaxed);
                    match result {
                        Ok(verdict) => {
                            assert!(verdict.allowed);
                            decided.fetch_add(1, Ordering::Relaxed);
                        }
                        Err(e) => {
                            assert!(!e.is_bad_request(), "{e}");
                            // What a caller does: fail open or closed per policy. One policy
                            // fails closed, so the request is denied while Redis is gone.
                            assert!(!Verdict::store_failed(&policies).allowed);
                            errors.fetch_add(1, Ordering::Relaxed);
                        }
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            })
        })
        .collect();
    Load {
        stop,
        decided,
        slowest_us,
        errors,
        handles,
    }
}

impl Load {
    /// Waits until Redis has decided for the load at least once.
    async fn running(&self) {
        eventually("the load gets decisions from Redis", || async {
            self.decided.load(Ordering::Relaxed) > 0
        })
        .await;
    }

    /// Waits until `n` more decisions have come back as errors: they keep coming, so
    /// nothing waits for a Redis that does not answer.
    async fn errors_keep_coming(&self, n: u64) {
        let before = self.errors.load(Ordering::Relaxed);
        eventually("decisions keep coming, as errors", || async {
            self.errors.load(Ordering::Relaxed) > before + n
        })
        .await;
    }

    fn reset_slowest(&self) {
        self.slowest_us.store(0, Ordering::Relaxed);
    }

    fn slowest(&self) -> Duration {
        Duration::from_micros(self.slowest_us.load(Ordering::Relaxed))
    }

    async fn finish(self) {
        self.stop.store(true, Ordering::Relaxed);
        for handle in self.handles {
            tokio::time::timeout(Duration::from_secs(5), handle)
                .await
                .expect("a decision task hung")
                .expect("a decision task panicked");
        }
    }
}

async fn fault_store(server: &RedisServer) -> Arc<RedisStore> {
    let mut config = RedisConfig::standalone(server.url());
    config.key_prefix = "faults".into();
    config.timeout = TIMEOUT;
    Arc::new(RedisStore::connect(config).await.unwrap())
}

/// Polls until a decision succeeds; returns how long that took.
async fn until_redis_decides(store: &RedisStore) -> Duration {
    let started = Instant::now();
    let policies = policies();
    eventually("Redis is used again", || async {
        store
            .check(CheckRequest::new(&policies, "probe", 1))
            .await
            .is_ok()
    })
    .await;
    started.elapsed()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_redis_fails_fast_and_recovers_within_a_second() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    let store = fault_store(&server).await;
    let load = load(&store);
    load.running().await;

    server.kill();
    load.reset_slowest();
    load.errors_keep_coming(100).await;
    assert!(
        load.slowest() <= TIMEOUT + SLACK,
        "slowest decision while down: {:?}",
        load.slowest()
    );
    assert!(!store.is_connected());

    server.restart();
    let back = until_redis_decides(&store).await;
    assert!(back < RECOVERY, "Redis used again after {back:?}");
    load.finish().await;
    store.ping().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hung_redis_times_out_then_the_circuit_fails_fast() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let store = fault_store(&server).await;
    let load = load(&store);
    load.running().await;

    server.signal("STOP");
    load.reset_slowest();
    load.errors_keep_coming(100).await;
    assert!(
        load.slowest() <= TIMEOUT + SLACK,
        "slowest decision while hung: {:?}",
        load.slowest()
    );
    // The circuit is open: no more waiting for the timeout.
    let started = Instant::now();
    let policies = policies();
    assert!(
        store
            .check(CheckRequest::new(&policies, "k", 1))
            .await
            .is_err()
    );
    // Without the circuit this would wait the whole timeout; half of it is a wide margin
    // for a call that does not touch the network.
    let took = started.elapsed();
    assert!(
        took < TIMEOUT / 2,
        "an open circuit fails at once, not after {took:?}"
    );

    server.signal("CONT");
    let back = until_redis_decides(&store).await;
    assert!(back < RECOVERY, "Redis used again after {back:?}");
    load.finish().await;
}

#[tokio::test]
async fn starts_while_redis_is_down_and_uses_it_once_up() {
    let Some(mut server) = RedisServer::start() else {
        return;
    };
    server.kill();
    let store = fault_store(&server).await;
    assert!(store.ping().await.is_err(), "not ready while Redis is down");
    server.restart();
    let back = until_redis_decides(&store).await;
    assert!(back < RECOVERY, "Redis used after {back:?}");
    store.ping().await.unwrap();
}
