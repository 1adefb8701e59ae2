//! Rate-limit headers and the 429 over real HTTP, parsed with `sfv`.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use reqwest::header::HeaderMap;
use sfv::{BareItem, List, ListEntry, Parser};
use sluicegate_core::{AlgorithmKind, ManualClock, MemoryStore};
use sluicegate_middleware::{HeaderSet, RateLimiter, RejectionBody, RouteSpec};
use sluicegate_testkit::http::serve_limited;
use sluicegate_testkit::policy;

/// `(name, [(param, value)])` for each member of a Structured Fields list.
fn sf_list(headers: &HeaderMap, name: &str) -> Vec<(String, Vec<(String, i64)>)> {
    let text = headers[name].to_str().unwrap();
    let list: List = Parser::new(text).parse().unwrap();
    list.iter()
        .map(|member| {
            let ListEntry::Item(item) = member else {
                panic!("inner list in {name}: {text}");
            };
            let BareItem::String(policy) = &item.bare_item else {
                panic!("member of {name} is not a string: {text}");
            };
            let params = item
                .params
                .iter()
                .map(|(k, v)| {
                    let BareItem::Integer(i) = v else {
                        panic!("non-integer parameter in {text}")
                    };
                    (k.as_str().to_owned(), i64::from(*i))
                })
                .collect();
            (policy.as_str().to_owned(), params)
        })
        .collect()
}

fn int(headers: &HeaderMap, name: &str) -> u64 {
    headers[name].to_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn headers_agree_with_the_decision() {
    let limiter = RateLimiter::builder(Arc::new(MemoryStore::new(1000)))
        .policy(policy(
            "auth",
            AlgorithmKind::TokenBucket,
            10,
            Duration::from_secs(60),
        ))
        .policy(policy(
            "burst",
            AlgorithmKind::Gcra,
            4,
            Duration::from_millis(400),
        ))
        .policy(policy(
            "hour",
            AlgorithmKind::FixedWindow,
            1000,
            Duration::from_secs(3600),
        ))
        .route(RouteSpec::new("/auth", &["auth"]))
        .route(RouteSpec::new("/multi", &["burst", "hour"]))
        .headers(&[HeaderSet::Draft6, HeaderSet::Ietf, HeaderSet::Legacy])
        .build()
        .unwrap();
    let base = serve_limited(limiter).await;
    let client = reqwest::Client::new();

    let before = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let first = client.get(format!("{base}/auth")).send().await.unwrap();
    let h = first.headers();
    assert_eq!(first.status(), 200);
    assert_eq!(int(h, "ratelimit-limit"), 10);
    assert_eq!(int(h, "ratelimit-remaining"), 9);
    assert_eq!(int(h, "ratelimit-reset"), 6);
    assert_eq!(
        sf_list(h, "ratelimit-policy"),
        [(
            "auth".to_owned(),
            vec![("q".to_owned(), 10), ("w".to_owned(), 60)]
        )]
    );
    assert_eq!(
        sf_list(h, "ratelimit"),
        [(
            "auth".to_owned(),
            vec![("r".to_owned(), 9), ("t".to_owned(), 6)]
        )]
    );
    assert_eq!(int(h, "x-ratelimit-limit"), 10);
    assert_eq!(int(h, "x-ratelimit-remaining"), 9);
    let reset = int(h, "x-ratelimit-reset");
    assert!(
        (before + 6..=before + 8).contains(&reset),
        "{reset} vs now {before}"
    );
    assert!(h.get("retry-after").is_none());

    // Two policies: ietf has one member each; draft-6 shows the one with fewest remaining.
    let multi = client.get(format!("{base}/multi")).send().await.unwrap();
    let h = multi.headers();
    let policies = sf_list(h, "ratelimit-policy");
    assert_eq!(policies.len(), 2);
    assert_eq!(
        policies[0],
        (
            "burst".to_owned(),
            vec![("q".to_owned(), 4), ("w".to_owned(), 1)]
        )
    );
    assert_eq!(
        policies[1],
        (
            "hour".to_owned(),
            vec![("q".to_owned(), 1000), ("w".to_owned(), 3600)]
        )
    );
    let state = sf_list(h, "ratelimit");
    assert_eq!(state[0].1[0], ("r".to_owned(), 3));
    assert_eq!(state[1].1[0], ("r".to_owned(), 999));
    assert!(state.iter().all(|(_, p)| p[1].0 == "t" && p[1].1 >= 1));
    assert_eq!(int(h, "ratelimit-limit"), 4);
    assert_eq!(int(h, "ratelimit-remaining"), 3);
}

#[tokio::test]
async fn every_429_has_whole_second_retry_after_and_the_json_body() {
    // The store's clock stands still, so no refill happens between requests: exactly
    // `burst` are admitted whatever the machine's speed.
    let store = MemoryStore::with_clock(1000, ManualClock::new(1_000_000));
    let limiter = RateLimiter::builder(Arc::new(store))
        .policy(policy(
            "fast",
            AlgorithmKind::Gcra,
            4,
            Duration::from_millis(200),
        ))
        .policy(policy(
            "slow",
            AlgorithmKind::SlidingLog,
            2,
            Duration::from_secs(30),
        ))
        .route(RouteSpec::new("/fast", &["fast"]))
        .route(RouteSpec::new("/slow", &["slow"]))
        .build()
        .unwrap();
    let base = serve_limited(limiter).await;
    let client = reqwest::Client::new();

    for (path, admitted) in [("fast", 4), ("slow", 2)] {
        let mut rejected = 0;
        for _ in 0..8 {
            let response = client.get(format!("{base}/{path}")).send().await.unwrap();
            if response.status() != 429 {
                continue;
            }
            rejected += 1;
            let h = response.headers().clone();
            let retry_after: u64 = h["retry-after"].to_str().unwrap().parse().unwrap();
            assert!(retry_after >= 1);
            assert_eq!(h["content-type"], "application/json");
            assert_eq!(int(&h, "ratelimit-remaining"), 0);
            let body: RejectionBody = response.json().await.unwrap();
            assert_eq!(body.error, "rate_limit_exceeded");
            assert_eq!(body.policy, path);
            assert_eq!(body.retry_after_seconds, retry_after);
            assert!(!body.message.is_empty());
            // Whole seconds, rounded up: 50 ms for the next GCRA slot, 30 s for the log.
            assert_eq!(retry_after, if path == "slow" { 30 } else { 1 });
        }
        assert_eq!(rejected, 8 - admitted, "{path}");
    }
}

#[tokio::test]
async fn the_body_has_exactly_the_contract_fields() {
    let limiter = RateLimiter::builder(Arc::new(MemoryStore::new(1000)))
        .policy(policy(
            "one",
            AlgorithmKind::FixedWindow,
            1,
            Duration::from_secs(3600),
        ))
        .route(RouteSpec::new("/", &["one"]))
        .headers(&[])
        .build()
        .unwrap();
    let base = serve_limited(limiter).await;
    let client = reqwest::Client::new();
    assert_eq!(client.get(&base).send().await.unwrap().status(), 200);
    let response = client.get(&base).send().await.unwrap();
    assert_eq!(response.status(), 429);
    assert!(response.headers().get("ratelimit").is_none());
    let body: serde_json::Value = response.json().await.unwrap();
    let mut fields: Vec<&str> = body
        .as_object()
        .unwrap()
        .keys()
        .map(String::as_str)
        .collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        ["error", "message", "policy", "retry_after_seconds"]
    );
    assert_eq!(body["policy"], "one");
    assert!(body["retry_after_seconds"].as_u64().unwrap() >= 1);
}
