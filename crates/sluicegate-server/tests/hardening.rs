//! Issue 11, HTTP side, attacked the way a client would: the real binary over real
//! sockets, raw bytes where a client library would tidy the request up.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::Request;
use axum::http::HeaderValue;
use axum::response::Response;
use reqwest::Client;
use serde_json::Value;
use sluicegate_testkit::{
    Sluicegate as Server, closed_by_server, free_port, sluicegate_bin, write,
};

/// Sends raw bytes, reads the whole answer (the request says `Connection: close`).
fn raw(addr: SocketAddr, request: &[u8]) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(request).unwrap();
    let mut answer = Vec::new();
    let _ = stream.read_to_end(&mut answer);
    let text = String::from_utf8_lossy(&answer).into_owned();
    let status = text
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {text:?}"));
    (status, text)
}

/// A GET of `path` exactly as written, with extra header lines.
fn get(addr: SocketAddr, path: &str, headers: &[&str]) -> (u16, String) {
    let mut request = format!("GET {path} HTTP/1.1\r\nHost: test\r\nConnection: close\r\n");
    for h in headers {
        request.push_str(h);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    raw(addr, request.as_bytes())
}

/// Echoes what it saw in headers.
async fn echo(request: Request) -> Response {
    let mut response = Response::new(axum::body::Body::from("upstream"));
    let h = response.headers_mut();
    let xff = request
        .headers()
        .get_all("x-forwarded-for")
        .iter()
        .map(|v| v.to_str().unwrap_or("?").to_owned())
        .collect::<Vec<_>>()
        .join(" | ");
    h.insert("x-seen-xff", HeaderValue::from_str(&xff).unwrap());
    h.insert(
        "x-seen-uri",
        HeaderValue::from_str(&request.uri().to_string()).unwrap(),
    );
    response
}

async fn upstream() -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        axum::serve(listener, Router::new().fallback(echo))
            .await
            .unwrap();
    });
    addr
}

/// An upstream that accepts and never answers.
fn silent_upstream() -> SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        let mut held = Vec::new();
        for stream in listener.incoming() {
            held.push(stream);
        }
    });
    addr
}

fn config(extra_server: &str, upstream: SocketAddr) -> String {
    format!(
        r#"
[server]
listen = "127.0.0.1:0"
trusted_proxies = ["127.0.0.1/32"]
{extra_server}

[[policies]]
name = "auth"
algorithm = "fixed_window"
limit = 3
period = "1h"

[[routes]]
path = "/api/auth"
policies = ["auth"]

[[routes]]
path = "/Admin"
policies = ["auth"]
case_insensitive = true

[gateway]
listen = "127.0.0.1:0"
upstream = "http://{upstream}"
upstream_timeout = "500ms"
"#
    )
}

fn start(dir: &tempfile::TempDir, toml: &str) -> Server {
    let path = write(dir.path(), "sluicegate.toml", toml);
    Server::start_with(
        sluicegate_bin!(),
        &["--config", path.to_str().unwrap()],
        false,
    )
}

const SPELLINGS: &[&str] = &[
    "/api/%61uth/login",
    "/api//auth/login",
    "/api/./auth/login",
    "/api/x/../auth/login",
    "/api/%2e%2E/api/auth",
    "/api%2Fauth/login",
    "/api/auth;jsessionid=1/login",
    "/api/x/..;/auth/login",
    "/api/auth/%zz",
];

