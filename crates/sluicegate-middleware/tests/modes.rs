//! Delay, shadow and store-error behaviour over real HTTP.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sluicegate_core::{
    AlgorithmKind, BoxFuture, CheckRequest, ManualClock, MemoryStore, Mode, OnStoreError, Outcome,
    Policy, Store, StoreError, Verdict,
};
use sluicegate_middleware::{RateLimiter, RejectionBody, RouteSpec};
use sluicegate_testkit::http::{serve_limited, serve_limited_on};
use sluicegate_testkit::{Counting, eventually, ok_count, policy_with, statuses};

/// GCRA, 10 a second (one every 100 ms), burst 1, waiting up to `max_delay`.
fn paced(max_delay: Duration) -> Policy {
    Policy::builder("paced", AlgorithmKind::Gcra, 10, Duration::from_secs(1))
        .burst(1)
        .mode(Mode::Delay)
        .max_delay(max_delay)
        .build()
        .unwrap()
}

/// A store whose clock stands still at 1 s: decisions depend only on what was consumed,
/// never on how fast this machine runs the test.
fn frozen_store() -> Arc<MemoryStore<ManualClock>> {
    Arc::new(MemoryStore::with_clock(1000, ManualClock::new(1_000_000)))
}

#[tokio::test]
async fn delay_mode_spaces_requests_by_the_emission_interval() {
    let observer = Arc::new(Counting::default());
    let limiter = RateLimiter::builder(frozen_store())
        .policy(paced(Duration::from_millis(450)))
        .route(RouteSpec::new("/", &["paced"]))
        .observer(observer.clone())
        .build()
        .unwrap();
    let (addr, calls) = serve_limited_on(limiter, "127.0.0.1:0").await;
    let url = format!("http://{addr}/work");
    let client = reqwest::Client::new();

    // Six at once: slots at 0, 100, 200, 300, 400 ms fit max_delay; the sixth (500 ms)
    // does not and is rejected.
    let started = Instant::now();
    let requests: Vec<_> = (0..6).map(|_| client.get(&url).send()).collect();
    let mut responses = futures_util::future::join_all(requests).await;
    responses.sort_by_key(|r| r.as_ref().unwrap().status().as_u16());
    let statuses: Vec<u16> = responses
        .iter()
        .map(|r| r.as_ref().unwrap().status().as_u16())
        .collect();
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429]);
    let retry = &responses[5].as_ref().unwrap().headers()["retry-after"];
    assert!(retry.to_str().unwrap().parse::<u64>().unwrap() >= 1);

    // The k-th handler call waited for its slot: k × 100 ms after the requests were sent,
    // at the earliest (a sleep never ends early, so this does not depend on the machine).
    let mut times = calls.lock().unwrap().clone();
    times.sort();
    assert_eq!(times.len(), 5);
    for (k, at) in times.iter().enumerate() {
        let waited = *at - started;
        let slot = Duration::from_millis(100) * k as u32;
        assert!(
            waited >= slot,
            "call {k} ran after {waited:?}, before its slot {slot:?}"
        );
    }
    assert_eq!(observer.count("paced", Outcome::Delayed), 4);
    assert_eq!(observer.count("paced", Outcome::Allowed), 1);
    assert_eq!(observer.count("paced", Outcome::Denied), 1);
}

#[tokio::test]
async fn a_request_over_max_delay_is_rejected_at_once_not_after_a_wait() {
    // One an hour, waiting up to 90 minutes: B waits an hour for its slot; C's would be
    // two hours away, so C is rejected, and its 429 must come while B is still waiting.
    let policy = Arc::new(
        Policy::builder("hourly", AlgorithmKind::Gcra, 1, Duration::from_secs(3600))
            .burst(1)
            .mode(Mode::Delay)
            .max_delay(Duration::from_secs(5400))
            .build()
            .unwrap(),
    );
    let store = frozen_store();
    let limiter = RateLimiter::builder(store.clone())
        .policy((*policy).clone())
        .route(RouteSpec::new("/", &["hourly"]))
        .build()
        .unwrap();
    let (addr, calls) = serve_limited_on(limiter, "127.0.0.1:0").await;
    let url = format!("http://{addr}/");
    let client = reqwest::Client::new();
    assert_eq!(client.get(&url).send().await.unwrap().status(), 200);
    let waiting = tokio::spawn(client.get(&url).send());
    let policies = [policy];
    eventually("B has reserved the slot an hour away", || async {
        let read = store.check_now(CheckRequest::new(&policies, "ip:127.0.0.1", 0));
        read.unwrap().decisions[0].decision.reset_after == 7_200_000_000
    })
    .await;
    let refused = client.get(&url).send().await.unwrap();
    assert_eq!(refused.status(), 429);
    let retry: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    // C's slot is two hours away; it fits max_delay (90 min) in 30 minutes.
    assert_eq!(retry, 1800);
    assert!(!waiting.is_finished(), "B waits for its slot an hour away");
    assert_eq!(calls.lock().unwrap().len(), 1, "only A reached the handler");
    waiting.abort();
}

