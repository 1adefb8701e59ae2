//! `RateLimiter::check_fields` (a head's field lines as `httparse` parsed them, no
//! `HeaderMap`) must decide exactly as `check` on the `HeaderMap` of the same lines: the
//! same route, key, refusal and access-list outcome, over hostile heads (repeated names,
//! any case, obs-text, `X-Forwarded-For`/`Forwarded` chains with garbage, percent-encoded
//! and dot-segment paths), for each way of naming the client. A divergence of either
//! entry fails here.

use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use http::Method;
use proptest::prelude::*;
use sluicegate_core::{AlgorithmKind, MemoryStore};
use sluicegate_middleware::{
    ClientIdentity, ClientIpHeader, FieldLines, KeySpec, RateLimitDecision, RateLimiter, RouteSpec,
};
use sluicegate_testkit::policy;

fn key(spec: &str) -> KeySpec {
    spec.parse().unwrap()
}

/// Routes that read every kind of field: conditions, header/cookie/query/composite keys,
/// a case-insensitive prefix, a route deny list; `many` adds routes past the table's
/// scan limit, so the prefix index is used too.
fn limiter(header: ClientIpHeader, ipv6_prefix: u8, many: bool) -> RateLimiter {
    let mut builder = RateLimiter::builder(Arc::new(MemoryStore::new(10_000)))
        .policy(policy(
            "p",
            AlgorithmKind::TokenBucket,
            1_000_000_000,
            Duration::from_secs(3600),
        ))
        .identity(
            ClientIdentity::new(
                vec![
                    "127.0.0.1/32".parse().unwrap(),
                    "10.0.0.0/8".parse().unwrap(),
                    "::1/128".parse().unwrap(),
                ],
                ipv6_prefix,
            )
            .with_header(header),
        )
        .access(
            vec!["198.51.100.0/24".parse().unwrap()],
            vec!["192.0.2.66/32".parse().unwrap()],
        )
        .route(
            RouteSpec::new("/api/admin", &["p"])
                .header("x-tenant", "gold")
                .key(key("cookie:sid")),
        )
        .route(
            RouteSpec::new("/api", &["p"])
                .methods(&["GET"])
                .key(key("header:x-api-key")),
        )
        .route(RouteSpec::new("/q", &["p"]).key(key("query:k+header:x-api-key+ip+cookie:sid")))
        .route(RouteSpec::new("/Case", &["p"]).case_insensitive(true))
        .route(
            RouteSpec::new("/deny", &["p"]).access(vec![], vec!["203.0.113.0/24".parse().unwrap()]),
        )
        .route(RouteSpec::new("/g", &["p"]).key(key("global")))
        .route(
            RouteSpec::new("/", &["p"])
                .header("x-tenant", "Gold")
                .key(key("header:x-tenant")),
        )
        .route(RouteSpec::new("/", &["p"]));
    if many {
        for i in 0..24 {
            builder = builder
                .route(RouteSpec::new(format!("/r{i}/x"), &["p"]).key(key("header:x-api-key")));
        }
    }
    builder.build().unwrap()
}

fn limiters() -> Vec<RateLimiter> {
    vec![
        limiter(ClientIpHeader::XForwardedFor, 64, false),
        limiter(ClientIpHeader::XForwardedFor, 128, true),
        limiter(ClientIpHeader::Forwarded, 48, false),
        limiter(ClientIpHeader::XRealIp, 64, true),
    ]
}

const PEERS: [&str; 6] = [
    "127.0.0.1",
    "10.1.2.3",
    "192.0.2.66",
    "::ffff:10.0.0.1",
    "2001:db8::5",
    "198.51.100.9",
];

/// What a decision says: refused by a list, admitted, its key and route.
fn summary(decision: Option<RateLimitDecision>) -> Option<(bool, bool, String, String)> {
    decision.map(|d| {
        (
            d.is_forbidden(),
            d.is_allowed(),
            d.key().to_owned(),
            d.route_path().to_owned(),
        )
    })
}