/// Each spelling, for a client of its own: two plain requests and one spelled are
/// admitted, the next spelled one is refused. One bucket, whatever the spelling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn path_spellings_meet_the_same_limit_through_forward_auth_and_the_gateway() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir, &config("", up));
    let gateway = server.gateway.unwrap();
    for (i, spelling) in SPELLINGS.iter().enumerate() {
        // Forward-auth: nginx sends $request_uri as it came.
        let xff = format!("X-Forwarded-For: 198.51.100.{i}");
        let fa = |uri: &str| {
            get(
                server.api,
                "/v1/forward-auth",
                &[&format!("X-Original-URI: {uri}"), &xff],
            )
            .0
        };
        assert_eq!(fa("/api/auth/login"), 200);
        assert_eq!(fa("/api/auth"), 200);
        assert_eq!(fa(spelling), 200, "{spelling}");
        assert_eq!(fa(spelling), 429, "forward-auth let {spelling} through");

        // The gateway, raw on the wire.
        let xff = format!("X-Forwarded-For: 203.0.113.{i}");
        let gw = |path: &str| get(gateway, path, &[&xff]).0;
        assert_eq!(gw("/api/auth/login"), 200);
        assert_eq!(gw("/api/auth"), 200);
        assert_eq!(gw(spelling), 200, "{spelling}");
        assert_eq!(gw(spelling), 429, "the gateway let {spelling} through");
    }
    // case_insensitive routes.
    let xff = "X-Forwarded-For: 192.0.2.99";
    for path in ["/admin/x", "/ADMIN/y", "/aDmIn"] {
        assert_eq!(get(gateway, path, &[xff]).0, 200, "{path}");
    }
    assert_eq!(get(gateway, "/AdMiN/%7e", &[xff]).0, 429);
    // `//x` is a path, not a host; the query is not part of the path.
    let xff = "X-Forwarded-For: 192.0.2.98";
    for uri in ["//api/auth", "/api/auth?x=1", "/api/auth#frag"] {
        let (status, _) = get(
            server.api,
            "/v1/forward-auth",
            &[&format!("X-Original-URI: {uri}"), xff],
        );
        assert_eq!(status, 200, "{uri}");
    }
    let (status, _) = get(
        server.api,
        "/v1/forward-auth",
        &["X-Original-URI: /api/auth", xff],
    );
    assert_eq!(status, 429);
}

/// Traefik and Caddy pass the client's headers to the auth call: the pair that is not
/// configured must change nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_auth_reads_only_the_configured_header_pair() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir, &config(r#"forward_auth_source = "x-forwarded""#, up));
    let xff = "X-Forwarded-For: 198.51.100.200";
    let decide = |headers: &[&str]| {
        let mut all = headers.to_vec();
        all.push(xff);
        get(server.api, "/v1/forward-auth", &all)
    };
    for _ in 0..3 {
        // The client adds X-Original-URI of an unlimited path: ignored.
        let (status, _) = decide(&["X-Forwarded-Uri: /api/auth", "X-Original-URI: /public"]);
        assert_eq!(status, 200);
    }
    let (status, text) = decide(&["X-Forwarded-Uri: /api/auth", "X-Original-URI: /public"]);
    assert_eq!(status, 429, "{text}");
    // Without the configured header there is nothing to decide: 400, never a 200.
    let (status, text) = decide(&["X-Original-URI: /api/auth"]);
    assert_eq!(status, 400, "{text}");
    assert!(text.contains("x-forwarded-uri"), "{text}");
    // The method comes from the configured pair too.
    let (status, _) = decide(&["X-Forwarded-Uri: /public", "X-Forwarded-Method: G E T"]);
    assert_eq!(status, 400);
}

