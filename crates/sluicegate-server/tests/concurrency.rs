//! `algorithm = "concurrency"` through the real binary's gateway, measured at the upstream:
//! - one instance, 30 clients against a slow upstream, limit 5 in flight: the upstream never
//!   sees more than 5 at once, and every slot is free again afterwards;
//! - two instances sharing one redis-server: never more than 5 at the shared upstream;
//! - a holder killed mid-request (SIGKILL, no release) frees its slot after `lease`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use reqwest::Client;
use serde_json::Value;
use sluicegate_testkit::{RedisServer, Sluicegate as Server, eventually, sluicegate_bin, write};
use tokio::sync::Notify;

const LIMIT: u64 = 5;

#[derive(Default)]
struct Upstream {
    in_flight: AtomicU64,
    peak: AtomicU64,
    served: AtomicU64,
    /// When set, requests to /hold wait for it (a request that never ends on its own).
    release: Notify,
}

async fn slow(State(up): State<Arc<Upstream>>, uri: axum::http::Uri) -> &'static str {
    let now = up.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
    up.peak.fetch_max(now, Ordering::SeqCst);
    if uri.path().starts_with("/slow/hold") {
        up.release.notified().await;
    } else {
        // The upstream is slow: each request takes a while, so clients overlap.
        tokio::time::sleep(Duration::from_millis(40)).await;
    }
    up.in_flight.fetch_sub(1, Ordering::SeqCst);
    up.served.fetch_add(1, Ordering::SeqCst);
    "done"
}

async fn upstream() -> (SocketAddr, Arc<Upstream>) {
    let state = Arc::new(Upstream::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new().fallback(slow).with_state(Arc::clone(&state));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, state)
}

fn config(store: &str, lease: &str) -> String {
    format!(
        r#"
{store}

[[policies]]
name = "inflight"
algorithm = "concurrency"
limit = {LIMIT}
lease = "{lease}"

[[routes]]
path = "/slow"
key = "global"
policies = ["inflight"]

[gateway]
listen = "127.0.0.1:0"
upstream = "http://127.0.0.1:1"
"#
    )
}

fn start(path: &std::path::Path, up: SocketAddr) -> Server {
    Server::start(
        sluicegate_bin!(),
        &[
            "--config",
            path.to_str().unwrap(),
            "--gateway-listen",
            "127.0.0.1:0",
            "--upstream",
            &format!("http://{up}"),
        ],
    )
}

