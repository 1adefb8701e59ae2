//! Pools through the tower layer, over real HTTP on loopback: the handler counts what it
//! sees and holds every request until the test lets it go, so nothing here depends on
//! timing — the test polls the counts it waits for.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::http::HeaderMap;
use axum::routing::any;
use sluicegate_core::{AlgorithmKind, MemoryStore};
use sluicegate_middleware::{KeySpec, Pool, RateLimitLayer, RateLimiter, RejectionBody, RouteSpec};
use sluicegate_throttle::PoolSpec;
use tokio::sync::Semaphore;
use tokio::sync::mpsc;

/// What the upstream (the handler) saw.
struct Upstream {
    in_flight: AtomicUsize,
    peak: AtomicUsize,
    entered: Mutex<Vec<String>>,
    gate: Arc<Semaphore>,
}

fn limiter(pool: Arc<Pool>) -> RateLimiter {
    RateLimiter::builder(Arc::new(MemoryStore::new(10_000)))
        .policy(sluicegate_testkit::policy(
            "open",
            AlgorithmKind::TokenBucket,
            1_000_000,
            Duration::from_secs(1),
        ))
        .route(
            RouteSpec::new("/", &["open"])
                .key(KeySpec::Header("x-client".parse().unwrap()))
                .pool("backend", None),
        )
        .pool(pool)
        .build()
        .unwrap()
}

/// Serves `app` behind the layer with `pool` on loopback; returns the URL of `/work`.
async fn listen(app: Router, pool: Arc<Pool>) -> String {
    let app = app.layer(RateLimitLayer::new(limiter(pool)));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(
            listener,
            app.into_make_service_with_connect_info::<SocketAddr>(),
        )
        .await
        .unwrap();
    });
    format!("http://{addr}/work")
}

async fn serve(pool: Arc<Pool>) -> (String, Arc<Upstream>) {
    let upstream = Arc::new(Upstream {
        in_flight: AtomicUsize::new(0),
        peak: AtomicUsize::new(0),
        entered: Mutex::new(Vec::new()),
        gate: Arc::new(Semaphore::new(0)),
    });
    let seen = Arc::clone(&upstream);
    let app = Router::new().fallback(any(move |headers: HeaderMap| {
        let up = Arc::clone(&seen);
        async move {
            let now = up.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
            up.peak.fetch_max(now, Ordering::SeqCst);
            let client = headers["x-client"].to_str().unwrap().to_owned();
            up.entered.lock().unwrap().push(client);
            up.gate.acquire().await.unwrap().forget();
            up.in_flight.fetch_sub(1, Ordering::SeqCst);
            "ok"
        }
    }));
    (listen(app, pool).await, upstream)
}

fn send(url: &str, client: &str) -> tokio::task::JoinHandle<reqwest::Response> {
    let (url, client) = (url.to_owned(), client.to_owned());
    tokio::spawn(async move {
        reqwest::Client::new()
            .get(url)
            .header("x-client", client)
            .send()
            .await
            .unwrap()
    })
}

