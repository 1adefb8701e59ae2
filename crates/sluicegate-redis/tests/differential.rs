//! The Redis scripts against the core algorithms: the same random sequences of requests,
//! at the same (test-driven) times, must get identical verdicts from the Redis store and
//! the in-memory store, for every algorithm and mode, single and multi-policy, including
//! refunds, settles of reservations (reserve then settle, also under per-key overrides set,
//! changed and removed between the reservation and its settle), resets, zero-cost reads and
//! numbers large enough to need the exact multiply-divide path.

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluicegate_core::{
    AlgorithmKind, CheckRequest, KeyedCheck, ManualClock, MemoryStore, Mode, Override, Policy,
    Settled, Settlement, Store, Verdict,
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

/// A random override of `policy` that both stores accept (its numbers in the exact range).
fn random_override(rng: &mut StdRng, policy: &Policy) -> Option<Override> {
    (0..20).find_map(|_| {
        let other = random_policy(rng, "o", policy.algorithm());
        // A sliding log keeps its period: the stores drop expired entries at different
        // moments, which only a longer period could see (as in `changed_numbers_…`).
        let log = policy.algorithm() == AlgorithmKind::SlidingLog;
        let value = Override {
            limit: other.limit(),
            burst: policy.algorithm().uses_burst().then_some(other.burst()),
            period: (policy.calendar().is_none() && !log).then_some(other.period()),
        };
        let overridden = policy.with_override(&value).ok()?;
        sluicegate_redis::check_policy(&overridden)
            .is_ok()
            .then_some(value)
    })
}

/// Sets (or, with `None`, removes) `key`'s override of `policy` in both stores; returns the
/// capacity the key has under it.
async fn set_override(
    memory: &MemoryStore<ManualClock>,
    redis: &RedisStore,
    policy: &Arc<Policy>,
    key: &str,
    value: Option<Override>,
) -> u64 {
    memory.set_override(policy, key, value).await.unwrap();
    redis.set_override(policy, key, value).await.unwrap();
    assert_eq!(redis.get_override(policy, key).await.unwrap(), value);
    value.map_or(policy.capacity(), |v| {
        policy.with_override(&v).unwrap().capacity()
    })
}

async fn run(redis: &RedisStore, seed: u64, policies: Vec<Arc<Policy>>, steps: usize) {
    run_with(redis, seed, policies, steps, false).await;
}

/// `steps` random operations decided by both stores; with `overrides`, the first key has
/// per-key numbers on every policy from the start, changed or removed along the way.
async fn run_with(
    redis: &RedisStore,
    seed: u64,
    policies: Vec<Arc<Policy>>,
    steps: usize,
    overrides: bool,
) {
    let mut rng = StdRng::seed_from_u64(seed);
    let clock = ManualClock::new(START + rng.random_range(0..86_400_000_000));
    let memory = MemoryStore::with_clock(1_000, clock.clone());
    let keys = [format!("client-{seed}"), format!("other-{seed}")];
    let mut capacity = policies.iter().map(|p| p.capacity()).min().unwrap();
    if overrides {
        for policy in &policies {
            let value = random_override(&mut rng, policy);
            let cap = set_override(&memory, redis, policy, &keys[0], value).await;
            // Costs stay within every capacity the keys ever have, so both stores decide.
            capacity = capacity.min(cap);
        }
    }
    let shortest = policies.iter().map(|p| p.period()).min().unwrap();
    let mut reserved: Vec<Reserved> = Vec::new();
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
            3..=6 if !reserved.is_empty() => {
                let r = reserved.swap_remove(rng.random_range(0..reserved.len()));
                let real = match rng.random_range(0..4) {
                    0 => 0,
                    1 => r.estimate + rng.random_range(0..=capacity * 3),
                    _ => rng.random_range(0..=capacity),
                };
                let id = format!("{seed}-{step}");
                let settlement = Settlement {
                    policies: &r.policies,
                    remaining: &r.remaining,
                    key: &r.key,
                    estimate: r.estimate,
                    real,
                    admitted_at: r.at,
                    expires_at: now + 1_000_000_000,
                    id: &id,
                };
                let context = format!("{context} settle {r:?} real {real}");
                assert_eq!(
                    memory.settle(settlement).await,
                    Ok(Settled::Done),
                    "{context}"
                );
                assert_eq!(
                    redis.settle_at(settlement, now).await,
                    Ok(Settled::Done),
                    "{context}"
                );
                // Settled once: a replay changes nothing, in both stores.
                assert_eq!(
                    memory.settle(settlement).await,
                    Ok(Settled::Replayed),
                    "{context}"
                );
                assert_eq!(
                    redis.settle_at(settlement, now).await,
                    Ok(Settled::Replayed),
                    "{context}"
                );
            }
            7..=8 if overrides => {
                // Set, change or remove the first key's override, reservations outstanding.
                let p = &chosen[rng.random_range(0..chosen.len())];
                let value = match rng.random_bool(0.3) {
                    true => None,
                    false => random_override(&mut rng, p),
                };
                let cap = set_override(&memory, redis, p, &keys[0], value).await;
                capacity = capacity.min(cap);
            }
            _ => {
                let request = CheckRequest::new(chosen, key, cost);
                let expected = memory.check(request).await.unwrap();
                let got = redis.check_at(request, now).await.unwrap();
                assert_eq!(got, expected, "{context}");
                if let Some(r) = Reserved::of(&expected, key, cost) {
                    reserved.push(r);
                }
            }
        }
    }
}