/// Both entries on `head`, for every limiter and peer; `false` if `httparse` refuses it.
fn same_decisions(
    runtime: &tokio::runtime::Runtime,
    limiters: &[RateLimiter],
    head: &[u8],
) -> bool {
    let mut fields = [httparse::EMPTY_HEADER; 64];
    let mut request = httparse::Request::new(&mut fields);
    let Ok(httparse::Status::Complete(_)) = request.parse(head) else {
        return false;
    };
    let (target, lines) = (request.path.unwrap(), FieldLines(request.headers));
    let map = lines.to_header_map();
    for method in [Method::GET, Method::POST] {
        for limiter in limiters {
            for peer in PEERS {
                let peer: IpAddr = peer.parse().unwrap();
                let (by_map, by_lines) = runtime.block_on(async {
                    let by_map = limiter.check(&method, target, &map, peer).await;
                    let by_lines = limiter.check_fields(&method, target, lines, peer).await;
                    (summary(by_map), summary(by_lines))
                });
                assert_eq!(
                    by_map,
                    by_lines,
                    "{method} from {peer}: {}",
                    String::from_utf8_lossy(head).escape_debug()
                );
            }
        }
    }
    true
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
}

#[test]
fn hostile_heads_get_the_same_decision_from_both_entries() {
    let heads: &[&[u8]] = &[
        b"GET / HTTP/1.1\r\n\r\n",
        b"GET /api/x HTTP/1.1\r\nX-Api-Key: k1\r\nx-api-key: k2\r\n\r\n",
        b"GET /api/x HTTP/1.1\r\nX-API-KEY:   \r\nx-api-key: k2\r\n\r\n",
        b"GET /api/x HTTP/1.1\r\nx-api-key: caf\xe9\r\n\r\n",
        b"GET /api/x HTTP/1.1\r\nx-api-key: a\tb \r\n\r\n",
        b"GET /api/admin/x HTTP/1.1\r\nX-Tenant: GOLD\r\nx-tenant: gold\r\nCookie: a=1; sid=s%201\r\ncookie: sid=two\r\n\r\n",
        b"GET /api/admin HTTP/1.1\r\nx-tenant: gold \r\nCOOKIE: sid=\xff\r\nCookie: sid=ok\r\n\r\n",
        b"GET /%61pi/admin HTTP/1.1\r\nx-tenant: gold\r\n\r\n",
        b"GET /api/../api/./admin//x HTTP/1.1\r\nx-tenant: gold\r\ncookie: sid=1\r\n\r\n",
        b"GET /api%2Fadmin HTTP/1.1\r\nx-tenant: gold\r\n\r\n",
        b"GET /q?k=%2B1&k=2 HTTP/1.1\r\nx-api-key: a+b\r\ncookie: sid=c\r\n\r\n",
        b"GET /q?k=1 HTTP/1.1\r\n\r\n",
        b"GET /CASE/x HTTP/1.1\r\n\r\n",
        b"GET /deny HTTP/1.1\r\nX-Forwarded-For: 203.0.113.9\r\n\r\n",
        b"GET /x HTTP/1.1\r\nX-Forwarded-For: 1.1.1.1, garbage, 10.0.0.9\r\n\r\n",
        b"GET /x HTTP/1.1\r\nx-forwarded-for: 1.1.1.1\r\nX-FORWARDED-FOR: \xff\xfe, 2.2.2.2\r\n\r\n",
        b"GET /x HTTP/1.1\r\nX-Forwarded-For: 192.0.2.66\r\nx-forwarded-for: ,, 10.0.0.2,\r\n\r\n",
        b"GET /x HTTP/1.1\r\nX-Forwarded-For: [2001:db8::1]:80, 10.9.9.9:81\r\n\r\n",
        b"GET /x HTTP/1.1\r\nX-Forwarded-For: 198.51.100.1\r\n\r\n",
        b"GET /x HTTP/1.1\r\nForwarded: for=1.1.1.1, for=\"[2001:db8:cafe::17]:4711\";proto=https\r\nforwarded: for=_hidden\r\n\r\n",
        b"GET /x HTTP/1.1\r\nForwarded: For=\"192.0.2.66:80\"\r\nX-Real-IP: 203.0.113.5\r\nx-real-ip: 10.0.0.1\r\n\r\n",
        b"GET /x HTTP/1.1\r\nX-Real-IP: unknown\r\n\r\n",
        b"GET /g HTTP/1.1\r\nHost: a\r\nhost: b\r\n\r\n",
        b"GET /other HTTP/1.1\r\nx-tenant: Gold\r\nX-Tenant: gold\r\n\r\n",
        b"GET /other HTTP/1.1\r\nx-tenant: gold\r\nx-tenant: Gold\r\n\r\n",
        b"GET /r7/x/y?k=1 HTTP/1.1\r\nx-api-key: 7\r\n\r\n",
        b"GET /R7/x HTTP/1.1\r\nx-api-key: 7\r\n\r\n",
    ];
    let (runtime, limiters) = (runtime(), limiters());
    for head in heads {
        assert!(
            same_decisions(&runtime, &limiters, head),
            "httparse refused {}",
            String::from_utf8_lossy(head)
        );
    }
}

