//! Fixed work on the core and middleware hot paths for `valgrind --tool=callgrind`:
//! instruction counts are repeatable on a loaded machine, where wall-clock figures are not.
//! Each step is one `#[inline(never)]` function, so callgrind's `--toggle-collect` counts it
//! alone (`scripts/callgrind-probe.sh` runs it and prints instructions per iteration).
//!
//! `cargo build --release -p sluicegate-bench --bin callgrind_probe`
use std::hint::black_box;
use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use http::{HeaderMap, Method, StatusCode};
use sluicegate_core::{AlgorithmKind, CheckRequest, MemoryStore, Policy};
use sluicegate_middleware::headers::{rejection_response, write_headers};
use sluicegate_middleware::{HeaderSet, RateLimiter, RouteSpec, RouteTable};

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

fn main() {
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
