//! The Redis scripts against the core algorithms: the same random sequences of requests,
//! at the same (test-driven) times, must get identical verdicts from the Redis store and
//! the in-memory store, for every algorithm and mode, single and multi-policy, including
//! refunds, resets, zero-cost reads and numbers large enough to need the exact
//! multiply-divide path.

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluicegate_core::{
    AlgorithmKind, CheckRequest, KeyedCheck, ManualClock, MemoryStore, Mode, Policy, Store,
};
use sluicegate_redis::RedisStore;
use sluicegate_testkit::{RedisServer, redis};

const START: u64 = 1_764_000_000_123_457; // late 2025, in µs, not aligned to anything

/// A random policy within the Redis store's exact range (others are refused by design,
/// see `refuses_policies_outside_the_exact_range`).
fn random_policy(rng: &mut StdRng, name: &str, kind: AlgorithmKind) -> Arc<Policy> {
    loop {
        let policy = any_policy(rng, name, kind);
        if sluicegate_redis::check_policy(&policy).is_ok() {
            return policy;
        }
    }
}

fn any_policy(rng: &mut StdRng, name: &str, kind: AlgorithmKind) -> Arc<Policy> {
    let big = rng.random_bool(0.15);
    let limit = if big {
        rng.random_range(100_000..=2_000_000)
    } else {
        rng.random_range(1..=8)
    };
    let period = match rng.random_range(0..6) {
        0 => Duration::from_micros(rng.random_range(1..=5_000)),
        1 => Duration::from_millis(rng.random_range(1..=300)),
        2 => Duration::from_secs(1),
        3 => Duration::from_secs(60),
        4 => Duration::from_secs(3_600),
        _ => Duration::from_secs(86_400),
    };
    let mut builder = Policy::builder(name, kind, limit, period);
    if kind == AlgorithmKind::FixedWindow && rng.random_bool(0.3) {
        use sluicegate_core::calendar::{Calendar, CalendarUnit};
        let units = [CalendarUnit::Day, CalendarUnit::Week, CalendarUnit::Month];
        let zones = [
            "UTC",
            "Europe/Berlin",
            "Australia/Lord_Howe",
            "America/Santiago",
        ];
        let unit = units[rng.random_range(0..units.len())];
        let zone = zones[rng.random_range(0..zones.len())];
        builder = builder.calendar(Calendar::new(unit, zone).unwrap());
    }
    if kind.uses_burst() {
        builder = builder.burst(rng.random_range(1..=limit.saturating_mul(2).min(limit + 16)));
    }
    let mode = match rng.random_range(0..4) {
        0 => Mode::Shadow,
        1 if kind.supports_delay() => Mode::Delay,
        _ => Mode::Reject,
    };
    let max_delay = period.mul_f64(rng.random_range(0.0..1.5));
    if rng.random_bool(0.3) {
        builder = builder.penalty(period.mul_f64(rng.random_range(0.1..3.0)));
    }
    Arc::new(builder.mode(mode).max_delay(max_delay).build().unwrap())
}

fn time_step(rng: &mut StdRng, period: u64) -> u64 {
    match rng.random_range(0..10) {
        0..=2 => 0,
        3..=5 => rng.random_range(1..=period.div_ceil(8).max(1)),
        6..=7 => rng.random_range(1..=period.max(1)),
        8 => rng.random_range(period..=period.saturating_mul(2).max(period + 1)),
        _ => rng.random_range(1..=1_000),
    }
}

async fn run(redis: &RedisStore, seed: u64, policies: Vec<Arc<Policy>>, steps: usize) {
    let mut rng = StdRng::seed_from_u64(seed);
    let clock = ManualClock::new(START + rng.random_range(0..86_400_000_000));
    let memory = MemoryStore::with_clock(1_000, clock.clone());
    let keys = [format!("client-{seed}"), format!("other-{seed}")];
    let capacity = policies.iter().map(|p| p.capacity()).min().unwrap();
    let shortest = policies.iter().map(|p| p.period()).min().unwrap();
    for step in 0..steps {
        clock.advance(Duration::from_micros(time_step(&mut rng, shortest)));
        let now = clock_now(&clock);
        let key = &keys[usize::from(rng.random_bool(0.2))];
        let n = rng.random_range(1..=policies.len());
        let chosen = &policies[..n];
        let cost = match rng.random_range(0..10) {
            0 => 0,
            1 => capacity,
            2 => rng.random_range(0..=capacity),
            _ => 1.min(capacity),
        };
        let context =
            format!("seed {seed} step {step} now {now} key {key} cost {cost} policies {chosen:?}");
        match rng.random_range(0..40) {
            0 => {
                let p = &chosen[0];
                memory.reset(p, key).await.unwrap();
                redis.reset(p, key).await.unwrap();
            }
            1..=2 => {
                memory.refund(chosen, key, cost).await.unwrap();
                redis.refund_at(chosen, key, cost, now).await.unwrap();
            }
            _ => {
                let request = CheckRequest::new(chosen, key, cost);
                let expected = memory.check(request).await.unwrap();
                let got = redis.check_at(request, now).await.unwrap();
                assert_eq!(got, expected, "{context}");
            }
        }
    }
}

