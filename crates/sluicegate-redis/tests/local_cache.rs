//! The local over-limit cache against a real Redis: repeated denials skip Redis, and the
//! cache never admits what Redis would deny.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluicegate_core::{AlgorithmKind, CheckRequest, Mode, Store};
use sluicegate_redis::{RedisConfig, RedisStore};
use sluicegate_testkit::{RedisServer, policy_with, redis, shared_policy};

fn script_calls(server: &RedisServer) -> u64 {
    server
        .cli(&["info", "commandstats"])
        .lines()
        .find(|l| l.starts_with("cmdstat_evalsha:"))
        .and_then(|l| l.split("calls=").nth(1)?.split(',').next()?.parse().ok())
        .unwrap_or(0)
}

#[tokio::test]
async fn denials_are_repeated_locally_until_retry_after() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let mut config = RedisConfig::standalone(server.url());
    config.key_prefix = "cache".into();
    config.local_cache = true;
    config.timeout = Duration::from_secs(2);
    let cached = RedisStore::connect(config).await.unwrap();
    let plain = redis::store(&server.url(), "cache").await;

    // A bucket refilling once every half hour: its denials outlast the test.
    let p = [shared_policy(
        "p",
        AlgorithmKind::TokenBucket,
        2,
        Duration::from_secs(3600),
    )];
    let request = CheckRequest::new(&p, "k", 1);
    assert!(cached.check(request).await.unwrap().allowed);
    assert!(cached.check(request).await.unwrap().allowed);
    let denied = cached.check(request).await.unwrap();
    assert!(!denied.allowed);
    let calls = script_calls(&server);
    for _ in 0..20 {
        let again = cached.check(request).await.unwrap();
        assert!(!again.allowed);
        assert!(again.retry_after().unwrap() <= denied.retry_after().unwrap());
    }
    assert_eq!(
        script_calls(&server),
        calls,
        "cached denials made no round trip"
    );
    // A read (cost 0) always asks Redis, and sees the same state as another instance.
    let read = cached.check(CheckRequest::new(&p, "k", 0)).await.unwrap();
    assert_eq!(read.decisions[0].decision.remaining, 0);
    assert_eq!(script_calls(&server), calls + 1);
    let elsewhere = plain.check(request).await.unwrap();
    assert!(!elsewhere.allowed, "Redis itself denies too");

    // A reset through the caching store forgets its cached denials.
    cached.reset(&p[0], "k").await.unwrap();
    assert!(cached.check(request).await.unwrap().allowed);

    // Once retry_after has passed, the cache lets Redis decide again (and Redis admits).
    let short = [shared_policy(
        "short",
        AlgorithmKind::TokenBucket,
        2,
        Duration::from_millis(400),
    )];
    let request = CheckRequest::new(&short, "k", 1);
    while cached.check(request).await.unwrap().allowed {}
    let started = Instant::now();
    while !cached.check(request).await.unwrap().allowed {
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "cache kept denying"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn shadow_and_delay_denials_are_not_cached() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let mut config = RedisConfig::standalone(server.url());
    config.key_prefix = "cache2".into();
    config.local_cache = true;
    config.timeout = Duration::from_secs(2);
    let cached = RedisStore::connect(config).await.unwrap();
    let hour = Duration::from_secs(3600);
    let shadow = [Arc::new(policy_with(
        "s",
        AlgorithmKind::TokenBucket,
        1,
        hour,
        |b| b.burst(1).mode(Mode::Shadow).max_delay(hour),
    ))];
    let delay = [Arc::new(policy_with(
        "d",
        AlgorithmKind::Gcra,
        1,
        hour,
        |b| {
            b.burst(1)
                .mode(Mode::Delay)
                .max_delay(Duration::from_millis(1))
        },
    ))];
    for policies in [&shadow, &delay] {
        let request = CheckRequest::new(policies.as_slice(), "k", 1);
        cached.check(request).await.unwrap();
        cached.check(request).await.unwrap();
        let calls = script_calls(&server);
        cached.check(request).await.unwrap();
        assert_eq!(script_calls(&server), calls + 1, "{}", policies[0].name());
    }
    let _ = Arc::new(cached);
}