#[tokio::test]
async fn a_dropped_waiting_request_gives_its_slot_back() {
    // One a second, burst 1, waits up to 1.5 s; the store's clock stands still, so only
    // the refund can move the key's state (time passing cannot hide a missing refund).
    let policy = Arc::new(
        Policy::builder("slow", AlgorithmKind::Gcra, 1, Duration::from_secs(1))
            .burst(1)
            .mode(Mode::Delay)
            .max_delay(Duration::from_millis(1500))
            .build()
            .unwrap(),
    );
    let store = Arc::new(MemoryStore::with_clock(1000, ManualClock::new(1_000_000)));
    let limiter = RateLimiter::builder(store.clone())
        .policy((*policy).clone())
        .route(RouteSpec::new("/", &["slow"]))
        .build()
        .unwrap();
    let base = serve_limited(limiter).await;
    let client = reqwest::Client::new();
    let policies = [policy];
    let reset_after = || {
        store
            .check_now(CheckRequest::new(&policies, "ip:127.0.0.1", 0))
            .unwrap()
            .decisions[0]
            .decision
            .reset_after
    };

    // A takes the burst; B reserves the slot at +1 s (the key is full again at +2 s), and
    // is dropped (its connection closed) while it waits.
    assert_eq!(client.get(&base).send().await.unwrap().status(), 200);
    assert_eq!(reset_after(), 1_000_000);
    let waiting = tokio::spawn(client.get(&base).send());
    eventually("B has reserved the next slot", || async {
        reset_after() == 2_000_000
    })
    .await;
    waiting.abort();
    assert!(waiting.await.unwrap_err().is_cancelled());

    // The refund gives B's slot back: exactly one emission interval again.
    eventually("the dropped request's slot is refunded", || async {
        reset_after() == 1_000_000
    })
    .await;
    // C gets B's slot (1 s away, within max_delay). Without the refund its slot would be
    // 2 s away, over max_delay, and it would be rejected.
    assert_eq!(client.get(&base).send().await.unwrap().status(), 200);
    assert_eq!(reset_after(), 2_000_000);
}

#[tokio::test]
async fn shadow_mode_never_rejects_and_counts_would_be_rejections() {
    let observer = Arc::new(Counting::default());
    let limiter = RateLimiter::builder(Arc::new(MemoryStore::new(1000)))
        .policy(policy_with(
            "dry",
            AlgorithmKind::TokenBucket,
            3,
            Duration::from_secs(60),
            |b| b.mode(Mode::Shadow),
        ))
        .route(RouteSpec::new("/", &["dry"]))
        .observer(observer.clone())
        .build()
        .unwrap();
    let base = serve_limited(limiter).await;
    let client = reqwest::Client::new();
    let got = statuses(&client, &format!("{base}/a"), 10).await;
    assert_eq!(ok_count(&got), 10);
    assert_eq!(observer.count("dry", Outcome::Allowed), 3);
    assert_eq!(observer.count("dry", Outcome::ShadowDenied), 7);
    // Shadow policies send no numbers a client might act on.
    let response = client.get(&base).send().await.unwrap();
    assert!(response.headers().get("ratelimit").is_none());
}