fn clock_now(clock: &ManualClock) -> u64 {
    use sluicegate_core::Clock;
    clock.now()
}

#[tokio::test]
async fn every_algorithm_decides_like_the_core() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let redis = redis::store(&server.url(), "diff").await;
    for (k, kind) in AlgorithmKind::ALL.into_iter().enumerate() {
        for s in 0..12u64 {
            let seed = (k as u64) * 1_000 + s;
            let mut rng = StdRng::seed_from_u64(seed ^ 0x5eed);
            let policy = random_policy(&mut rng, "p", kind);
            run(&redis, seed, vec![policy], 150).await;
        }
    }
}

#[tokio::test]
async fn multi_policy_requests_decide_like_the_core() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let redis = redis::store(&server.url(), "diff-multi").await;
    for seed in 0..24u64 {
        let mut rng = StdRng::seed_from_u64(seed ^ 0xabcd);
        let policies = (0..3)
            .map(|i| {
                let kind = AlgorithmKind::ALL[rng.random_range(0..6)];
                random_policy(&mut rng, &format!("p{i}"), kind)
            })
            .collect();
        run(&redis, 10_000 + seed, policies, 150).await;
    }
}

#[tokio::test]
async fn keyed_checks_and_batches_decide_like_the_core() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let redis = redis::store(&server.url(), "diff-keyed").await;
    let clock = ManualClock::new(START);
    let memory = MemoryStore::with_clock(1_000, clock.clone());
    let mut rng = StdRng::seed_from_u64(7);
    let a = random_policy(&mut rng, "a", AlgorithmKind::TokenBucket);
    let b = random_policy(&mut rng, "b", AlgorithmKind::SlidingLog);
    for step in 0..200u64 {
        clock.advance(Duration::from_micros(time_step(
            &mut rng,
            a.period().min(b.period()),
        )));
        let now = clock_now(&clock);
        let (ka, kb) = (format!("a{}", step % 3), format!("b{}", step % 2));
        let items = [
            KeyedCheck::new(&a, &ka, rng.random_range(0..=a.capacity())),
            KeyedCheck::new(&b, &kb, rng.random_range(0..=b.capacity())),
        ];
        let expected = memory.check_keyed(&items).await.unwrap();
        let got = redis.check_keyed_at(&items, now).await.unwrap();
        assert_eq!(got, expected, "keyed step {step}");

        // A batch with repeated keys is decided in order, like consecutive checks.
        let pa = [Arc::clone(&a)];
        let pb = [Arc::clone(&b)];
        let batch = [
            CheckRequest::new(&pa, &ka, 1.min(a.capacity())),
            CheckRequest::new(&pb, &kb, 1),
            CheckRequest::new(&pa, &ka, 1.min(a.capacity())),
            CheckRequest::new(&pa, "", 1),
        ];
        let got = redis.check_batch_at(&batch, now).await;
        for (i, request) in batch.iter().enumerate() {
            match memory.check(*request).await {
                Ok(expected) => assert_eq!(got[i].as_ref().unwrap(), &expected, "batch {step}/{i}"),
                Err(e) => assert_eq!(got[i].as_ref().unwrap_err(), &e),
            }
        }
    }
}

#[tokio::test]
async fn refuses_policies_outside_the_exact_range() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let redis = redis::store(&server.url(), "diff-range").await;
    let odd = [Arc::new(
        Policy::builder(
            "odd",
            AlgorithmKind::TokenBucket,
            7,
            Duration::from_secs(86_400),
        )
        .burst(1 << 22)
        .build()
        .unwrap(),
    )];
    let err = redis
        .check(CheckRequest::new(&odd, "k", 1))
        .await
        .unwrap_err();
    assert!(err.to_string().contains("exact range"), "{err}");
}

/// previous × elapsed beyond 2^53: the sliding window's exact multiply-divide path.
#[tokio::test]
async fn sliding_window_beyond_double_precision() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let redis = redis::store(&server.url(), "diff-wide").await;
    let day = 86_400_000_000u64;
    let p = [Arc::new(
        Policy::builder(
            "wide",
            AlgorithmKind::SlidingWindow,
            3_000_000,
            Duration::from_secs(86_400),
        )
        .build()
        .unwrap(),
    )];
    let start = (START / day + 1) * day;
    let clock = ManualClock::new(start + 1);
    let memory = MemoryStore::with_clock(10, clock.clone());
    let mut rng = StdRng::seed_from_u64(99);
    for _ in 0..3 {
        let request = CheckRequest::new(&p, "k", 2_999_999);
        assert_eq!(
            redis.check_at(request, clock_now(&clock)).await.unwrap(),
            memory.check(request).await.unwrap()
        );
    }
    for _ in 0..300 {
        clock.advance(Duration::from_micros(rng.random_range(1..day / 50)));
        let cost = rng.random_range(0..=3_000_000);
        let request = CheckRequest::new(&p, "k", cost);
        let now = clock_now(&clock);
        assert_eq!(
            redis.check_at(request, now).await.unwrap(),
            memory.check(request).await.unwrap(),
            "now {now} cost {cost}"
        );
    }
}
