//! Client identity over real HTTP: X-Forwarded-For only from trusted peers, the right-most
//! untrusted hop, and IPv6 clients limited per /64.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use sluicegate_core::{AlgorithmKind, MemoryStore};
use sluicegate_middleware::{ClientIpHeader, RateLimiter, RouteSpec};
use sluicegate_testkit::http::serve_limited_on;
use sluicegate_testkit::{Counting, policy};

fn limiter(trusted: &[&str], observer: Arc<Counting>) -> RateLimiter {
    RateLimiter::builder(Arc::new(MemoryStore::new(1000)))
        .policy(policy(
            "per-ip",
            AlgorithmKind::FixedWindow,
            2,
            Duration::from_secs(3600),
        ))
        .route(RouteSpec::new("/", &["per-ip"]))
        .trusted_proxies(trusted.iter().map(|t| t.parse().unwrap()).collect())
        .observer(observer)
        .build()
        .unwrap()
}

fn client_from(local: &str) -> reqwest::Client {
    reqwest::Client::builder()
        .local_address(local.parse::<IpAddr>().unwrap())
        .build()
        .unwrap()
}

async fn status(client: &reqwest::Client, url: &str, xff: Option<&str>) -> u16 {
    let mut request = client.get(url);
    if let Some(xff) = xff {
        request = request.header("x-forwarded-for", xff);
    }
    request.send().await.unwrap().status().as_u16()
}

#[tokio::test]
async fn spoofed_forwarded_for_from_an_untrusted_peer_changes_nothing() {
    let observer = Arc::new(Counting::default());
    let (addr, _) =
        serve_limited_on(limiter(&["127.0.0.1/32"], observer.clone()), "127.0.0.1:0").await;
    let url = format!("http://{addr}/x");
    // 127.0.0.2 is not trusted: each request claims another client, all count as 127.0.0.2.
    let stranger = client_from("127.0.0.2");
    let mut got = Vec::new();
    for spoof in ["1.1.1.1", "2.2.2.2", "3.3.3.3"] {
        got.push(status(&stranger, &url, Some(spoof)).await);
    }
    assert_eq!(got, [200, 200, 429]);
    assert!(
        observer
            .keys
            .lock()
            .unwrap()
            .iter()
            .all(|k| k == "ip:127.0.0.2")
    );
    // Another untrusted peer has its own budget.
    assert_eq!(status(&client_from("127.0.0.3"), &url, None).await, 200);
}

#[tokio::test]
async fn a_trusted_proxy_names_the_rightmost_untrusted_hop() {
    let observer = Arc::new(Counting::default());
    let (addr, _) = serve_limited_on(
        limiter(&["127.0.0.1/32", "10.0.0.0/8"], observer.clone()),
        "127.0.0.1:0",
    )
    .await;
    let url = format!("http://{addr}/x");
    let proxy = client_from("127.0.0.1");
    // The left-most entries are whatever the client wrote; 5.5.5.5 is who reached 10.0.0.1.
    assert_eq!(
        status(&proxy, &url, Some("9.9.9.9, 5.5.5.5, 10.0.0.1")).await,
        200
    );
    assert_eq!(status(&proxy, &url, Some("8.8.8.8, 5.5.5.5")).await, 200);
    assert_eq!(status(&proxy, &url, Some("5.5.5.5")).await, 429);
    // Different real clients behind the proxy have their own budgets.
    assert_eq!(status(&proxy, &url, Some("5.5.5.5, 6.6.6.6")).await, 200);
    // A malformed hop stops the walk at the last trusted hop, not at an attacker's choice.
    assert_eq!(
        status(&proxy, &url, Some("4.4.4.4, not-an-ip, 10.0.0.7")).await,
        200
    );
    let keys = observer.keys.lock().unwrap().clone();
    assert_eq!(
        keys,
        [
            "ip:5.5.5.5",
            "ip:5.5.5.5",
            "ip:5.5.5.5",
            "ip:6.6.6.6",
            "ip:10.0.0.7"
        ]
    );
    // The proxy itself, without the header, is keyed as itself.
    assert_eq!(status(&proxy, &url, None).await, 200);
    assert_eq!(
        observer.keys.lock().unwrap().last().unwrap(),
        "ip:127.0.0.1"
    );
}

#[tokio::test]
async fn forwarded_header_is_honoured_from_trusted_peers_when_configured() {
    let observer = Arc::new(Counting::default());
    let limiter = RateLimiter::builder(Arc::new(MemoryStore::new(1000)))
        .policy(policy(
            "per-ip",
            AlgorithmKind::FixedWindow,
            2,
            Duration::from_secs(3600),
        ))
        .route(RouteSpec::new("/", &["per-ip"]))
        .trusted_proxies(vec!["127.0.0.1/32".parse().unwrap()])
        .client_ip_header(ClientIpHeader::Forwarded)
        .observer(observer.clone())
        .build()
        .unwrap();
    let (addr, _) = serve_limited_on(limiter, "127.0.0.1:0").await;
    let response = reqwest::Client::new()
        .get(format!("http://{addr}/x"))
        .header(
            "forwarded",
            r#"for=192.0.2.60;proto=http, for="[2001:db8:cafe::17]:4711""#,
        )
        // The client's own X-Forwarded-For is not the configured header: ignored.
        .header("x-forwarded-for", "6.6.6.6")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(observer.keys.lock().unwrap()[0], "ip:2001:db8:cafe::/64");
}

#[tokio::test]
async fn forwarded_is_ignored_unless_configured() {
    let observer = Arc::new(Counting::default());
    let (addr, _) =
        serve_limited_on(limiter(&["127.0.0.1/32"], observer.clone()), "127.0.0.1:0").await;
    let response = reqwest::Client::new()
        .get(format!("http://{addr}/x"))
        .header("forwarded", "for=192.0.2.60")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    assert_eq!(observer.keys.lock().unwrap()[0], "ip:127.0.0.1");
}

/// Over IPv6 loopback: the proxy at ::1 forwards clients of one /64 (they share a limit)
/// and of another /64 (its own limit).
#[tokio::test]
async fn ipv6_clients_in_one_slash_64_share_a_limit() {
    let Ok(listener) = std::net::TcpListener::bind("[::1]:0") else {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "no IPv6 loopback in CI"
        );
        eprintln!("skipped: no IPv6 loopback on this machine");
        return;
    };
    drop(listener);
    let observer = Arc::new(Counting::default());
    let (addr, _) = serve_limited_on(limiter(&["::1/128"], observer.clone()), "[::1]:0").await;
    let url = format!("http://{addr}/x");
    let client = reqwest::Client::new();
    assert_eq!(status(&client, &url, Some("2001:db8:1:2::1")).await, 200);
    assert_eq!(
        status(&client, &url, Some("2001:db8:1:2:ffff:1:2:3")).await,
        200
    );
    assert_eq!(
        status(&client, &url, Some("[2001:db8:1:2::99]:5000")).await,
        429
    );
    assert_eq!(status(&client, &url, Some("2001:db8:1:3::1")).await, 200);
    let keys = observer.keys.lock().unwrap().clone();
    assert_eq!(keys[0], "ip:2001:db8:1:2::/64");
    assert_eq!(keys[3], "ip:2001:db8:1:3::/64");
    // ::1 is the peer itself, untrusted headers aside: its own key is its /64.
    assert_eq!(status(&client, &url, None).await, 200);
    assert_eq!(observer.keys.lock().unwrap().last().unwrap(), "ip:::/64");
}