#[tokio::test]
async fn shadow_next_to_an_enforcing_policy_changes_nothing() {
    let observer = Arc::new(Counting::default());
    let limiter = RateLimiter::builder(Arc::new(MemoryStore::new(1000)))
        .policy(policy_with(
            "dry",
            AlgorithmKind::TokenBucket,
            1,
            Duration::from_secs(60),
            |b| b.mode(Mode::Shadow),
        ))
        .policy(policy_with(
            "real",
            AlgorithmKind::TokenBucket,
            4,
            Duration::from_secs(60),
            |b| b.mode(Mode::Reject),
        ))
        .route(RouteSpec::new("/", &["dry", "real"]))
        .observer(observer.clone())
        .build()
        .unwrap();
    let base = serve_limited(limiter).await;
    let got = statuses(&reqwest::Client::new(), &base, 6).await;
    assert_eq!(got, [200, 200, 200, 200, 429, 429]);
    assert_eq!(observer.count("dry", Outcome::ShadowDenied), 5);
    assert_eq!(observer.count("real", Outcome::Denied), 2);
}

/// A store that is always down (the Redis store's behaviour when Redis is unreachable).
struct DownStore;

impl Store for DownStore {
    fn check<'a>(&'a self, _: CheckRequest<'a>) -> BoxFuture<'a, Result<Verdict, StoreError>> {
        Box::pin(async { Err(StoreError::Unavailable("connection refused".into())) })
    }
    fn refund<'a>(
        &'a self,
        _: &'a [Arc<Policy>],
        _: &'a str,
        _: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Err(StoreError::Unavailable("connection refused".into())) })
    }
    fn reset<'a>(&'a self, _: &'a Policy, _: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Err(StoreError::Unavailable("connection refused".into())) })
    }
    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async { Err(StoreError::Unavailable("connection refused".into())) })
    }
    fn kind(&self) -> &'static str {
        "down"
    }
}

/// A store that never answers, for the limiter's own timeout.
struct HangingStore;

impl Store for HangingStore {
    fn check<'a>(&'a self, _: CheckRequest<'a>) -> BoxFuture<'a, Result<Verdict, StoreError>> {
        Box::pin(std::future::pending())
    }
    fn refund<'a>(
        &'a self,
        _: &'a [Arc<Policy>],
        _: &'a str,
        _: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(std::future::pending())
    }
    fn reset<'a>(&'a self, _: &'a Policy, _: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(std::future::pending())
    }
    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(std::future::pending())
    }
    fn kind(&self) -> &'static str {
        "hanging"
    }
}

fn failing(name: &str, on_store_error: OnStoreError) -> Policy {
    Policy::builder(name, AlgorithmKind::TokenBucket, 5, Duration::from_secs(60))
        .on_store_error(on_store_error)
        .build()
        .unwrap()
}

#[tokio::test]
async fn store_errors_follow_on_store_error() {
    let observer = Arc::new(Counting::default());
    let limiter = RateLimiter::builder(Arc::new(DownStore))
        .policy(failing("open", OnStoreError::Allow))
        .policy(failing("closed", OnStoreError::Deny))
        .route(RouteSpec::new("/open", &["open"]))
        .route(RouteSpec::new("/closed", &["closed"]))
        .route(RouteSpec::new("/both", &["open", "closed"]))
        .observer(observer.clone())
        .build()
        .unwrap();
    let base = serve_limited(limiter).await;
    let client = reqwest::Client::new();

    let open = client.get(format!("{base}/open")).send().await.unwrap();
    assert_eq!(open.status(), 200);
    assert!(open.headers().get("ratelimit-remaining").is_none());
    for path in ["closed", "both"] {
        let closed = client.get(format!("{base}/{path}")).send().await.unwrap();
        assert_eq!(closed.status(), 429);
        assert_eq!(closed.headers()["retry-after"], "1");
        let body: RejectionBody = closed.json().await.unwrap();
        assert_eq!(body.policy, "closed");
        assert_eq!(body.retry_after_seconds, 1);
    }
    assert_eq!(observer.count("open", Outcome::StoreError), 2);
    assert_eq!(observer.count("closed", Outcome::StoreError), 2);
}

