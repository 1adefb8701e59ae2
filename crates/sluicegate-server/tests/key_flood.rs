//! A flood of unique keys against the real binary, through the gateway: header values and
//! forwarded addresses, ten times `max_keys` of them. The store stays within `max_keys`,
//! the process's memory stays bounded, and a client that is being limited is refused on
//! every one of its requests during and after the flood (its state is the most expensive to
//! lose, so eviction never picks it: see docs/security.md, "Key floods").

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use sluicegate_testkit::{Sluicegate as Server, sluicegate_bin, write};

const MAX_KEYS: usize = 500;
const FLOOD: usize = 10 * MAX_KEYS;
const WORKERS: usize = 8;

fn rss_bytes(pid: u32) -> u64 {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

async fn upstream() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let app = axum::Router::new().fallback(|| async { "upstream" });
        axum::serve(listener, app).await.unwrap();
    });
    addr
}

async fn tracked_keys(client: &reqwest::Client, server: &Server) -> u64 {
    let text = client
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| {
            l.strip_prefix("sluicegate_tracked_keys")?
                .trim()
                .parse::<f64>()
                .ok()
        })
        .unwrap_or_else(|| panic!("no sluicegate_tracked_keys in {text}")) as u64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_flood_keeps_max_keys_and_never_frees_a_limited_client() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        r#"
[server]
listen = "127.0.0.1:0"
trusted_proxies = ["127.0.0.1/32"]

[store]
max_keys = {MAX_KEYS}

[[policies]]
name = "per_key"
algorithm = "fixed_window"
limit = 5
period = "1h"

[[policies]]
name = "per_ip"
algorithm = "token_bucket"
limit = 5
period = "1h"

[[routes]]
path = "/keyed"
policies = ["per_key"]
key = "header:x-api-key"

[[routes]]
path = "/open"
policies = ["per_ip"]

[gateway]
listen = "127.0.0.1:0"
upstream = "http://{up}"
"#
    );
    let path = write(dir.path(), "sluicegate.toml", &toml);
    let server = Server::start_with(
        sluicegate_bin!(),
        &["--config", path.to_str().unwrap()],
        false,
    );
    let gateway = server.gateway.unwrap();
    let client = reqwest::Client::new();
    let hot = |route: &'static str| {
        let client = client.clone();
        async move {
            let request = client.get(format!("http://{gateway}/{route}/x"));
            let request = if route == "keyed" {
                request.header("x-api-key", "hot")
            } else {
                request.header("x-forwarded-for", "198.51.100.77")
            };
            request.send().await.unwrap().status().as_u16()
        }
    };
    // Both hot clients spend their budget of 5 and are refused from then on.
    for route in ["keyed", "open"] {
        let mut statuses = Vec::new();
        for _ in 0..6 {
            statuses.push(hot(route).await);
        }
        assert_eq!(statuses, [200, 200, 200, 200, 200, 429], "{route}");
    }
    let warm = rss_bytes(server.child.id());

    // The flood: every request a new key, half header values, half forwarded addresses.
    let next = Arc::new(AtomicUsize::new(0));
    let admitted = Arc::new(AtomicUsize::new(0));
    let workers: Vec<_> = (0..WORKERS)
        .map(|_| {
            let (client, next, admitted) = (client.clone(), next.clone(), admitted.clone());
            tokio::spawn(async move {
                loop {
                    let i = next.fetch_add(1, Ordering::Relaxed);
                    if i >= FLOOD {
                        return;
                    }
                    let request = if i % 2 == 0 {
                        client
                            .get(format!("http://{gateway}/keyed/x"))
                            .header("x-api-key", format!("flood-{i}"))
                    } else {
                        let ip = format!("10.{}.{}.{}", i >> 16, (i >> 8) & 255, i & 255);
                        client
                            .get(format!("http://{gateway}/open/x"))
                            .header("x-forwarded-for", ip)
                    };
                    let status = request.send().await.unwrap().status();
                    if status == 200 {
                        admitted.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    // Meanwhile the hot clients keep trying: not one request may get through.
    let mut hot_tries = 0;
    while next.load(Ordering::Relaxed) < FLOOD {
        for route in ["keyed", "open"] {
            assert_eq!(
                hot(route).await,
                429,
                "{route} got through during the flood"
            );
            hot_tries += 1;
        }
        assert!(tracked_keys(&client, &server).await <= MAX_KEYS as u64);
    }
    for worker in workers {
        worker.await.unwrap();
    }
    let end = rss_bytes(server.child.id());
    let keys = tracked_keys(&client, &server).await;
    eprintln!(
        "{FLOOD} flood keys ({} admitted), {hot_tries} hot tries refused; tracked {keys} (max {MAX_KEYS}); RSS warm {:.1} MiB, end {:.1} MiB",
        admitted.load(Ordering::Relaxed),
        warm as f64 / 1048576.0,
        end as f64 / 1048576.0
    );
    // Every flood key was new and had a budget: all were admitted.
    assert_eq!(admitted.load(Ordering::Relaxed), FLOOD);
    assert!(
        hot_tries >= 2,
        "the hot clients never tried during the flood"
    );
    assert!(keys <= MAX_KEYS as u64, "{keys} tracked keys");
    assert!(
        keys >= MAX_KEYS as u64 * 9 / 10,
        "the store did not fill: {keys}"
    );
    for route in ["keyed", "open"] {
        assert_eq!(hot(route).await, 429, "{route} was freed by the flood");
    }
    assert!(end.saturating_sub(warm) < 8 << 20, "RSS {warm} → {end}");
}