const NAMES: &[&str] = &[
    "x-forwarded-for",
    "X-Forwarded-For",
    "Forwarded",
    "x-real-ip",
    "X-Api-Key",
    "x-api-key",
    "Cookie",
    "cookie",
    "x-tenant",
    "X-TENANT",
    "host",
    "accept",
];

const VALUES: &[&[u8]] = &[
    b"1.1.1.1",
    b"10.0.0.2, 2.2.2.2",
    b"garbage, 3.3.3.3",
    b"\xff\xfe, 4.4.4.4",
    b"for=5.5.5.5;proto=http, for=\"[2001:db8::1]:80\"",
    b"",
    b"gold",
    b"Gold",
    b"k+1",
    b"sid=a; sid=b",
    b"sid=%20x",
    b"[::1]:8",
    b",,, 10.0.0.1",
    b"unknown",
    b"caf\xe9",
    b"192.0.2.66",
    b"203.0.113.7",
    b"198.51.100.3",
    b"a\tb",
];

const SEGMENTS: &[&str] = &[
    "/api", "/API", "/q", "/%61pi", "/.", "/..", "/", "/admin", "/Case", "/deny", "/r3", "/x",
    "%2F", "/g", "/%2e%2e", ";p", "?k=%2B1", "?k=a&k=b", "&k=", "?",
];

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]
    #[test]
    fn any_mix_of_fields_gets_the_same_decision_from_both_entries(
        segments in prop::collection::vec(0..SEGMENTS.len(), 1..5),
        lines in prop::collection::vec(
            (0..NAMES.len(), prop::collection::vec(0..VALUES.len(), 1..3)),
            0..8,
        ),
    ) {
        let mut target: String = segments.iter().map(|&i| SEGMENTS[i]).collect();
        if !target.starts_with('/') {
            target.insert(0, '/');
        }
        let mut head = format!("GET {target} HTTP/1.1\r\n").into_bytes();
        for (name, values) in &lines {
            head.extend_from_slice(NAMES[*name].as_bytes());
            head.extend_from_slice(b": ");
            for (i, &value) in values.iter().enumerate() {
                if i > 0 {
                    head.extend_from_slice(b", ");
                }
                head.extend_from_slice(VALUES[value]);
            }
            head.extend_from_slice(b"\r\n");
        }
        head.extend_from_slice(b"\r\n");
        thread_local! {
            static SETUP: (tokio::runtime::Runtime, Vec<RateLimiter>) = (runtime(), limiters());
        }
        SETUP.with(|(runtime, limiters)| {
            prop_assert!(same_decisions(runtime, limiters, &head), "httparse refused the head");
            Ok(())
        })?;
    }
}
