//! Richer keys (query, cookie, composites) and allow/deny lists over real HTTP.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use sluicegate_core::{AlgorithmKind, MemoryStore};
use sluicegate_middleware::{KeySpec, RateLimiter, RouteSpec};
use sluicegate_testkit::http::serve_limited_on;
use sluicegate_testkit::{Counting, policy};

fn limiter(key: &str, observer: Arc<Counting>) -> RateLimiter {
    RateLimiter::builder(Arc::new(MemoryStore::new(1000)))
        .policy(policy(
            "p",
            AlgorithmKind::FixedWindow,
            1,
            Duration::from_secs(3600),
        ))
        .route(RouteSpec::new("/", &["p"]).key(key.parse::<KeySpec>().unwrap()))
        .observer(observer)
        .build()
        .unwrap()
}

async fn get(client: &reqwest::Client, url: &str, cookie: Option<&str>) -> u16 {
    let mut request = client.get(url);
    if let Some(cookie) = cookie {
        request = request.header("cookie", cookie);
    }
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn query_keys_are_decoded_so_another_spelling_is_the_same_client() {
    let observer = Arc::new(Counting::default());
    let (addr, _) =
        serve_limited_on(limiter("query:api_key", observer.clone()), "127.0.0.1:0").await;
    let client = reqwest::Client::new();
    let base = format!("http://{addr}/x");
    assert_eq!(
        get(&client, &format!("{base}?api_key=abc"), None).await,
        200
    );
    // %61 is 'a': the upstream sees the same key, so must the limiter.
    assert_eq!(
        get(&client, &format!("{base}?api_key=%61bc"), None).await,
        429
    );
    assert_eq!(
        get(&client, &format!("{base}?api_key=xyz"), None).await,
        200
    );
    // Without the parameter: keyed by IP (a fresh state, admitted once).
    assert_eq!(get(&client, &base, None).await, 200);
    assert_eq!(get(&client, &format!("{base}?other=1"), None).await, 429);
    let keys = observer.keys.lock().unwrap().clone();
    assert_eq!(keys[0], "query:api_key:abc");
    assert_eq!(keys[3], "ip:127.0.0.1");
}

#[tokio::test]
async fn cookie_and_composite_keys() {
    let observer = Arc::new(Counting::default());
    let (addr, _) =
        serve_limited_on(limiter("ip+cookie:sid", observer.clone()), "127.0.0.1:0").await;
    let client = reqwest::Client::new();
    let url = format!("http://{addr}/x");
    assert_eq!(get(&client, &url, Some("sid=one")).await, 200);
    assert_eq!(get(&client, &url, Some("theme=dark; sid=one")).await, 429);
    assert_eq!(get(&client, &url, Some("sid=two")).await, 200);
    // A value that tries to forge another composite is escaped, not split.
    assert_eq!(get(&client, &url, Some("sid=one+ip:1.2.3.4")).await, 200);
    let keys = observer.keys.lock().unwrap().clone();
    assert_eq!(keys[0], "ip:127.0.0.1+cookie:sid:one");
    assert_eq!(keys[3], "ip:127.0.0.1+cookie:sid:one%2Bip:1.2.3.4");
}

fn listed(allow: &[&str], deny: &[&str], route: RouteSpec) -> RateLimiter {
    let nets = |v: &[&str]| v.iter().map(|s| s.parse().unwrap()).collect();
    RateLimiter::builder(Arc::new(MemoryStore::new(1000)))
        .policy(policy(
            "p",
            AlgorithmKind::FixedWindow,
            1,
            Duration::from_secs(3600),
        ))
        .route(route)
        .access(nets(allow), nets(deny))
        .build()
        .unwrap()
}

fn client_from(local: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(local.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}

#[tokio::test]
async fn allow_is_never_limited_and_deny_is_403_json_even_off_route() {
    let limiter = listed(
        &["127.0.0.2/32"],
        &["127.0.0.3/32"],
        RouteSpec::new("/api", &["p"]).access(vec![], vec!["127.0.0.4/32".parse().unwrap()]),
    );
    let (addr, calls) = serve_limited_on(limiter, "127.0.0.1:0").await;
    let url = format!("http://{addr}/api");
    let allowed = client_from("127.0.0.2");
    for _ in 0..5 {
        assert_eq!(get(&allowed, &url, None).await, 200);
    }
    let plain = client_from("127.0.0.1");
    assert_eq!(get(&plain, &url, None).await, 200);
    assert_eq!(get(&plain, &url, None).await, 429);

    let denied = client_from("127.0.0.3");
    let response = denied
        .get(format!("http://{addr}/elsewhere"))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 403);
    assert_eq!(response.headers()["content-type"], "application/json");
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"], "forbidden");
    // The route's own deny list holds on that route only.
    let route_denied = client_from("127.0.0.4");
    assert_eq!(get(&route_denied, &url, None).await, 403);
    assert_eq!(
        get(&route_denied, &format!("http://{addr}/other"), None).await,
        200
    );
    // The handler never saw a denied request: 5 allowed + 1 admitted + 1 off-route.
    assert_eq!(calls.lock().unwrap().len(), 7);
}