#[tokio::test]
async fn a_store_timeout_applies_on_store_error() {
    let limiter = RateLimiter::builder(Arc::new(HangingStore))
        .policy(failing("open", OnStoreError::Allow))
        .policy(failing("closed", OnStoreError::Deny))
        .route(RouteSpec::new("/open", &["open"]))
        .route(RouteSpec::new("/closed", &["closed"]))
        .store_timeout(Duration::from_millis(50))
        .build()
        .unwrap();
    let base = serve_limited(limiter).await;
    let client = reqwest::Client::new();
    assert_eq!(
        client
            .get(format!("{base}/open"))
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert_eq!(
        client
            .get(format!("{base}/closed"))
            .send()
            .await
            .unwrap()
            .status(),
        429
    );
}

/// `max_waiting`: with two requests already waiting for their slot, the next delayed one is
/// refused at once (its slot given back), and the metrics count what the clients got: one
/// admitted, two delayed, the rest denied (not delayed), with the queue's gauge back to 0.
#[tokio::test]
async fn max_waiting_refuses_and_counts_what_the_client_got() {
    let observer = Arc::new(Counting::default());
    let store = frozen_store();
    let queue = sluicegate_middleware::WaitQueue::new(2);
    let limiter = RateLimiter::builder(store.clone())
        .policy(paced(Duration::from_secs(10)))
        .route(RouteSpec::new("/", &["paced"]))
        .observer(observer.clone())
        .build()
        .unwrap()
        .with_wait_queue(Arc::clone(&queue));
    let peer: std::net::IpAddr = [192, 0, 2, 1].into();
    let headers = http::HeaderMap::new();
    let mut decisions = Vec::new();
    for _ in 0..6 {
        let d = limiter
            .check(&http::Method::GET, "/x", &headers, peer)
            .await
            .unwrap();
        decisions.push(d);
    }
    let allowed: Vec<bool> = decisions.iter().map(|d| d.is_allowed()).collect();
    let delayed: Vec<bool> = decisions
        .iter()
        .map(|d| d.delay() > Duration::ZERO)
        .collect();
    assert_eq!(allowed, [true, true, true, false, false, false]);
    assert_eq!(delayed, [false, true, true, false, false, false]);
    assert_eq!(queue.waiting(), 2);
    assert_eq!(observer.count("paced", Outcome::Allowed), 1);
    assert_eq!(observer.count("paced", Outcome::Delayed), 2);
    assert_eq!(observer.count("paced", Outcome::Denied), 3);
    drop(decisions);
    assert_eq!(queue.waiting(), 0, "slots not given back");
    // The refused requests took nothing: the next one waits for the fourth slot (300 ms on
    // the frozen clock), not the seventh.
    let next = limiter
        .check(&http::Method::GET, "/x", &headers, peer)
        .await
        .unwrap();
    assert_eq!(next.delay(), Duration::from_millis(300));
}

/// The in-memory store answering only after a short sleep on the runtime's timer: the
/// layer cannot decide as the request arrives and finishes the decision in its own future,
/// woken by the store.
struct LateStore(MemoryStore);

impl Store for LateStore {
    fn check<'a>(
        &'a self,
        request: CheckRequest<'a>,
    ) -> BoxFuture<'a, Result<Verdict, StoreError>> {
        Box::pin(async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            self.0.check(request).await
        })
    }
    fn refund<'a>(
        &'a self,
        policies: &'a [Arc<Policy>],
        key: &'a str,
        cost: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.0.refund(policies, key, cost)
    }
    fn reset<'a>(
        &'a self,
        policy: &'a Policy,
        key: &'a str,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        self.0.reset(policy, key)
    }
    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        self.0.ping()
    }
    fn kind(&self) -> &'static str {
        "late"
    }
}

#[tokio::test]
async fn a_store_answering_later_decides_like_one_answering_at_once() {
    let limiter = RateLimiter::builder(Arc::new(LateStore(MemoryStore::new(100))))
        .policy(
            Policy::builder(
                "two",
                AlgorithmKind::TokenBucket,
                2,
                Duration::from_secs(60),
            )
            .build()
            .unwrap(),
        )
        .route(RouteSpec::new("/", &["two"]))
        .build()
        .unwrap();
    let base = serve_limited(limiter).await;
    let client = reqwest::Client::new();
    let first = client.get(format!("{base}/x")).send().await.unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["ratelimit-remaining"], "1");
    assert_eq!(statuses(&client, &format!("{base}/x"), 2).await, [200, 429]);
}
