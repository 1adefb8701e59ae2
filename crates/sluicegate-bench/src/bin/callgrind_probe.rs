//! Fixed work on the core and middleware hot paths for `valgrind --tool=callgrind`:
//! instruction counts are repeatable on a loaded machine, where wall-clock figures are not.
//! Each step is one `#[inline(never)]` function, so callgrind's `--toggle-collect` counts it
//! alone (`scripts/callgrind-probe.sh` runs it and prints instructions per iteration).
//!
//! `cargo build --release -p sluicegate-bench --bin callgrind_probe`
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use http::{HeaderMap, Method, Request, StatusCode};
use sluicegate_bench::{apps, server};
use sluicegate_core::{AlgorithmKind, CheckRequest, MemoryStore, Policy};
use sluicegate_middleware::headers::{rejection_response, write_headers};
use sluicegate_middleware::{HeaderSet, RateLimiter, RouteSpec, RouteTable};
use sluicegate_server::front::Front;

/// Iterations of each step.
const N: usize = 20_000;

fn policy(name: &str, limit: u64) -> Policy {
    Policy::builder(
        name,
        AlgorithmKind::TokenBucket,
        limit,
        Duration::from_secs(60),
    )
    .build()
    .expect("a valid policy")
}

#[inline(never)]
fn probe_store_check(store: &MemoryStore, policies: &[Arc<Policy>], keys: &[String]) {
    for i in 0..N {
        let verdict = store.check_now(CheckRequest::new(policies, &keys[i % keys.len()], 1));
        black_box(verdict.ok());
    }
}

#[inline(never)]
fn probe_limiter_check(
    rt: &tokio::runtime::Runtime,
    limiter: &RateLimiter,
    headers: &[HeaderMap],
    peer: IpAddr,
) {
    for i in 0..N {
        let h = &headers[i % headers.len()];
        let decision = rt.block_on(limiter.check(&Method::GET, "/api/items", h, peer));
        let mut out = HeaderMap::with_capacity(8);
        if let Some(d) = decision {
            d.write_headers(&mut out);
        }
        black_box(out);
    }
}

#[inline(never)]
fn probe_write_headers(verdict: &sluicegate_core::Verdict) {
    let sets = [HeaderSet::Draft6, HeaderSet::Ietf, HeaderSet::Legacy];
    for _ in 0..N {
        let mut out = HeaderMap::with_capacity(8);
        write_headers(&sets, verdict, &mut out);
        black_box(out);
    }
}

#[inline(never)]
fn probe_rejection(verdict: &sluicegate_core::Verdict) {
    for _ in 0..N {
        let response =
            rejection_response(&HeaderSet::DEFAULT, verdict, StatusCode::TOO_MANY_REQUESTS);
        black_box(response);
    }
}

/// A table of `n` routes, one per endpoint of a large API, plus the catch-all `/`.
fn route_table(n: usize) -> RouteTable {
    let mut specs: Vec<RouteSpec> = (0..n - 1)
        .map(|i| RouteSpec::new(format!("/api/v1/resource{i}/items"), &["api"]))
        .collect();
    specs.push(RouteSpec::new("/", &["api"]));
    RouteTable::new(&specs, |name| Some(Arc::new(policy(name, 10)))).expect("valid routes")
}

/// A request that falls through to the catch-all: the worst case for a scan.
const CATCH_ALL_PATH: &str = "/static/app/main.js";

#[inline(never)]
fn probe_route_find(table: &RouteTable) {
    let headers = HeaderMap::new();
    for _ in 0..N {
        black_box(table.find(&Method::GET, black_box(CATCH_ALL_PATH), &headers));
    }
}

/// The matching of before the prefix index: the first match in the sorted table.
#[inline(never)]
fn probe_route_scan(table: &RouteTable) {
    let headers = HeaderMap::new();
    for _ in 0..N {
        let path = black_box(CATCH_ALL_PATH);
        black_box(
            table
                .routes()
                .iter()
                .find(|r| r.matches(&Method::GET, path, &headers)),
        );
    }
}