/// Proxies send the auth call as GET; the methods an OpenAPI document can declare are all
/// answered, an extension method (`QUERY`, `PROPFIND`) is 405 with `Allow`, as the spec
/// says (schemathesis checks it too), and decides nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forward_auth_answers_405_with_allow_to_extension_methods() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir, &config("", up));
    for method in ["QUERY", "PROPFIND"] {
        let request = format!(
            "{method} /v1/forward-auth HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\
             X-Original-URI: /api/auth\r\n\r\n"
        );
        let (status, text) = raw(server.api, request.as_bytes());
        assert_eq!(status, 405, "{text}");
        let allow = text
            .lines()
            .find(|l| l.to_ascii_lowercase().starts_with("allow:"))
            .unwrap_or_else(|| panic!("no Allow in {text}"));
        assert!(allow.contains("GET") && allow.contains("POST"), "{allow}");
    }
    for method in ["GET", "POST", "PATCH"] {
        let request = format!(
            "{method} /v1/forward-auth HTTP/1.1\r\nHost: test\r\nConnection: close\r\n\
             Content-Length: 0\r\nX-Original-URI: /api/auth\r\n\r\n"
        );
        assert_eq!(raw(server.api, request.as_bytes()).0, 200, "{method}");
    }
    // The three admitted calls spent the budget; the 405s spent nothing.
    let (status, _) = get(
        server.api,
        "/v1/forward-auth",
        &["X-Original-URI: /api/auth"],
    );
    assert_eq!(status, 429);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn api_token_guards_v1_and_the_dashboard() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(
        &dir,
        &config(
            "api_token = \"api-secret\"\nadmin_token = \"admin-secret\"",
            up,
        ),
    );
    let client = Client::new();
    let check = |token: Option<&'static str>| {
        let mut r = client
            .post(server.url("/v1/check"))
            .json(&serde_json::json!({"policy": "auth", "key": "k", "cost": 0}));
        if let Some(token) = token {
            r = r.bearer_auth(token);
        }
        r.send()
    };
    let r = check(None).await.unwrap();
    assert_eq!(r.status(), 401);
    assert_eq!(r.json::<Value>().await.unwrap()["error"], "unauthorized");
    assert_eq!(check(Some("wrong")).await.unwrap().status(), 403);
    assert_eq!(check(Some("api-secret")).await.unwrap().status(), 200);
    assert_eq!(check(Some("admin-secret")).await.unwrap().status(), 200);
    for path in [
        "/dashboard",
        "/dashboard/data",
        "/v1/policies",
        "/v1/forward-auth",
    ] {
        let r = client.get(server.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 401, "{path}");
    }
    let r = client
        .get(server.url("/dashboard"))
        .bearer_auth("api-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
    for path in ["/healthz", "/readyz"] {
        let r = client.get(server.url(path)).send().await.unwrap();
        assert_eq!(r.status(), 200, "{path}");
    }
    // The API token is not the admin token.
    let r = client
        .delete(server.url("/v1/limits/auth/k"))
        .bearer_auth("api-secret")
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 403);
}

