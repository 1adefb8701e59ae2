//! The live dashboard in a real browser: start `sluicegate serve`, drive decisions at it over
//! HTTP, load `/dashboard` in headless Chromium, and check that the page shows the counts.
//! A screenshot is saved as `target/test-artifacts/dashboard.png`.
//!
//! Needs Debian's `chromium` (`scripts/install-test-deps.sh` installs it). Without it the
//! test says so and passes, except under `CI=true`, where it fails.

use std::path::Path;
use std::process::{Command, Stdio};

use sluicegate_testkit::{Sluicegate, program, sluicegate_bin};
use std::time::{Duration, Instant};

/// Runs headless Chromium with `args` and the given URL; returns its stdout.
fn chromium_run(chromium: &Path, profile: &Path, args: &[&str], url: &str) -> String {
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,720",
            // Virtual time runs the page's first polls without the test waiting for them.
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut out).unwrap();
        out
    });
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "chromium failed: {status}");
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().unwrap()
}

async fn check(client: &reqwest::Client, base: &str, policy: &str, key: &str) -> bool {
    let response = client
        .post(format!("{base}/v1/check"))
        .json(&serde_json::json!({"policy": policy, "key": key}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    body["allowed"].as_bool().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_shows_live_counts_in_a_browser() {
    let Some(chromium) = program("chromium") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sluicegate.toml");
    std::fs::write(
        &config,
        r#"
[[policies]]
name = "api"
algorithm = "fixed_window"
limit = 3
period = "1h"

[[policies]]
name = "search"
algorithm = "gcra"
limit = 100
period = "1m"

[[routes]]
path = "/"
policies = ["api"]
key = "ip"
"#,
    )
    .unwrap();
    let server = Sluicegate::start(sluicegate_bin!(), &["--config", config.to_str().unwrap()]);
    let base = server.url("");

    let client = reqwest::Client::new();
    let mut allowed = 0;
    for _ in 0..10 {
        allowed += u32::from(check(&client, &base, "api", "alice").await);
    }
    for _ in 0..2 {
        allowed += u32::from(check(&client, &base, "api", "bob").await);
    }
    for _ in 0..4 {
        assert!(check(&client, &base, "search", "carol").await);
    }
    assert_eq!(allowed, 5, "3 for alice, 2 for bob");

    let profile = dir.path().join("chromium-profile");
    let url = format!("{base}/dashboard");
    let dom = chromium_run(&chromium, &profile, &["--dump-dom"], &url);
    for expected in [
        r#"data-policy="api" data-outcome="allowed" data-total="5""#,
        r#"data-policy="api" data-outcome="denied" data-total="7""#,
        r#"data-policy="search" data-outcome="allowed" data-total="4""#,
        r#"data-policy="search" data-outcome="denied" data-total="0""#,
        r#"<tr data-key="alice" data-policy="api" data-limited="7">"#,
        "store: memory · reachable",
    ] {
        assert!(
            dom.contains(expected),
            "the page lacks {expected:?}:\n{dom}"
        );
    }
    assert!(!dom.contains(r#"data-key="bob""#), "bob was never limited");
    assert!(
        dom.contains(r#"<footer id="status" class="">Polling /dashboard/data every 2 s.</footer>"#),
        "the page's poll failed:\n{dom}"
    );

    let target = Path::new(sluicegate_bin!())
        .ancestors()
        .nth(2)
        .unwrap()
        .to_owned();
    let artifacts = target.join("test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let shot = artifacts.join("dashboard.png");
    let _ = std::fs::remove_file(&shot);
    chromium_run(
        &chromium,
        &profile,
        &[&format!("--screenshot={}", shot.display())],
        &url,
    );
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(png.len() > 10_000, "a blank page? {} bytes", png.len());
}

/// An upstream that holds every request until the test adds a permit to its gate; but
/// `/metered`, answered at once with the real cost of 4 in `x-real-cost`.
async fn gated_upstream() -> (
    std::net::SocketAddr,
    std::sync::Arc<tokio::sync::Semaphore>,
    std::sync::Arc<std::sync::atomic::AtomicUsize>,
) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};
    let gate = Arc::new(tokio::sync::Semaphore::new(0));
    let entered = Arc::new(AtomicUsize::new(0));
    let (g, e) = (Arc::clone(&gate), Arc::clone(&entered));
    let app = axum::Router::new()
        .route(
            "/metered",
            axum::routing::get(|| async { ([("x-real-cost", "4")], "ok") }),
        )
        .fallback(move || {
            let (gate, entered) = (Arc::clone(&g), Arc::clone(&e));
            async move {
                entered.fetch_add(1, Ordering::SeqCst);
                gate.acquire().await.unwrap().forget();
                "ok"
            }
        });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, gate, entered)
}

/// `field` of the pool's level row in `/dashboard/data`.
async fn pool_level(base: &str, field: &str) -> u64 {
    let data: serde_json::Value = reqwest::get(format!("{base}/dashboard/data"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    data["pools"][0]["levels"][0][field].as_u64().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_shows_a_pools_slots_queue_rejections_and_waits() {
    use std::sync::atomic::Ordering;
    let Some(chromium) = program("chromium") else {
        return;
    };
    let (upstream, gate, entered) = gated_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sluicegate.toml");
    std::fs::write(
        &config,
        r#"
[[policies]]
name = "open"
algorithm = "token_bucket"
limit = 1000000
period = "1s"

[[routes]]
path = "/"
policies = ["open"]
key = "header:x-client"
pool = "backend"

[[pools]]
name = "backend"
concurrency = 2
queue = 2
max_wait = "10m"
"#,
    )
    .unwrap();
    let server = Sluicegate::start(
        sluicegate_bin!(),
        &[
            "--config",
            config.to_str().unwrap(),
            "--gateway-listen",
            "127.0.0.1:0",
            "--upstream",
            &format!("http://{upstream}"),
        ],
    );
    let base = server.url("");
    let send = |client: &str| {
        let (url, client) = (server.gateway_url("/work"), client.to_owned());
        tokio::spawn(async move {
            reqwest::Client::new()
                .get(url)
                .header("x-client", client)
                .send()
                .await
                .unwrap()
                .status()
        })
    };
    let until = async |what: &str, cond: &dyn Fn() -> bool| {
        let deadline = Instant::now() + Duration::from_secs(30);
        while !cond() {
            assert!(Instant::now() < deadline, "never happened: {what}");
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    // a and b take both slots; c waits, then gets a's slot.
    let mut sent = vec![send("a"), send("b")];
    until("a and b at the upstream", &|| {
        entered.load(Ordering::SeqCst) == 2
    })
    .await;
    sent.push(send("c"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while pool_level(&base, "queued").await != 1 {
        assert!(Instant::now() < deadline, "c never queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let queued_at = Instant::now();
    // The wait the page must show: c waits at least this long (not a timed assertion).
    tokio::time::sleep(Duration::from_millis(400)).await;
    let held = queued_at.elapsed();
    gate.add_permits(1);
    until("c at the upstream", &|| entered.load(Ordering::SeqCst) == 3).await;
    // d and e fill the queue of 2; f finds it full.
    sent.push(send("d"));
    sent.push(send("e"));
    let deadline = Instant::now() + Duration::from_secs(30);
    while pool_level(&base, "queued").await != 2 {
        assert!(Instant::now() < deadline, "d and e never queued");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(send("f").await.unwrap(), 429);

    let profile = dir.path().join("chromium-profile");
    let dom = chromium_run(
        &chromium,
        &profile,
        &["--dump-dom"],
        &format!("{base}/dashboard"),
    );
    let row = r#"<tr data-pool="backend" data-level="default" data-in-flight="2" data-queued="2" data-limit="2" data-rejected="1" data-rejected-queue-full="1" data-rejected-timeout="0" data-cancelled="0" data-admitted="3" data-mean-wait-ms=""#;
    let Some(at) = dom.find(row) else {
        panic!("the page lacks the pool's row {row:?}:\n{dom}");
    };
    let mean_wait: u64 = dom[at + row.len()..]
        .split('"')
        .next()
        .unwrap()
        .parse()
        .unwrap();
    // Three admitted: a and b at once, c after waiting at least `held`.
    let floor = held.as_millis() as u64 / 3;
    assert!(
        mean_wait >= floor,
        "mean wait {mean_wait} ms, but c alone waited {held:?} of 3 admissions"
    );
    assert!(dom.contains("default (1 share)"), "{dom}");
    let artifacts = Path::new(sluicegate_bin!())
        .ancestors()
        .nth(2)
        .unwrap()
        .join("test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let shot = artifacts.join("dashboard-pools.png");
    chromium_run(
        &chromium,
        &profile,
        &[
            &format!("--screenshot={}", shot.display()),
            "--window-size=1280,1100",
        ],
        &format!("{base}/dashboard"),
    );

    gate.add_permits(100);
    let statuses: Vec<_> = futures_util::future::join_all(sent).await;
    assert!(
        statuses.iter().all(|s| *s.as_ref().unwrap() == 200),
        "{statuses:?}"
    );
    assert_eq!(pool_level(&base, "in_flight").await, 0);
}

/// `POST {base}{path}` with a JSON body: the status and the body.
async fn post(base: &str, path: &str, body: serde_json::Value) -> (u16, serde_json::Value) {
    let response = reqwest::Client::new()
        .post(format!("{base}{path}"))
        .json(&body)
        .send()
        .await
        .unwrap();
    let status = response.status().as_u16();
    let text = response.text().await.unwrap();
    (status, serde_json::from_str(&text).unwrap_or_default())
}

/// A reservation of `cost` on the token policy for `org`.
async fn reserve(base: &str, cost: u64) -> String {
    let (status, body) = post(
        base,
        "/v1/check",
        serde_json::json!({"policy": "tokens", "key": "org", "cost": cost, "reserve": true}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    body["reservation"].as_str().unwrap().to_owned()
}

async fn settle(base: &str, reservation: &str, cost: u64) -> (u16, serde_json::Value) {
    post(
        base,
        "/v1/settle",
        serde_json::json!({"reservation": reservation, "cost": cost}),
    )
    .await
}

async fn dashboard_data(base: &str) -> serde_json::Value {
    reqwest::get(format!("{base}/dashboard/data"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// Real leases (requests held at a gated upstream through the gateway, one taken and
/// released through the API) and real settles (through the API: refund, charge, exact,
/// replay, expired; through the gateway: a route's `settle = "header:…"`):
/// the page shows the slots held per policy and key, read from the store, and the counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_shows_leases_held_and_settle_activity() {
    use std::sync::atomic::Ordering;
    let Some(chromium) = program("chromium") else {
        return;
    };
    let (upstream, gate, entered) = gated_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sluicegate.toml");
    std::fs::write(
        &config,
        r#"
[server]
reservation_secret = "a secret of at least sixteen bytes"
reservation_ttl = "1s"

[[policies]]
name = "inflight"
algorithm = "concurrency"
limit = 3
lease = "10m"

[[policies]]
name = "tokens"
algorithm = "token_bucket"
limit = 1000
period = "1m"

[[policies]]
name = "metered"
algorithm = "token_bucket"
limit = 100
period = "1m"

[[routes]]
path = "/"
policies = ["inflight"]
key = "header:x-client"

[[routes]]
path = "/metered"
policies = ["metered"]
key = "header:x-client"
cost = 10
settle = "header:x-real-cost"

[gateway]
listen = "127.0.0.1:0"
upstream = "http://127.0.0.1:1"
"#,
    )
    .unwrap();
    let server = Sluicegate::start(
        sluicegate_bin!(),
        &[
            "--config",
            config.to_str().unwrap(),
            "--gateway-listen",
            "127.0.0.1:0",
            "--upstream",
            &format!("http://{upstream}"),
        ],
    );
    let base = server.url("");
    let send = |client: &str| {
        let (url, client) = (server.gateway_url("/report"), client.to_owned());
        tokio::spawn(async move {
            reqwest::Client::new()
                .get(url)
                .header("x-client", client)
                .send()
                .await
                .unwrap()
                .status()
                .as_u16()
        })
    };
    // alice fills her 3 slots, bob takes 1; alice's 4th is refused.
    let held: Vec<_> = ["alice", "alice", "alice", "bob"]
        .into_iter()
        .map(send)
        .collect();
    let deadline = Instant::now() + Duration::from_secs(30);
    while entered.load(Ordering::SeqCst) < 4 {
        assert!(
            Instant::now() < deadline,
            "the 4 requests never reached the upstream"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert_eq!(send("alice").await.unwrap(), 429);
    // A lease through the API, released through the API.
    let (status, body) = post(
        &base,
        "/v1/check",
        serde_json::json!({"policy": "inflight", "key": "carol"}),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    let lease = body["lease"].as_str().unwrap().to_owned();
    let (status, _) = post(&base, "/v1/release", serde_json::json!({"lease": lease})).await;
    assert_eq!(status, 204);

    // Settles: one gives back, one charges more, one is exact, a replay, an expiry.
    let (r1, r2, r3, r4) = (
        reserve(&base, 100).await,
        reserve(&base, 100).await,
        reserve(&base, 100).await,
        reserve(&base, 100).await,
    );
    assert_eq!(settle(&base, &r1, 40).await.0, 200);
    assert_eq!(settle(&base, &r2, 250).await.0, 200);
    assert_eq!(settle(&base, &r3, 100).await.0, 200);
    let (status, body) = settle(&base, &r1, 40).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("reservation_settled"))
    );
    // The contract is about time here: the reservation must outlive reservation_ttl.
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    let (status, body) = settle(&base, &r4, 10).await;
    assert_eq!(
        (status, body["error"].as_str()),
        (409, Some("reservation_expired"))
    );
    // A route's settle through the gateway: 10 charged, the upstream reports 4.
    let metered = reqwest::Client::new()
        .get(server.gateway_url("/metered"))
        .header("x-client", "dave")
        .send()
        .await
        .unwrap();
    assert_eq!(metered.status(), 200);
    assert!(metered.headers().get("x-real-cost").is_none(), "removed");
    assert_eq!(metered.text().await.unwrap(), "ok");
    // The gateway settles once the body has ended, in the background.
    let deadline = Instant::now() + Duration::from_secs(30);
    while dashboard_data(&base).await["settles"]["settled"] != 4 {
        assert!(
            Instant::now() < deadline,
            "the gateway's settle was not counted"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let profile = dir.path().join("chromium-profile");
    let url = format!("{base}/dashboard");
    let dom = chromium_run(&chromium, &profile, &["--dump-dom"], &url);
    for expected in [
        r#"<tr data-lease-policy="inflight" data-in-flight="4" data-limit="3" data-keys-read="3">"#,
        r#"<div data-lease-key="header:x-client:alice" data-policy="inflight" data-in-flight="3" data-limit="3">"#,
        r#"<div data-lease-key="header:x-client:bob" data-policy="inflight" data-in-flight="1" data-limit="3">"#,
        r#"data-settled="4" data-refunded="2" data-charged="1" data-replayed="1" data-expired="1" data-failed="0" data-releases="1""#,
    ] {
        assert!(
            dom.contains(expected),
            "the page lacks {expected:?}:\n{dom}"
        );
    }
    assert!(
        !dom.contains(r#"data-lease-key="carol""#),
        "carol released hers"
    );
    let artifacts = Path::new(sluicegate_bin!())
        .ancestors()
        .nth(2)
        .unwrap()
        .join("test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    chromium_run(
        &chromium,
        &profile,
        &[
            &format!(
                "--screenshot={}",
                artifacts.join("dashboard-leases.png").display()
            ),
            "--window-size=1280,1400",
        ],
        &url,
    );

    // The held requests end: their leases are released through the same store, the page's
    // data says so (read from the store, not counted on the side).
    gate.add_permits(100);
    for status in futures_util::future::join_all(held).await {
        assert_eq!(status.unwrap(), 200);
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let data = dashboard_data(&base).await;
        let released = data["settles"]["releases"].as_u64().unwrap();
        let in_flight = data["leases"][0]["in_flight"].as_u64().unwrap();
        if released == 5 && in_flight == 0 {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "releases {released}, in flight {in_flight}: {data}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
