//! Response-aware routes through the real binary's gateway (`cost`, `settle`, `count`):
//! - an OpenAI-style streaming completion (server-sent events, usage in the final event):
//!   the first event reaches the client before the upstream has sent the rest (nothing is
//!   buffered), and the token budget is enforced exactly from the reported usage;
//! - a JSON completion's usage gives back what the estimate over-charged;
//! - `settle = "header:x-cost"`: the upstream's header sets the cost and never reaches the
//!   client;
//! - `count = "failures"`: successes are given back, failures count.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use reqwest::Client;
use serde_json::Value;
use sluicegate_testkit::{Sluicegate as Server, eventually, sluicegate_bin, write};
use tokio::sync::Notify;

#[derive(Default)]
struct Upstream {
    /// The streaming completion waits for this before its final events.
    go_on: Notify,
}

#[derive(serde::Deserialize)]
struct Params {
    tokens: Option<u64>,
    status: Option<u16>,
    cost: Option<u64>,
}

async fn stream(State(up): State<Arc<Upstream>>, Query(p): Query<Params>) -> Response {
    let tokens = p.tokens.unwrap_or(0);
    let first = "data: {\"choices\":[{\"delta\":{\"content\":\"hello\"}}]}\n\n".to_owned();
    let last = format!(
        "data: {{\"choices\":[],\"usage\":{{\"prompt_tokens\":1,\"completion_tokens\":{},\"total_tokens\":{tokens}}}}}\n\ndata: [DONE]\n\n",
        tokens.saturating_sub(1)
    );
    let events = futures_util::stream::unfold(0u8, move |step| {
        let (up, first, last) = (Arc::clone(&up), first.clone(), last.clone());
        async move {
            match step {
                0 => Some((Ok::<_, std::io::Error>(first), 1)),
                1 => {
                    up.go_on.notified().await;
                    Some((Ok(last), 2))
                }
                _ => None,
            }
        }
    });
    (
        [("content-type", "text/event-stream")],
        Body::from_stream(events),
    )
        .into_response()
}

async fn json(Query(p): Query<Params>) -> impl IntoResponse {
    let tokens = p.tokens.unwrap_or(0);
    axum::Json(serde_json::json!({
        "choices": [{"message": {"content": "hi"}}],
        "usage": {"prompt_tokens": 1, "completion_tokens": tokens - 1, "total_tokens": tokens}
    }))
}

async fn cost(Query(p): Query<Params>) -> impl IntoResponse {
    let mut headers = HeaderMap::new();
    headers.insert("x-cost", p.cost.unwrap_or(0).to_string().parse().unwrap());
    (headers, "charged")
}

async fn flaky(Query(p): Query<Params>) -> impl IntoResponse {
    StatusCode::from_u16(p.status.unwrap_or(200)).unwrap()
}

async fn upstream() -> (SocketAddr, Arc<Upstream>) {
    let state = Arc::new(Upstream::default());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let app = Router::new()
        .route("/llm/stream", get(stream))
        .route("/llm/json", get(json))
        .route("/cost", get(cost))
        .route("/flaky", get(flaky))
        .with_state(Arc::clone(&state));
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, state)
}

const CONFIG: &str = r#"
[[policies]]
name = "tokens"
algorithm = "token_bucket"
limit = 1000
period = "30d"

[[policies]]
name = "units"
algorithm = "token_bucket"
limit = 50
period = "30d"

[[policies]]
name = "fails"
algorithm = "token_bucket"
limit = 3
period = "30d"

[[routes]]
path = "/llm"
key = "header:x-org"
policies = ["tokens"]
cost = 100
settle = "openai-usage"

[[routes]]
path = "/cost"
key = "global"
policies = ["units"]
cost = 10
settle = "header:x-cost"

[[routes]]
path = "/flaky"
key = "global"
policies = ["fails"]
count = "failures"

[gateway]
listen = "127.0.0.1:0"
upstream = "http://127.0.0.1:1"
"#;

async fn remaining(server: &Server, policy: &str, key: &str) -> u64 {
    let r: Value = Client::new()
        .get(server.url(&format!("/v1/limits/{policy}/{key}")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    r["remaining"].as_u64().unwrap()
}

async fn settled_to(server: &Server, policy: &str, key: &str, want: u64) {
    eventually(&format!("{policy}/{key} at {want}"), || async {
        remaining(server, policy, key).await == want
    })
    .await;
    assert_eq!(remaining(server, policy, key).await, want);
}

fn start(up: SocketAddr) -> (tempfile::TempDir, Server) {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "r.toml", CONFIG);
    let server = Server::start(
        sluicegate_bin!(),
        &[
            "--config",
            path.to_str().unwrap(),
            "--gateway-listen",
            "127.0.0.1:0",
            "--upstream",
            &format!("http://{up}"),
        ],
    );
    (dir, server)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_streamed_completion_settles_its_tokens_exactly_without_buffering() {
    let (up, state) = upstream().await;
    let (_dir, server) = start(up);
    let client = Client::new();
    // Budget 1000 tokens; each completion is charged 100 on arrival and really uses 300.
    for (n, left) in [(1, 700), (2, 400), (3, 100), (4, 0)] {
        let mut r = client
            .get(server.gateway_url("/llm/stream?tokens=300"))
            .header("x-org", "acme")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200, "completion {n}");
        // The first event arrives while the upstream still holds the rest back.
        let first = r.chunk().await.unwrap().expect("a first event");
        assert!(
            String::from_utf8_lossy(&first).contains("hello"),
            "completion {n}"
        );
        state.go_on.notify_one();
        let mut rest = Vec::new();
        while let Some(chunk) = r.chunk().await.unwrap() {
            rest.extend_from_slice(&chunk);
        }
        let rest = String::from_utf8(rest).unwrap();
        assert!(rest.contains("\"total_tokens\":300") && rest.ends_with("data: [DONE]\n\n"));
        // The 4th was admitted with 100 left and used 300: the key is 200 in debt.
        settled_to(&server, "tokens", "header:x-org:acme", left).await;
    }
    let r = client
        .get(server.gateway_url("/llm/stream?tokens=1"))
        .header("x-org", "acme")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429, "the budget is spent");
    // A JSON completion that used less than its estimate gets the difference back.
    let r = client
        .get(server.gateway_url("/llm/json?tokens=40"))
        .header("x-org", "other")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    let body: Value = r.json().await.unwrap();
    assert_eq!(body["usage"]["total_tokens"], 40);
    settled_to(&server, "tokens", "header:x-org:other", 960).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cost_header_settles_and_failures_alone_count() {
    let (up, _state) = upstream().await;
    let (_dir, server) = start(up);
    let client = Client::new();
    let r = client
        .get(server.gateway_url("/cost?cost=25"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    assert!(
        r.headers().get("x-cost").is_none(),
        "the cost header reached the client"
    );
    assert_eq!(r.text().await.unwrap(), "charged");
    settled_to(&server, "units", "global", 25).await;
    // count = "failures": successes are given back, whatever their number.
    for _ in 0..5 {
        let r = client
            .get(server.gateway_url("/flaky?status=200"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
    }
    settled_to(&server, "fails", "global", 3).await;
    for left in [2, 1, 0] {
        let r = client
            .get(server.gateway_url("/flaky?status=500"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 500);
        settled_to(&server, "fails", "global", left).await;
    }
    let r = client
        .get(server.gateway_url("/flaky?status=200"))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 429, "three failures spent the limit");
}