/// An admitted decision to settle later: what a reservation carries.
#[derive(Debug)]
struct Reserved {
    policies: Vec<Arc<Policy>>,
    remaining: Vec<u64>,
    key: String,
    estimate: u64,
    at: u64,
}

impl Reserved {
    /// The policies `verdict` consumed from (concurrency aside), if any.
    fn of(verdict: &Verdict, key: &str, cost: u64) -> Option<Reserved> {
        let (policies, remaining): (Vec<_>, Vec<_>) = verdict
            .decisions
            .iter()
            .enumerate()
            .filter(|(i, d)| {
                verdict.consumes(*i) && d.policy.algorithm() != AlgorithmKind::Concurrency
            })
            .map(|(_, d)| (Arc::clone(&d.policy), d.decision.remaining))
            .unzip();
        (cost > 0 && !policies.is_empty()).then(|| Reserved {
            policies,
            remaining,
            key: key.to_owned(),
            estimate: cost,
            at: verdict.at,
        })
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

/// Reserve then settle where the key has its own numbers (`[[overrides]]`, `PUT
/// /v1/overrides`): both stores settle against the key's numbers, also when the override
/// is set, changed or removed between a reservation and its settle.
#[tokio::test]
async fn settles_under_overrides_decide_like_the_core() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let redis = redis::store(&server.url(), "diff-settle-over").await;
    for (k, kind) in AlgorithmKind::ALL.into_iter().enumerate() {
        for s in 0..10u64 {
            let seed = 70_000 + (k as u64) * 100 + s;
            let mut rng = StdRng::seed_from_u64(seed ^ 0x0be5);
            let policy = random_policy(&mut rng, "p", kind);
            run_with(&redis, seed, vec![policy], 150, true).await;
        }
    }
    for seed in 0..12u64 {
        let mut rng = StdRng::seed_from_u64(seed ^ 0x0be6);
        let policies = (0..3)
            .map(|i| {
                let kind = AlgorithmKind::ALL[rng.random_range(0..6)];
                random_policy(&mut rng, &format!("p{i}"), kind)
            })
            .collect();
        run_with(&redis, 80_000 + seed, policies, 150, true).await;
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

/// `steps` random requests of one key under `policy`, decided by both stores.
async fn steps(
    memory: &MemoryStore<ManualClock>,
    redis: &RedisStore,
    rng: &mut StdRng,
    policy: &Arc<Policy>,
    key: &str,
    steps: usize,
    context: &str,
) {
    let policies = [Arc::clone(policy)];
    for step in 0..steps {
        memory
            .clock()
            .advance(Duration::from_micros(time_step(rng, policy.period())));
        let now = clock_now(memory.clock());
        let cost = match rng.random_range(0..6) {
            0 => 0,
            1 => rng.random_range(0..=policy.capacity()),
            _ => 1.min(policy.capacity()),
        };
        let request = CheckRequest::new(&policies, key, cost);
        let expected = memory.check(request).await.unwrap();
        let got = redis.check_at(request, now).await.unwrap();
        assert_eq!(got, expected, "{context} step {step} cost {cost} now {now}");
    }
}

/// A policy's numbers changed midway (a reload), and a key given its own numbers (an
/// override, set and later removed): both stores carry the key's state over alike, so a
/// change of limit keeps what the key has used the same way on memory and on Redis.
#[tokio::test]
async fn changed_numbers_carry_over_like_the_core() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let redis = redis::store(&server.url(), "diff-carry").await;
    for (k, kind) in AlgorithmKind::ALL.into_iter().enumerate() {
        for s in 0..30u64 {
            let seed = 50_000 + (k as u64) * 100 + s;
            let mut rng = StdRng::seed_from_u64(seed);
            let first = random_policy(&mut rng, "p", kind);
            let mut second = random_policy(&mut rng, "p", kind);
            // A sliding log re-reads the entries each store still holds under a new period;
            // the stores drop expired entries at different moments (memory when it next
            // consumes, Redis when it next loads), which only a longer period could see.
            while kind == AlgorithmKind::SlidingLog && second.period() != first.period() {
                second = random_policy(&mut rng, "p", kind);
            }
            let clock = ManualClock::new(START + rng.random_range(0..86_400_000_000));
            let memory = MemoryStore::with_clock(1_000, clock);
            let key = format!("carry-{seed}");
            let context = format!("seed {seed}: {first:?} then {second:?}");
            steps(&memory, &redis, &mut rng, &first, &key, 30, &context).await;
            if rng.random_bool(0.5) {
                // A reload: the same policy with new numbers.
                memory.retain_policies(std::slice::from_ref(&second));
                steps(&memory, &redis, &mut rng, &second, &key, 30, &context).await;
                continue;
            }
            let value = Override {
                limit: second.limit(),
                burst: kind.uses_burst().then_some(second.burst()),
                period: first.calendar().is_none().then_some(second.period()),
            };
            let fits = first
                .with_override(&value)
                .is_ok_and(|p| sluicegate_redis::check_policy(&p).is_ok());
            if !fits {
                continue;
            }
            memory
                .set_override(&first, &key, Some(value))
                .await
                .unwrap();
            redis.set_override(&first, &key, Some(value)).await.unwrap();
            assert_eq!(redis.get_override(&first, &key).await.unwrap(), Some(value));
            steps(&memory, &redis, &mut rng, &first, &key, 30, &context).await;
            memory.set_override(&first, &key, None).await.unwrap();
            redis.set_override(&first, &key, None).await.unwrap();
            steps(&memory, &redis, &mut rng, &first, &key, 30, &context).await;
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

/// A period so long (about 115 days) that no window boundary or refill falls within a test
/// run, so the Redis server's clock and the in-memory store's wall clock, though not the
/// same clock, give the same verdicts.
const LONG: Duration = Duration::from_secs(10_000_000);

/// The production entry point: `Store::check` (Redis server's `TIME`, calls coalesced into
/// batches when they overlap), `check_batch` and `check_keyed`, for every algorithm and
/// mode, against the in-memory store on the wall clock. Sequential requests must agree on
/// every number but the times; concurrent ones on how many are admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_production_path_decides_like_the_core_for_every_algorithm() {
    let Some(server) = RedisServer::start() else {
        return;
    };
    let redis = Arc::new(redis::store(&server.url(), "prod").await);
    for kind in AlgorithmKind::ALL {
        for mode in [Mode::Reject, Mode::Shadow, Mode::Delay] {
            if mode == Mode::Delay && !kind.supports_delay() {
                continue;
            }
            let name = format!("{}-{}", kind.name(), mode.name());
            let policy = Arc::new(
                Policy::builder(&name, kind, 5, LONG)
                    .mode(mode)
                    .max_delay(Duration::ZERO)
                    .build()
                    .unwrap(),
            );
            production_agrees(&redis, policy).await;
        }
    }
}

async fn production_agrees(redis: &Arc<RedisStore>, policy: Arc<Policy>) {
    let memory = MemoryStore::new(1_000);
    let policies = [Arc::clone(&policy)];
    let what = policy.name().to_owned();
    // Sequential: costs 2, 2, 1 (the last one admitted exactly), then 1 denied, a read.
    for cost in [2, 2, 1, 1, 0] {
        let request = CheckRequest::new(&policies, "seq", cost);
        let got = redis.check(request).await.unwrap();
        let want = memory.check(request).await.unwrap();
        assert_eq!(got.allowed, want.allowed, "{what} cost {cost}");
        let (g, w) = (&got.decisions[0], &want.decisions[0]);
        assert_eq!(g.decision.allowed, w.decision.allowed, "{what} cost {cost}");
        assert_eq!(
            g.decision.remaining, w.decision.remaining,
            "{what} cost {cost}"
        );
        assert_eq!(g.outcome, w.outcome, "{what} cost {cost}");
        assert_eq!(
            g.decision.retry_after.is_some(),
            w.decision.retry_after.is_some(),
            "{what} cost {cost}"
        );
        // The sliding window may need the rest of this window and all of the next.
        assert!(g.decision.reset_after <= 2 * policy.period(), "{what}");
    }
    // Concurrent: 12 overlapping calls (coalesced into batches) on a fresh key; exactly
    // as many admitted as the in-memory store admits, which is the limit when enforcing.
    let calls = (0..12).map(|_| {
        let redis = Arc::clone(redis);
        let policies = policies.clone();
        tokio::spawn(async move {
            let request = CheckRequest::new(&policies, "burst", 1);
            redis.check(request).await.unwrap().decisions[0]
                .decision
                .allowed
        })
    });
    let mut admitted = 0;
    for call in calls.collect::<Vec<_>>() {
        admitted += usize::from(call.await.unwrap());
    }
    let mut want = 0;
    for _ in 0..12 {
        let request = CheckRequest::new(&policies, "burst", 1);
        want += usize::from(
            memory.check(request).await.unwrap().decisions[0]
                .decision
                .allowed,
        );
    }
    assert_eq!(admitted, want, "{what}: concurrent admissions");
    if policy.mode() != Mode::Delay {
        assert_eq!(want, 5, "{what}");
    }
    // A batch and a keyed check, two keys in one step.
    let batch = [
        CheckRequest::new(&policies, "b1", 3),
        CheckRequest::new(&policies, "b1", 3),
        CheckRequest::new(&policies, "b2", 5),
    ];
    let got: Vec<_> = redis
        .check_batch(&batch)
        .await
        .into_iter()
        .map(Result::unwrap)
        .collect();
    for (request, got) in batch.iter().zip(got) {
        let want = memory.check(*request).await.unwrap();
        assert_eq!(got.allowed, want.allowed, "{what} batch");
        assert_eq!(
            got.decisions[0].decision.remaining, want.decisions[0].decision.remaining,
            "{what} batch"
        );
    }
    let items = [
        KeyedCheck::new(&policy, "k1", 4),
        KeyedCheck::new(&policy, "k2", 4),
    ];
    for _ in 0..2 {
        let got = redis.check_keyed(&items).await.unwrap();
        let want = memory.check_keyed(&items).await.unwrap();
        assert_eq!(got.allowed, want.allowed, "{what} keyed");
        let remaining = |v: &sluicegate_core::Verdict| -> Vec<u64> {
            v.decisions.iter().map(|d| d.decision.remaining).collect()
        };
        assert_eq!(remaining(&got), remaining(&want), "{what} keyed");
    }
}