/// 30 clients, each sending requests one after another through the gateways in turn.
async fn load(gateways: &[String]) -> (u64, u64) {
    let client = Client::new();
    let ok = Arc::new(AtomicU64::new(0));
    let limited = Arc::new(AtomicU64::new(0));
    let mut tasks = Vec::new();
    for c in 0..30 {
        let (client, ok, limited) = (client.clone(), Arc::clone(&ok), Arc::clone(&limited));
        let url = gateways[c % gateways.len()].clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..8 {
                let r = client.get(&url).send().await.unwrap();
                match r.status().as_u16() {
                    200 => {
                        assert_eq!(r.text().await.unwrap(), "done");
                        ok.fetch_add(1, Ordering::SeqCst);
                    }
                    429 => {
                        let body: Value = r.json().await.unwrap();
                        assert_eq!(body["policy"], "inflight");
                        limited.fetch_add(1, Ordering::SeqCst);
                    }
                    other => panic!("status {other}"),
                }
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    (ok.load(Ordering::SeqCst), limited.load(Ordering::SeqCst))
}

async fn free_slots(server: &Server) -> u64 {
    let r: Value = Client::new()
        .get(server.url("/v1/limits/inflight/global"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    r["remaining"].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_upstream_never_sees_more_than_the_limit() {
    let (up, state) = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "c.toml", &config("", "1m"));
    let server = start(&path, up);
    let (ok, limited) = load(&[server.gateway_url("/slow/x")]).await;
    let peak = state.peak.load(Ordering::SeqCst);
    assert!(peak <= LIMIT, "the upstream saw {peak} at once");
    assert_eq!(peak, LIMIT, "never full: the test did not load the limit");
    assert!(limited > 0 && ok > LIMIT, "ok {ok} limited {limited}");
    assert_eq!(state.served.load(Ordering::SeqCst), ok);
    // Every lease was released when its response ended.
    eventually("every slot free", || async {
        free_slots(&server).await == LIMIT
    })
    .await;
}

fn redis_store(port: u16) -> String {
    format!(
        "[store]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:{port}/0\"\nkey_prefix = \"cc\"\ntimeout = \"2s\""
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_on_one_redis_share_the_limit() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let port = redis.port;
    let (up, state) = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "c.toml", &config(&redis_store(port), "1m"));
    let (a, b) = (start(&path, up), start(&path, up));
    let (ok, limited) = load(&[a.gateway_url("/slow/x"), b.gateway_url("/slow/x")]).await;
    let peak = state.peak.load(Ordering::SeqCst);
    assert!(peak <= LIMIT, "the upstream saw {peak} at once");
    assert!(limited > 0 && ok > LIMIT, "ok {ok} limited {limited}");
    eventually("every slot free", || async {
        free_slots(&a).await == LIMIT
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_holder_frees_its_slot_after_the_lease() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let port = redis.port;
    let (up, state) = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "c.toml", &config(&redis_store(port), "5s"));
    let mut holder = start(&path, up);
    let other = start(&path, up);
    let client = Client::new();
    // Five requests that never end on their own take every slot through the holder.
    let mut pending = Vec::new();
    for _ in 0..LIMIT {
        pending.push(tokio::spawn(
            client.get(holder.gateway_url("/slow/hold")).send(),
        ));
    }
    eventually("five requests at the upstream", || async {
        state.in_flight.load(Ordering::SeqCst) == LIMIT
    })
    .await;
    // The holder dies without releasing anything.
    holder.child.kill().unwrap();
    holder.child.wait().unwrap();
    let r = client
        .get(other.gateway_url("/slow/x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429, "a slot was freed before its lease passed");
    // After the lease, the other instance admits again.
    eventually("the dead holder's slots come back", || async {
        free_slots(&other).await == LIMIT
    })
    .await;
    let r = client
        .get(other.gateway_url("/slow/x"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    state.release.notify_waiters();
    for p in pending {
        let _ = p.await;
    }
}

/// Where the end of a request cannot be seen, a concurrency policy is a configuration
/// error, with the reason; with a gateway the same routes are valid.
#[test]
fn validate_refuses_concurrency_where_no_end_is_seen() {
    let dir = tempfile::tempdir().unwrap();
    let validate = |name: &str, text: &str| {
        let path = write(dir.path(), name, text);
        let out = std::process::Command::new(sluicegate_bin!())
            .args(["validate", "--config", path.to_str().unwrap()])
            .output()
            .unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned()
                + &String::from_utf8_lossy(&out.stderr),
        )
    };
    let with_gateway = config("", "30s");
    assert_eq!(validate("ok.toml", &with_gateway).0, Some(0));
    let without: String = with_gateway.split("[gateway]").next().unwrap().to_owned();
    let (code, text) = validate("fa.toml", &without);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("never sees a request end"), "{text}");
    let envoy =
        format!("{with_gateway}\n[envoy]\nlisten = \"127.0.0.1:0\"\nalgorithm = \"concurrency\"\n");
    let (code, text) = validate("envoy.toml", &envoy);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("Envoy's rate limit service never sees"),
        "{text}"
    );
    // A native Envoy rule naming the concurrency policy: refused too, pointing at the rule.
    let rule = format!(
        "{with_gateway}\n[envoy]\nlisten = \"127.0.0.1:0\"\n\n[[envoy.rules]]\ndomain = \"api\"\nentries = [{{ key = \"remote_address\" }}]\npolicies = [\"inflight\"]\n"
    );
    let (code, text) = validate("rule.toml", &rule);
    assert_eq!(code, Some(1), "{text}");
    assert!(
        text.contains("rule uses concurrency policy \"inflight\": Envoy's rate limit service never sees when a request ends"),
        "{text}"
    );
    let mixed = "[[policies]]\nname = \"c\"\nalgorithm = \"concurrency\"\nlimit = 2\nperiod = \"1s\"\nburst = 2\n";
    let (code, text) = validate("fields.toml", mixed);
    assert_eq!(code, Some(1), "{text}");
    assert!(text.contains("concurrency has no period"), "{text}");
    assert!(text.contains("burst is not used by concurrency"), "{text}");
}