#[inline(never)]
fn probe_route_find_small(table: &RouteTable) {
    // The tag keeps LLVM from merging this function with its twin (callgrind needs both).
    black_box(5usize);
    probe_route_find(table)
}

#[inline(never)]
fn probe_route_find_large(table: &RouteTable) {
    // The tag keeps LLVM from merging this function with its twin (callgrind needs both).
    black_box(5000usize);
    probe_route_find(table)
}

#[inline(never)]
fn probe_route_scan_small(table: &RouteTable) {
    // The tag keeps LLVM from merging this function with its twin (callgrind needs both).
    black_box(5usize);
    probe_route_scan(table)
}

#[inline(never)]
fn probe_route_scan_large(table: &RouteTable) {
    // The tag keeps LLVM from merging this function with its twin (callgrind needs both).
    black_box(5000usize);
    probe_route_scan(table)
}

/// The TCP peer every in-process request comes from (a trusted proxy in the configurations).
fn peer() -> ConnectInfo<SocketAddr> {
    ConnectInfo(SocketAddr::from(([127, 0, 0, 1], 40_000)))
}

/// One request through `app` (no sockets: routing, extractors, handler, response), answered
/// `expect`.
fn serve_one(rt: &tokio::runtime::Runtime, app: &Router, request: Request<Body>, expect: u16) {
    let response = rt.block_on(tower::ServiceExt::oneshot(app.clone(), request));
    let response = response.expect("infallible");
    assert_eq!(response.status(), expect);
    black_box(response);
}

/// `POST /v1/check` for one of 1,000 keys, cost 1 (what `benches/check.lua` sends).
fn check_request(i: usize) -> Request<Body> {
    let body = format!(
        r#"{{"policy":"bench","key":"user-{}","cost":1}}"#,
        i % 1_000
    );
    Request::post("/v1/check")
        .header("content-type", "application/json")
        .extension(peer())
        .body(Body::from(body))
        .expect("a request")
}

#[inline(never)]
fn probe_api_bare(rt: &tokio::runtime::Runtime, app: &Router) {
    for i in 0..N {
        serve_one(rt, app, check_request(i), 200);
    }
}

/// Through the server's front door (`Front::serve`, what its listener calls), which answers
/// `/v1/check` without the router.
#[inline(never)]
fn probe_api_check(rt: &tokio::runtime::Runtime, app: &Front) {
    // The tag keeps LLVM from merging this function with its twin (callgrind needs both).
    black_box(2usize);
    for i in 0..N {
        let response = rt.block_on(app.serve(check_request(i), peer().0));
        assert_eq!(response.status(), 200);
        black_box(response);
    }
}

