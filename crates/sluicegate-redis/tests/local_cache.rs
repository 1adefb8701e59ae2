//! The local over-limit cache against a real Redis: repeated denials skip Redis, and the
//! cache never admits what Redis would deny.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluicegate_core::{AlgorithmKind, CheckRequest, Mode, Store};
use sluicegate_redis::{RedisConfig, RedisStore};
use support::{RedisServer, policy, policy_with};

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
    let plain = support::store(&server.url(), "cache").await;

    let p = [policy(
        "p",
        AlgorithmKind::FixedWindow,
        2,
        Duration::from_millis(700),
    )];
    let request = CheckRequest::new(&p, "k", 1);
    let denied = loop {
        let verdict = cached.check(request).await.unwrap();
        if !verdict.allowed {
            break verdict;
        }
    };
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
    // A read (cost 0) always asks Redis.
    assert!(
        cached
            .check(CheckRequest::new(&p, "k", 0))
            .await
            .unwrap()
            .allowed
    );
    assert_eq!(script_calls(&server), calls + 1);

    // Once the window ends, Redis admits again and so does the cache: it only denied until
    // retry_after. Every admission in the meantime came from Redis itself.
    let started = Instant::now();
    loop {
        let verdict = cached.check(request).await.unwrap();
        if verdict.allowed {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "cache kept denying"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Another instance sees the same state: the one admission above was Redis's.
    let read = plain.check(CheckRequest::new(&p, "k", 0)).await.unwrap();
    assert!(read.decisions[0].decision.remaining <= 1);

    // A reset through the caching store forgets its cached denials.
    while cached.check(request).await.unwrap().allowed {}
    cached.reset(&p[0], "k").await.unwrap();
    assert!(cached.check(request).await.unwrap().allowed);
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
    let shadow = [policy_with(
        "s",
        AlgorithmKind::TokenBucket,
        1,
        hour,
        1,
        Mode::Shadow,
        hour,
    )];
    let delay = [policy_with(
        "d",
        AlgorithmKind::Gcra,
        1,
        hour,
        1,
        Mode::Delay,
        Duration::from_millis(1),
    )];
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