/// The gateway passes every X-Forwarded-For line on, joined, with the peer appended; a
/// non-ASCII byte in a client's entry does not make the proxy the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_forwarded_for_and_malformed_entries() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir, &config("", up));
    let gateway = server.gateway.unwrap();
    let (status, text) = get(
        gateway,
        "/open",
        &[
            "X-Forwarded-For: 1.1.1.1, 2.2.2.2",
            "X-Forwarded-For: 3.3.3.3",
        ],
    );
    assert_eq!(status, 200, "{text}");
    assert!(
        text.to_ascii_lowercase()
            .contains("x-seen-xff: 1.1.1.1, 2.2.2.2, 3.3.3.3, 127.0.0.1\r\n"),
        "{text}"
    );

    // One line, the client's garbage then the real client (as nginx writes it).
    let mut request = b"GET /api/auth HTTP/1.1\r\nHost: t\r\nConnection: close\r\nX-Forwarded-For: 9.9.9.9\xff, 192.0.2.77\r\n\r\n".to_vec();
    for _ in 0..3 {
        assert_eq!(raw(gateway, &request).0, 200);
    }
    assert_eq!(raw(gateway, &request).0, 429);
    // It was 192.0.2.77 that was counted, not the proxy.
    let limits: Value = Client::new()
        .get(server.url("/v1/limits/auth/ip:192.0.2.77"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(limits["remaining"], 0, "{limits}");
    let proxy: Value = Client::new()
        .get(server.url("/v1/limits/auth/ip:127.0.0.1"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(proxy["remaining"], 3, "{proxy}");
    request.clear();
}

/// 504 after upstream_timeout, 502 for a dead upstream; neither names the upstream.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upstream_failures_leak_no_address() {
    let silent = silent_upstream();
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir, &config("", silent));
    let (status, text) = get(server.gateway.unwrap(), "/open", &[]);
    assert_eq!(status, 504, "{text}");
    assert!(text.contains("gateway_timeout"), "{text}");
    assert!(!text.contains(&silent.port().to_string()), "{text}");

    let dead = free_port();
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir, &config("", ([127, 0, 0, 1], dead).into()));
    let (status, text) = get(server.gateway.unwrap(), "/open", &[]);
    assert_eq!(status, 502, "{text}");
    assert!(!text.contains(&dead.to_string()), "{text}");
    assert!(!text.contains("127.0.0.1"), "{text}");
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Slowloris: many connections that never finish their head. The server holds at most
/// max_connections of them, closes each after header_read_timeout, and answers a real
/// client meanwhile; an idle keep-alive connection outlives header_read_timeout.
#[test]
fn slowloris_is_cut_off_and_max_connections_holds() {
    let dir = tempfile::tempdir().unwrap();
    let toml = r#"
[server]
listen = "127.0.0.1:0"
header_read_timeout = "1s"
idle_timeout = "30s"
max_connections = 40
"#;
    let server = start(&dir, toml);
    let pid = server.child.id();
    let baseline = open_fds(pid);

    let mut slow: Vec<TcpStream> = (0..150)
        .map(|_| {
            let mut s = TcpStream::connect(server.api).unwrap();
            s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
                .unwrap();
            s
        })
        .collect();
    // While they are held, the server never has more than max_connections of them open.
    let started = Instant::now();
    let mut peak = 0;
    while started.elapsed() < Duration::from_secs(2) {
        peak = peak.max(open_fds(pid));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        peak <= baseline + 40 + 2,
        "peak {peak} fds, baseline {baseline}: max_connections did not hold"
    );
    // Every one of them is closed in the end (in waves of 40), none answered 200.
    for (i, s) in slow.iter_mut().enumerate() {
        assert!(
            closed_by_server(s, Duration::from_secs(60)),
            "slow connection {i} still open"
        );
    }
    // The server still serves, and an idle keep-alive connection is not cut at the
    // header deadline.
    let mut keep = TcpStream::connect(server.api).unwrap();
    keep.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let request = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    keep.write_all(request).unwrap();
    let mut buf = [0u8; 1024];
    let n = keep.read(&mut buf).unwrap();
    assert!(String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"));
    std::thread::sleep(Duration::from_secs(3));
    keep.write_all(request).unwrap();
    let n = keep.read(&mut buf).unwrap();
    assert!(
        String::from_utf8_lossy(&buf[..n]).starts_with("HTTP/1.1 200"),
        "idle keep-alive connection was closed before idle_timeout"
    );
}

/// A client that never finishes its head on the gateway is cut off too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gateway_closes_slow_heads() {
    let up = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let toml = config("header_read_timeout = \"1s\"", up);
    let server = start(&dir, &toml);
    let gateway = server.gateway.unwrap();
    let mut s = TcpStream::connect(gateway).unwrap();
    s.write_all(b"GET /open HTTP/1.1\r\nHost: x\r\nX-A: ")
        .unwrap();
    let closed =
        tokio::task::spawn_blocking(move || closed_by_server(&mut s, Duration::from_secs(30)))
            .await
            .unwrap();
    assert!(closed, "the gateway kept a slow head open");
    assert_eq!(get(gateway, "/open", &[]).0, 200);
}

/// The Envoy gRPC listener keeps the same limits (tonic has none of its own): connections
/// that never send their HTTP/2 preface are held at most max_connections at a time and
/// closed after header_read_timeout, and the service still answers a real gRPC call.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_listener_cuts_silent_connections_and_holds_max_connections() {
    use sluicegate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
    use sluicegate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;

    let dir = tempfile::tempdir().unwrap();
    let grpc: SocketAddr = ([127, 0, 0, 1], free_port()).into();
    let toml = format!(
        r#"
[server]
listen = "127.0.0.1:0"
header_read_timeout = "1s"
max_connections = 40

[envoy]
listen = "{grpc}"
"#
    );
    let server = start(&dir, &toml);
    let pid = server.child.id();
    let baseline = open_fds(pid);
    let mut silent: Vec<TcpStream> = (0..150)
        .map(|_| TcpStream::connect(grpc).unwrap())
        .collect();
    let started = Instant::now();
    let mut peak = 0;
    while started.elapsed() < Duration::from_secs(2) {
        peak = peak.max(open_fds(pid));
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(
        peak <= baseline + 40 + 2,
        "peak {peak} fds, baseline {baseline}: max_connections did not hold on the Envoy listener"
    );
    for (i, s) in silent.iter_mut().enumerate() {
        assert!(
            closed_by_server(s, Duration::from_secs(60)),
            "silent connection {i} still open"
        );
    }
    let mut client = RateLimitServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();
    let answer = client
        .should_rate_limit(RateLimitRequest {
            domain: "none".into(),
            descriptors: Vec::new(),
            hits_addend: 0,
        })
        .await;
    // Answered (whatever the verdict on an empty request): the listener still serves.
    assert!(
        answer.is_ok() || answer.as_ref().unwrap_err().code() == tonic::Code::InvalidArgument,
        "{answer:?}"
    );
}