/// The bytes of [`check_request`] as a client sends them (what the lean path reads).
fn check_bytes(i: usize) -> Vec<u8> {
    let body = format!(
        r#"{{"policy":"bench","key":"user-{}","cost":1}}"#,
        i % 1_000
    );
    format!(
        "POST /v1/check HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// On the listener's lean HTTP/1.1 path (`h1`): the head parsed from bytes, the answer
/// written as bytes. Unlike the two steps above it includes parsing the request and
/// writing the response (hyper's work in theirs, not counted there).
#[inline(never)]
fn probe_api_lean(rt: &tokio::runtime::Runtime, app: &Front) {
    use sluicegate_server::h1::{self, Handler};
    // The tag keeps LLVM from merging this function with its twin (callgrind needs both).
    black_box(3usize);
    let mut out = Vec::with_capacity(1024);
    for i in 0..N {
        let bytes = check_bytes(i);
        let mut fields = [h1::EMPTY_HEADER; h1::MAX_FIELDS];
        let h1::Parsed::Plain(head) = h1::parse(&bytes, &mut fields) else {
            panic!("a plain head");
        };
        assert!(app.accepts(&head));
        let request = h1::Request {
            head: &head,
            body: &bytes[head.len()..],
            peer: peer().0,
        };
        rt.block_on(app.answer(request, &mut out));
        assert!(out.starts_with(b"HTTP/1.1 200 OK"));
        black_box(&out);
        out.clear();
    }
}

/// `app` as `axum::serve` runs it: `into_make_service` calls `with_state(())`, which turns
/// every handler (and the layers around it) into a route once. Without it axum does that
/// per request (`into_route`: ~440 instructions for the bare app, and for a layered route
/// the layer's `layer()` and a boxing too), which the HTTP benchmark never pays.
fn served(app: Router) -> Router {
    app.with_state(())
}

/// `GET /api/items` from one of 1,000 clients behind the trusted proxy.
fn items_request(ips: &[String], i: usize) -> Request<Body> {
    Request::get("/api/items")
        .header("x-forwarded-for", &ips[i % ips.len()])
        .extension(peer())
        .body(Body::empty())
        .expect("a request")
}

#[inline(never)]
fn probe_layer_bare(rt: &tokio::runtime::Runtime, app: &Router, ips: &[String]) {
    for i in 0..N {
        serve_one(rt, app, items_request(ips, i), 200);
    }
}

#[inline(never)]
fn probe_layer_limited(rt: &tokio::runtime::Runtime, app: &Router, ips: &[String]) {
    // The tag keeps LLVM from merging this function with its twin (callgrind needs both).
    black_box(2usize);
    for i in 0..N {
        serve_one(rt, app, items_request(ips, i), 200);
    }
}

#[inline(never)]
fn probe_layer_identity(rt: &tokio::runtime::Runtime, app: &Router, ips: &[String]) {
    // The tag keeps LLVM from merging this function with its twins (callgrind needs all).
    black_box(4usize);
    for i in 0..N {
        serve_one(rt, app, items_request(ips, i), 200);
    }
}

#[inline(never)]
fn probe_layer_governor(rt: &tokio::runtime::Runtime, app: &Router, ips: &[String]) {
    // The tag keeps LLVM from merging this function with its twins (callgrind needs all).
    black_box(5usize);
    for i in 0..N {
        serve_one(rt, app, items_request(ips, i), 200);
    }
}

#[inline(never)]
fn probe_layer_outer<S>(rt: &tokio::runtime::Runtime, service: &S, ips: &[String])
where
    S: tower::Service<Request<Body>, Response = axum::response::Response> + Clone,
    S::Error: std::fmt::Debug,
{
    // The tag keeps LLVM from merging this function with its twins (callgrind needs all).
    black_box(3usize);
    for i in 0..N {
        let response = rt.block_on(tower::ServiceExt::oneshot(
            service.clone(),
            items_request(ips, i),
        ));
        let response = response.expect("infallible");
        assert_eq!(response.status(), 200);
        black_box(response);
    }
}

/// What nginx `auth_request` sends for a client's `GET /static/app/main.js`, which falls
/// to the catch-all route.
fn forward_auth_request(ips: &[String], i: usize) -> Request<Body> {
    Request::get("/v1/forward-auth")
        .header("x-original-uri", CATCH_ALL_PATH)
        .header("x-original-method", "GET")
        .header("x-forwarded-for", &ips[i % ips.len()])
        .extension(peer())
        .body(Body::empty())
        .expect("a request")
}

#[inline(never)]
fn probe_forward_auth_1(rt: &tokio::runtime::Runtime, app: &Router, ips: &[String]) {
    for i in 0..N {
        serve_one(rt, app, forward_auth_request(ips, i), 200);
    }
}

#[inline(never)]
fn probe_forward_auth_5000(rt: &tokio::runtime::Runtime, app: &Router, ips: &[String]) {
    // The tag keeps LLVM from merging this function with its twin (callgrind needs both).
    black_box(5000usize);
    for i in 0..N {
        serve_one(rt, app, forward_auth_request(ips, i), 200);
    }
}

/// Whether to run `step`: `PROBE=<step>` runs that one alone (`scripts/callgrind-probe.sh`
/// runs the binary once a step, and valgrind makes each run slow); unset runs all.
fn wanted(step: &str) -> bool {
    std::env::var("PROBE").map_or(true, |only| only == step)
}

/// The HTTP steps: whole requests through the apps the wrk scripts load.
fn http_probes() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let ips: Vec<String> = (0..1_000)
        .map(|i| format!("10.1.{}.{}", i / 256, i % 256))
        .collect();
    let app = |routes| {
        rt.block_on(server::api_app(&server::config("127.0.0.1:0", routes)))
            .expect("the server's app")
    };
    if wanted("probe_api_bare") {
        probe_api_bare(&rt, &apps::bare_check_router());
    }
    if wanted("probe_api_check") {
        probe_api_check(&rt, &app(1));
    }
    if wanted("probe_api_lean") {
        probe_api_lean(&rt, &app(1));
    }
    if wanted("probe_layer_bare") {
        probe_layer_bare(&rt, &served(apps::layer_app()), &ips);
    }
    if wanted("probe_layer_limited") {
        probe_layer_limited(&rt, &served(apps::limited_app(&HeaderSet::DEFAULT)), &ips);
    }
    if wanted("probe_layer_identity") {
        probe_layer_identity(&rt, &served(apps::identity_app()), &ips);
    }
    if wanted("probe_layer_governor") {
        probe_layer_governor(&rt, &served(apps::governor_app()), &ips);
    }
    if wanted("probe_layer_outer") {
        probe_layer_outer(&rt, &apps::limited_service(&HeaderSet::DEFAULT), &ips);
    }
    if wanted("probe_forward_auth_1") {
        probe_forward_auth_1(&rt, app(1).router(), &ips);
    }
    if wanted("probe_forward_auth_5000") {
        probe_forward_auth_5000(&rt, app(5_000).router(), &ips);
    }
}

/// The steps on the engine's parts, without HTTP.
fn part_probes() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime");
    let keys: Vec<String> = (0..1_000)
        .map(|i| format!("ip:10.0.{}.{}", i / 256, i % 256))
        .collect();
    let store = MemoryStore::new(100_000);
    let policies = [
        Arc::new(policy("api", 1_000_000_000)),
        Arc::new(policy("day", 1_000_000_000)),
    ];
    probe_store_check(&store, &policies, &keys);

    let limiter = RateLimiter::builder(Arc::new(MemoryStore::new(100_000)))
        .policy(policy("api", 1_000_000_000))
        .route(RouteSpec::new("/api", &["api"]))
        .trusted_proxies(vec!["127.0.0.1/32".parse().expect("a CIDR")])
        .build()
        .expect("a limiter");
    let headers: Vec<HeaderMap> = (0..1_000)
        .map(|i| {
            let mut h = HeaderMap::new();
            let ip = format!("10.0.{}.{}", i / 256, i % 256);
            h.insert("x-forwarded-for", ip.parse().expect("a header value"));
            h
        })
        .collect();
    probe_limiter_check(&rt, &limiter, &headers, IpAddr::V4(Ipv4Addr::LOCALHOST));

    let admitted = store
        .check_now(CheckRequest::new(&policies, "ip:192.0.2.1", 1))
        .expect("a verdict");
    probe_write_headers(&admitted);
    let tight = [Arc::new(policy("tight", 1))];
    let _ = store.check_now(CheckRequest::new(&tight, "ip:192.0.2.2", 1));
    let rejected = store
        .check_now(CheckRequest::new(&tight, "ip:192.0.2.2", 1))
        .expect("a verdict");
    assert!(!rejected.allowed);
    probe_rejection(&rejected);

    let (small, large) = (route_table(5), route_table(5_000));
    probe_route_find_small(&small);
    probe_route_find_large(&large);
    probe_route_scan_small(&small);
    probe_route_scan_large(&large);
}

fn main() {
    let http = ["probe_api", "probe_layer", "probe_forward"];
    match std::env::var("PROBE") {
        Ok(step) if http.iter().any(|prefix| step.starts_with(prefix)) => http_probes(),
        Ok(_) => part_probes(),
        Err(_) => {
            part_probes();
            http_probes();
        }
    }
}
