//! `[[pools]]` against the real binary: a slow upstream holds each request for a fixed
//! service time and counts what it sees (in flight, starts, per route). Every assertion is
//! on those counts or on ordering measured at the upstream, with bounds derived from the
//! configuration; waits poll the counts, never a fixed sleep.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::Request;
use axum::http::HeaderValue;
use axum::response::Response;
use sluicegate_testkit::{Sluicegate, sluicegate_bin, write};

/// Counts of one route's requests at the upstream.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    in_flight: usize,
    peak: usize,
    started: u64,
}

#[derive(Default)]
struct Upstream {
    service_ms: AtomicU64,
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    started: AtomicU64,
    by_path: Mutex<HashMap<String, Seen>>,
}

impl Upstream {
    fn path(&self, path: &str) -> Seen {
        self.by_path
            .lock()
            .unwrap()
            .get(path)
            .copied()
            .unwrap_or_default()
    }
    /// Forgets the peaks (to measure a new phase).
    fn reset_peaks(&self) {
        self.peak
            .store(self.in_flight.load(Ordering::SeqCst), Ordering::SeqCst);
        for seen in self.by_path.lock().unwrap().values_mut() {
            seen.peak = seen.in_flight;
        }
    }
}

async fn slow_upstream(service: Duration) -> (SocketAddr, Arc<Upstream>) {
    let up = Arc::new(Upstream::default());
    up.service_ms
        .store(service.as_millis() as u64, Ordering::SeqCst);
    let seen = Arc::clone(&up);
    let app = Router::new().fallback(move |request: Request| {
        let up = Arc::clone(&seen);
        async move {
            let path = request.uri().path().to_owned();
            let before = up.started.fetch_add(1, Ordering::SeqCst);
            let now = up.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            up.peak.fetch_max(now, Ordering::SeqCst);
            {
                let mut map = up.by_path.lock().unwrap();
                let s = map.entry(path.clone()).or_default();
                s.in_flight += 1;
                s.peak = s.peak.max(s.in_flight);
                s.started += 1;
            }
            tokio::time::sleep(Duration::from_millis(up.service_ms.load(Ordering::SeqCst))).await;
            up.by_path.lock().unwrap().get_mut(&path).unwrap().in_flight -= 1;
            up.in_flight.fetch_sub(1, Ordering::SeqCst);
            let mut response = Response::new(axum::body::Body::from("ok"));
            response
                .headers_mut()
                .insert("x-started-before", HeaderValue::from(before));
            response
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, up)
}

/// The tests load the machine; one at a time keeps the adaptive one's latency readings
/// about the upstream, not about the other tests.
static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

const POLICY: &str = r#"
[[policies]]
name = "open"
algorithm = "token_bucket"
limit = 1000000
period = "1s"
"#;

fn start(dir: &std::path::Path, up: SocketAddr, config: &str) -> Sluicegate {
    let path = write(dir, "pools.toml", &format!("{POLICY}\n{config}"));
    let upstream = format!("http://{up}");
    Sluicegate::start(
        sluicegate_bin!(),
        &[
            "--config",
            path.to_str().unwrap(),
            "--gateway-listen",
            "127.0.0.1:0",
            "--upstream",
            &upstream,
        ],
    )
}

/// Keeps `n` requests of `client` in flight to `url` until `stop`; counts the answers.
fn load(
    url: String,
    client: &str,
    n: usize,
    stop: Arc<AtomicBool>,
) -> Arc<Mutex<HashMap<u16, u64>>> {
    let statuses = Arc::new(Mutex::new(HashMap::new()));
    let http = reqwest::Client::new();
    for _ in 0..n {
        let (url, client, stop, http) = (
            url.clone(),
            client.to_owned(),
            Arc::clone(&stop),
            http.clone(),
        );
        let statuses = Arc::clone(&statuses);
        tokio::spawn(async move {
            while !stop.load(Ordering::SeqCst) {
                let status = match http.get(&url).header("x-client", &client).send().await {
                    Ok(r) => r.status().as_u16(),
                    Err(_) => 0,
                };
                *statuses.lock().unwrap().entry(status).or_default() += 1;
            }
        });
    }
    statuses
}

/// Polls `cond` every 20 ms for up to `limit`; fails saying `what`.
async fn until(what: &str, limit: Duration, mut cond: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + limit;
    while !cond().await {
        assert!(Instant::now() < deadline, "never happened: {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn never_more_than_concurrency_at_the_upstream_under_200_clients() {
    let _serial = SERIAL.lock().await;
    let (up_addr, up) = slow_upstream(Duration::from_millis(20)).await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(
        dir.path(),
        up_addr,
        r#"
[[routes]]
path = "/"
policies = ["open"]
key = "header:x-client"
pool = "backend"

[[pools]]
name = "backend"
concurrency = 8
queue = 1000
max_wait = "60s"
"#,
    );
    let http = reqwest::Client::new();
    let mut tasks = Vec::new();
    for c in 0..200 {
        let (http, url) = (http.clone(), server.gateway_url("/work"));
        tasks.push(tokio::spawn(async move {
            let mut ok = 0;
            for _ in 0..3 {
                let r = http
                    .get(&url)
                    .header("x-client", format!("c{c}"))
                    .send()
                    .await
                    .unwrap();
                ok += usize::from(r.status() == 200);
            }
            ok
        }));
    }
    let mut ok = 0;
    for t in tasks {
        ok += t.await.unwrap();
    }
    assert_eq!(
        ok, 600,
        "every request waits its turn (queue and max_wait are ample)"
    );
    assert_eq!(up.started.load(Ordering::SeqCst), 600);
    assert_eq!(
        up.peak.load(Ordering::SeqCst),
        8,
        "never more than concurrency, and all of it used"
    );
    let metrics = reqwest::get(server.url("/metrics"))
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    assert!(
        metrics.contains(r#"sluicegate_pool_limit{pool="backend"} 8"#),
        "{metrics}"
    );
    assert!(
        metrics.contains("sluicegate_pool_wait_seconds_bucket{pool=\"backend\",level=\"default\"")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_light_client_is_not_stuck_behind_a_heavy_ones_backlog() {
    let _serial = SERIAL.lock().await;
    let (up_addr, up) = slow_upstream(Duration::from_millis(50)).await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(
        dir.path(),
        up_addr,
        r#"
[[routes]]
path = "/"
policies = ["open"]
key = "header:x-client"
pool = "backend"

[[pools]]
name = "backend"
concurrency = 4
queue = 1000
max_wait = "60s"
"#,
    );
    let stop = Arc::new(AtomicBool::new(false));
    let heavy = load(server.gateway_url("/work"), "heavy", 50, Arc::clone(&stop));
    let api = server.url("/metrics");
    until(
        "the heavy client's backlog forms",
        Duration::from_secs(30),
        async || {
            let m = reqwest::get(&api).await.unwrap().text().await.unwrap();
            m.contains(r#"sluicegate_pool_queued{pool="backend",level="default"} 46"#)
        },
    )
    .await;
    // Each light request: how many requests started at the upstream between its sending and
    // its own start there. Fair queuing: it takes the next free slot (a few at most). FIFO:
    // it would wait behind the ~46 heavy requests queued.
    let http = reqwest::Client::new();
    let mut overtaken = Vec::new();
    for _ in 0..20 {
        let before = up.started.load(Ordering::SeqCst);
        let r = http
            .get(server.gateway_url("/work"))
            .header("x-client", "light")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        let at: u64 = r.headers()["x-started-before"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        overtaken.push(at - before);
    }
    stop.store(true, Ordering::SeqCst);
    // One service time at 4 slots is 4 starts; allow two service times.
    let worst = *overtaken.iter().max().unwrap();
    assert!(
        worst <= 8,
        "the light client waited behind {overtaken:?} starts (FIFO: ~46)"
    );
    assert_eq!(up.peak.load(Ordering::SeqCst), 4);
    assert_eq!(heavy.lock().unwrap().get(&429), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn levels_split_by_shares_and_an_idle_level_lends_its_slots() {
    let _serial = SERIAL.lock().await;
    let (up_addr, up) = slow_upstream(Duration::from_millis(20)).await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(
        dir.path(),
        up_addr,
        r#"
[[routes]]
path = "/critical"
policies = ["open"]
key = "header:x-client"
pool = "backend"
level = "critical"

[[routes]]
path = "/batch"
policies = ["open"]
key = "header:x-client"
pool = "backend"
level = "batch"

[[pools]]
name = "backend"
concurrency = 8
queue = 1000
max_wait = "60s"
levels = { critical = 3, batch = 1 }
"#,
    );
    let stop_critical = Arc::new(AtomicBool::new(false));
    let stop_batch = Arc::new(AtomicBool::new(false));
    load(
        server.gateway_url("/critical"),
        "c",
        30,
        Arc::clone(&stop_critical),
    );
    load(
        server.gateway_url("/batch"),
        "b",
        30,
        Arc::clone(&stop_batch),
    );
    until(
        "both levels saturated",
        Duration::from_secs(30),
        async || up.path("/critical").started > 50 && up.path("/batch").started > 20,
    )
    .await;
    let (c0, b0) = (up.path("/critical").started, up.path("/batch").started);
    until("400 more starts", Duration::from_secs(60), async || {
        up.path("/critical").started + up.path("/batch").started >= c0 + b0 + 400
    })
    .await;
    let (c, b) = (
        up.path("/critical").started - c0,
        up.path("/batch").started - b0,
    );
    let share = c as f64 / (c + b) as f64;
    assert!(
        (share - 0.75).abs() <= 0.08,
        "critical got {c}, batch {b}: {share:.2} (shares 3:1)"
    );
    assert!(up.peak.load(Ordering::SeqCst) <= 8);
    // Critical goes idle: batch takes every slot.
    stop_critical.store(true, Ordering::SeqCst);
    until("critical drained", Duration::from_secs(30), async || {
        up.path("/critical").in_flight == 0
    })
    .await;
    up.reset_peaks();
    until(
        "batch uses all 8 slots",
        Duration::from_secs(30),
        async || up.path("/batch").peak == 8,
    )
    .await;
    stop_batch.store(true, Ordering::SeqCst);
}

fn gauge(metrics: &str, name: &str) -> Option<f64> {
    metrics
        .lines()
        .find(|l| l.starts_with(name))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
}

/// The adaptive limit end to end: 60 clients keep requests going through an adaptive pool
/// (2..=40) to an upstream of fixed service time, which never stretches with load, so the
/// limit climbs to its maximum while the latency is flat. Then the service time triples
/// (100 ms → 300 ms): the limit must fall, and with it what the upstream sees at once; then
/// it recovers: the limit must climb back, and the upstream sees the higher count again.
///
/// Robust on a loaded machine: the base latency (100 ms) is large against scheduling
/// noise, every phase waits for its condition (never a fixed time), and the assertions
/// are about directions with wide margins (at least halved, back above three quarters).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_adaptive_pool_follows_the_upstreams_latency() {
    let _serial = SERIAL.lock().await;
    let (up_addr, up) = slow_upstream(Duration::from_millis(100)).await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(
        dir.path(),
        up_addr,
        r#"
[[routes]]
path = "/"
policies = ["open"]
key = "header:x-client"
pool = "backend"

[[pools]]
name = "backend"
concurrency = "adaptive"
min_concurrency = 2
max_concurrency = 40
queue = 1000
max_wait = "600s"
"#,
    );
    let stop = Arc::new(AtomicBool::new(false));
    let statuses = load(server.gateway_url("/work"), "many", 60, Arc::clone(&stop));
    let api = server.url("/metrics");
    let pool_lines = async || {
        let m = reqwest::get(&api).await.unwrap().text().await.unwrap();
        m.lines()
            .filter(|l| l.starts_with("sluicegate_pool_l"))
            .map(str::to_owned)
            .collect::<Vec<_>>()
    };
    let limit = async || {
        let m = reqwest::get(&api).await.unwrap().text().await.unwrap();
        gauge(&m, r#"sluicegate_pool_limit{pool="backend"}"#).unwrap()
    };
    // The most requests the upstream had at once while it started `starts` more.
    let at_upstream = async |starts: u64| {
        up.reset_peaks();
        let from = up.started.load(Ordering::SeqCst);
        until("requests flow", Duration::from_secs(120), async || {
            up.started.load(Ordering::SeqCst) >= from + starts
        })
        .await;
        up.peak.load(Ordering::SeqCst)
    };
    until(
        "the limit climbs to its maximum while latency is flat",
        Duration::from_secs(120),
        async || limit().await >= 40.0,
    )
    .await;
    let fast = at_upstream(200).await;
    assert!(
        fast >= 30,
        "the upstream saw at most {fast} at once at the limit of 40; {:?}",
        pool_lines().await
    );

    // Latency triples: the limit drops, and so does what the upstream sees at once.
    up.service_ms.store(300, Ordering::SeqCst);
    until(
        "the limit drops below half",
        Duration::from_secs(120),
        async || limit().await <= 10.0,
    )
    .await;
    let low = limit().await;
    // Requests admitted before the drop finish; then the upstream sees the new limit.
    until(
        "the upstream drains to the lower limit",
        Duration::from_secs(120),
        async || up.in_flight.load(Ordering::SeqCst) <= 10,
    )
    .await;
    let slow = at_upstream(40).await;
    assert!(
        slow * 2 <= fast,
        "in flight at the upstream: {fast} fast, {slow} slow (limit {low}); {:?}",
        pool_lines().await
    );

    // Latency recovers: the limit climbs back, and the upstream sees more at once again.
    up.service_ms.store(100, Ordering::SeqCst);
    until(
        "the limit climbs back",
        Duration::from_secs(120),
        async || limit().await >= 30.0,
    )
    .await;
    let again = at_upstream(200).await;
    assert!(
        again >= 2 * slow.max(1) && again >= 20,
        "in flight at the upstream after recovery: {again} (slow phase {slow}); {:?}",
        pool_lines().await
    );
    stop.store(true, Ordering::SeqCst);
    let statuses = statuses.lock().unwrap().clone();
    assert_eq!(
        statuses.keys().copied().collect::<Vec<_>>(),
        vec![200],
        "every request admitted (ample queue and max_wait): {statuses:?}"
    );
}

/// The value of the sample `name{labels}` (the whole series text) on `/metrics`, 0 when
/// absent.
async fn metric(api: &str, series: &str) -> f64 {
    let m = reqwest::get(api).await.unwrap().text().await.unwrap();
    m.lines()
        .find(|l| l.starts_with(series) && l[series.len()..].starts_with(' '))
        .and_then(|l| l.rsplit(' ').next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_client_that_goes_away_leaves_the_queue_and_the_gauges_at_once() {
    let _serial = SERIAL.lock().await;
    let (up_addr, up) = slow_upstream(Duration::from_secs(3600)).await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(
        dir.path(),
        up_addr,
        r#"
[[routes]]
path = "/"
policies = ["open"]
key = "header:x-client"
pool = "backend"

[[pools]]
name = "backend"
concurrency = 1
queue = 10
max_wait = "1h"
"#,
    );
    let api = server.url("/metrics");
    let labels = r#"{pool="backend",level="default"}"#;
    let series = |name: &str| format!("{name}{labels}");
    let send = |client: &str| {
        let (url, client) = (server.gateway_url("/work"), client.to_owned());
        tokio::spawn(async move {
            reqwest::Client::new()
                .get(url)
                .header("x-client", client)
                .send()
                .await
                .map(|r| r.status().as_u16())
        })
    };
    let a = send("a");
    until("a at the upstream", Duration::from_secs(30), async || {
        up.in_flight.load(Ordering::SeqCst) == 1
    })
    .await;
    let b = send("b");
    until("b queued", Duration::from_secs(30), async || {
        metric(&api, &series("sluicegate_pool_queued")).await == 1.0
    })
    .await;
    assert_eq!(
        metric(&api, &series("sluicegate_pool_in_flight")).await,
        1.0
    );

    // b's client goes away while it waits: it leaves the queue, and is counted as cancelled,
    // not as a wait (the histogram holds admitted requests only) nor as a rejection.
    b.abort();
    until("b left the queue", Duration::from_secs(30), async || {
        metric(&api, &series("sluicegate_pool_queued")).await == 0.0
    })
    .await;
    assert_eq!(
        metric(&api, &series("sluicegate_pool_cancelled_total")).await,
        1.0
    );
    assert_eq!(
        metric(&api, &series("sluicegate_pool_in_flight")).await,
        1.0
    );
    assert_eq!(
        metric(&api, &series("sluicegate_pool_wait_seconds_count")).await,
        1.0,
        "only a, admitted at once"
    );
    for reason in ["queue_full", "timeout"] {
        let s = format!(
            r#"sluicegate_pool_rejections_total{{pool="backend",level="default",reason="{reason}"}}"#
        );
        assert_eq!(metric(&api, &s).await, 0.0, "{reason}");
    }

    // a's client goes away while the upstream still works on it: its slot is freed at once.
    a.abort();
    until("a's slot freed", Duration::from_secs(30), async || {
        metric(&api, &series("sluicegate_pool_in_flight")).await == 0.0
    })
    .await;
    // The freed slot really is free: c goes through (a quick upstream now).
    up.service_ms.store(1, Ordering::SeqCst);
    let c = tokio::time::timeout(Duration::from_secs(30), send("c"))
        .await
        .expect("c got the freed slot")
        .unwrap();
    assert_eq!(c.unwrap(), 200);
    assert_eq!(
        metric(&api, &series("sluicegate_pool_wait_seconds_count")).await,
        2.0
    );
    assert_eq!(
        metric(&api, &series("sluicegate_pool_in_flight")).await,
        0.0
    );
    assert_eq!(
        metric(&api, &series("sluicegate_pool_cancelled_total")).await,
        1.0,
        "a was running, not waiting: not a cancelled wait"
    );
}
