//! The tower layer's end of a request, over real HTTP on loopback:
//! - a concurrency lease is held while the response body streams and freed when it ends,
//!   or when the client goes away mid-body;
//! - a route's `settle = "header:x-cost"` sets the real cost (the header never reaches the
//!   client) and `settle = "openai-usage"` reads a streamed body's final usage event.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::routing::any;
use sluicegate_core::{AlgorithmKind, CheckRequest, MemoryStore, Policy};
use sluicegate_middleware::{KeySpec, RateLimitLayer, RateLimiter, RouteSpec};
use sluicegate_testkit::eventually;
use tokio::sync::mpsc;

type Senders = Arc<Mutex<Vec<mpsc::Sender<String>>>>;

fn inflight() -> Policy {
    Policy::builder(
        "inflight",
        AlgorithmKind::Concurrency,
        1,
        Duration::from_secs(3600),
    )
    .build()
    .unwrap()
}

fn tokens() -> Policy {
    sluicegate_testkit::policy(
        "tokens",
        AlgorithmKind::TokenBucket,
        1000,
        Duration::from_secs(30 * 86_400),
    )
}

/// Every request's body streams from a channel the test holds (the head goes at once);
/// `/cost` answers `x-cost: 7` at once.
async fn serve(store: Arc<MemoryStore>) -> (String, Senders) {
    let senders: Senders = Arc::default();
    let seen = Arc::clone(&senders);
    let streaming = any(move || {
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
    });
    let limiter = RateLimiter::builder(store)
        .policy(inflight())
        .policy(tokens())
        .route(RouteSpec::new("/slow", &["inflight"]).key(KeySpec::Global))
        .route(
            RouteSpec::new("/cost", &["tokens"])
                .key(KeySpec::Global)
                .response_rules(1, Some("header:x-cost"), None),
        )
        .route(
            RouteSpec::new("/llm", &["tokens"])
                .key(KeySpec::Header("x-org".parse().unwrap()))
                .response_rules(100, Some("openai-usage"), None),
        )
        .build()
        .unwrap();
    let app = Router::new()
        .route("/slow", streaming.clone())
        .route("/llm", streaming)
        .route("/cost", any(|| async { ([("x-cost", "7")], "done") }))
        .layer(RateLimitLayer::new(limiter));
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
    (format!("http://{addr}"), senders)
}

async fn status(url: &str) -> u16 {
    reqwest::get(url).await.unwrap().status().as_u16()
}

fn remaining(store: &MemoryStore, policy: Policy, key: &str) -> u64 {
    let policies = [Arc::new(policy)];
    store
        .check_now(CheckRequest::new(&policies, key, 0))
        .unwrap()
        .decisions[0]
        .decision
        .remaining
}

#[tokio::test]
async fn a_lease_is_held_while_the_body_streams_and_freed_when_it_ends() {
    let store = Arc::new(MemoryStore::new(1000));
    let (url, senders) = serve(Arc::clone(&store)).await;
    let slow = format!("{url}/slow");
    let mut first = reqwest::get(&slow).await.unwrap();
    assert_eq!(first.status(), 200);
    let body = senders.lock().unwrap()[0].clone();
    body.send("part".into()).await.unwrap();
    assert_eq!(first.chunk().await.unwrap().unwrap(), "part");
    // Head sent, body open: the slot is still taken.
    assert_eq!(status(&slow).await, 429);
    drop(body);
    senders.lock().unwrap().clear();
    assert_eq!(first.chunk().await.unwrap(), None);
    eventually("the ended body's lease is freed", || async {
        remaining(&store, inflight(), "global") == 1
    })
    .await;
    // A client that goes away mid-body frees its slot too.
    let second = reqwest::get(&slow).await.unwrap();
    assert_eq!(second.status(), 200);
    assert_eq!(status(&slow).await, 429);
    drop(second);
    eventually("the dropped body's lease is freed", || async {
        remaining(&store, inflight(), "global") == 1
    })
    .await;
    senders.lock().unwrap().clear();
}

#[tokio::test]
async fn the_layer_settles_from_a_header_and_from_a_streamed_usage_event() {
    let store = Arc::new(MemoryStore::new(1000));
    let (url, senders) = serve(Arc::clone(&store)).await;
    let r = reqwest::get(format!("{url}/cost")).await.unwrap();
    assert!(r.headers().get("x-cost").is_none());
    assert_eq!(r.text().await.unwrap(), "done");
    eventually("the header's cost is charged", || async {
        remaining(&store, tokens(), "global") == 993
    })
    .await;
    let client = reqwest::Client::new();
    let mut r = client
        .get(format!("{url}/llm"))
        .header("x-org", "acme")
        .send()
        .await
        .unwrap();
    let body = senders.lock().unwrap()[0].clone();
    body.send("data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\n".into())
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&r.chunk().await.unwrap().unwrap()).contains("hi"));
    body.send("data: {\"usage\":{\"total_tokens\":250}}\n\ndata: [DONE]\n\n".into())
        .await
        .unwrap();
    drop(body);
    senders.lock().unwrap().clear();
    while r.chunk().await.unwrap().is_some() {}
    eventually("the usage is charged", || async {
        remaining(&store, tokens(), "header:x-org:acme") == 750
    })
    .await;
}