/// Polls `cond` until it holds (30 s at most, then the test fails saying `what`).
async fn until(what: &str, cond: impl Fn() -> bool) {
    for _ in 0..3_000 {
        if cond() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("never happened: {what}");
}

fn pool(concurrency: u32, queue: usize, max_wait: Duration) -> Arc<Pool> {
    let spec = PoolSpec::fixed("backend", concurrency)
        .queue(queue)
        .max_wait_micros(max_wait.as_micros() as u64);
    Pool::new(spec.validate().unwrap())
}

#[tokio::test]
async fn holds_the_upstream_at_its_concurrency_queues_the_rest_and_refuses_beyond() {
    let pool = pool(2, 3, Duration::from_secs(3600));
    let (url, up) = serve(Arc::clone(&pool)).await;
    let waiting: Vec<_> = (0..5).map(|i| send(&url, &format!("c{i}"))).collect();
    until("2 at the upstream, 3 queued", || {
        up.in_flight.load(Ordering::SeqCst) == 2 && pool.load().1 == 3
    })
    .await;
    let refused = send(&url, "late").await.unwrap();
    assert_eq!(refused.status(), 429);
    let retry: u64 = refused.headers()["retry-after"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    assert!(retry >= 1);
    let body: RejectionBody = refused.json().await.unwrap();
    assert_eq!(
        (body.error.as_str(), body.policy.as_str()),
        ("rate_limit_exceeded", "backend")
    );
    assert_eq!(body.retry_after_seconds, retry);
    up.gate.add_permits(5);
    for w in waiting {
        assert_eq!(w.await.unwrap().status(), 200);
    }
    assert_eq!(up.peak.load(Ordering::SeqCst), 2);
    assert_eq!(pool.load(), (0, 0, 2));
    assert_eq!(pool.levels()[0].rejected_full, 1);
}

#[tokio::test]
async fn a_light_client_goes_before_a_heavy_clients_backlog() {
    let pool = pool(2, 100, Duration::from_secs(3600));
    let (url, up) = serve(Arc::clone(&pool)).await;
    let heavy: Vec<_> = (0..20).map(|_| send(&url, "heavy")).collect();
    until("heavy fills the pool", || pool.load().1 == 18).await;
    let light = send(&url, "light");
    until("light queued", || pool.load().1 == 19).await;
    // One slot frees: it goes to the light client, not the heavy one's 18 waiting.
    up.gate.add_permits(1);
    until("third request entered", || {
        up.entered.lock().unwrap().len() == 3
    })
    .await;
    assert_eq!(up.entered.lock().unwrap()[2], "light");
    up.gate.add_permits(100);
    assert_eq!(light.await.unwrap().status(), 200);
    for h in heavy {
        assert_eq!(h.await.unwrap().status(), 200);
    }
    assert_eq!(up.peak.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_waiting_request_whose_client_leaves_leaves_the_queue() {
    let pool = pool(1, 10, Duration::from_secs(3600));
    let (url, up) = serve(Arc::clone(&pool)).await;
    let first = send(&url, "a");
    until("a at the upstream", || {
        up.in_flight.load(Ordering::SeqCst) == 1
    })
    .await;
    let gone = send(&url, "b");
    until("b queued", || pool.load().1 == 1).await;
    gone.abort();
    until("b left the queue", || pool.load().1 == 0).await;
    assert_eq!(pool.levels()[0].cancelled, 1);
    up.gate.add_permits(1);
    assert_eq!(first.await.unwrap().status(), 200);
    until("the slot is free", || pool.load().0 == 0).await;
    assert_eq!(*up.entered.lock().unwrap(), vec!["a".to_owned()]);
}

#[tokio::test]
async fn a_request_waiting_past_max_wait_gets_429() {
    let pool = pool(1, 10, Duration::from_millis(100));
    let (url, up) = serve(Arc::clone(&pool)).await;
    let first = send(&url, "a");
    until("a at the upstream", || {
        up.in_flight.load(Ordering::SeqCst) == 1
    })
    .await;
    let late = send(&url, "b").await.unwrap();
    assert_eq!(late.status(), 429);
    let body: RejectionBody = late.json().await.unwrap();
    assert!(body.message.contains("max_wait"), "{}", body.message);
    assert_eq!(pool.levels()[0].rejected_timeout, 1);
    up.gate.add_permits(1);
    assert_eq!(first.await.unwrap().status(), 200);
}

/// Each request's body is streamed from a channel the test holds: the handler answers the
/// head at once and the body ends when the test drops the sender.
async fn serve_streaming(pool: Arc<Pool>) -> (String, Arc<Mutex<Vec<mpsc::Sender<String>>>>) {
    let senders: Arc<Mutex<Vec<mpsc::Sender<String>>>> = Arc::default();
    let seen = Arc::clone(&senders);
    let app = Router::new().fallback(any(move || {
        let senders = Arc::clone(&seen);
        async move {
            let (tx, rx) = mpsc::channel::<String>(4);
            senders.lock().unwrap().push(tx);
            let stream = futures_util::stream::unfold(rx, |mut rx| async move {
                let chunk = rx.recv().await?;
                Some((Ok::<_, std::io::Error>(chunk), rx))
            });
            axum::body::Body::from_stream(stream)
        }
    }));
    (listen(app, pool).await, senders)
}

#[tokio::test]
async fn a_streaming_body_keeps_its_slot_until_it_ends() {
    let pool = pool(1, 10, Duration::from_secs(3600));
    let (url, senders) = serve_streaming(Arc::clone(&pool)).await;
    let mut first = send(&url, "a").await.unwrap();
    assert_eq!(first.status(), 200, "the head has arrived");
    let a_body = senders.lock().unwrap()[0].clone();
    a_body.send("part one".into()).await.unwrap();
    drop(a_body);
    assert_eq!(first.chunk().await.unwrap().unwrap(), "part one");
    // The body is still open: the slot is still taken, so a second request queues.
    let second = send(&url, "b");
    until("b queued behind a's open body", || pool.load() == (1, 1, 1)).await;
    assert_eq!(
        senders.lock().unwrap().len(),
        1,
        "b never reached the upstream"
    );
    // The body ends: its slot goes to b.
    senders.lock().unwrap().remove(0);
    assert_eq!(first.chunk().await.unwrap(), None);
    until("b got the slot", || senders.lock().unwrap().len() == 1).await;
    assert_eq!(pool.load(), (1, 0, 1));
    senders.lock().unwrap().clear();
    assert_eq!(second.await.unwrap().text().await.unwrap(), "");
    until("the slot is free", || pool.load() == (0, 0, 1)).await;
}

#[tokio::test]
async fn a_streaming_body_dropped_by_its_client_frees_its_slot() {
    let pool = pool(1, 10, Duration::from_secs(3600));
    let (url, senders) = serve_streaming(Arc::clone(&pool)).await;
    let first = send(&url, "a").await.unwrap();
    assert_eq!(first.status(), 200);
    let second = send(&url, "b");
    until("b queued behind a's open body", || pool.load() == (1, 1, 1)).await;
    // The client goes away mid-body: the server drops the body, and with it the slot.
    drop(first);
    until("b got the slot", || senders.lock().unwrap().len() == 2).await;
    assert_eq!(pool.load(), (1, 0, 1));
    senders.lock().unwrap().clear();
    assert_eq!(second.await.unwrap().status(), 200);
    until("the slot is free", || pool.load() == (0, 0, 1)).await;
}

/// Reads `body` to its end.
async fn drain<B: http_body::Body + Unpin>(mut body: B)
where
    B::Error: std::fmt::Debug,
{
    use http_body_util::BodyExt;
    while let Some(frame) = body.frame().await {
        frame.unwrap();
    }
}

#[tokio::test]
async fn only_bodies_sent_to_their_end_teach_the_adaptive_limit() {
    use http_body_util::Full;
    use sluicegate_middleware::PermitBody;
    // A window is 8 samples at the starting limit's minimum; the floor appears after one.
    let spec = PoolSpec::adaptive("backend", 1, 8).validate().unwrap();
    let pool = Pool::new(spec);
    for _ in 0..16 {
        let permit = pool.acquire(0, "a", 1).await.unwrap();
        // The client went away mid-body: the slot is freed, without a sample.
        drop(PermitBody::new(
            Full::new(bytes::Bytes::from("x")),
            Some(permit),
        ));
    }
    assert_eq!(pool.load().0, 0, "every slot freed");
    assert_eq!(
        pool.status().latency_floor,
        None,
        "no sample from a cut body"
    );
    for _ in 0..8 {
        let permit = pool.acquire(0, "a", 1).await.unwrap();
        drain(PermitBody::new(
            Full::new(bytes::Bytes::from("x")),
            Some(permit),
        ))
        .await;
    }
    assert_eq!(pool.load().0, 0);
    assert!(
        pool.status().latency_floor.is_some(),
        "8 complete bodies: one window"
    );
}
