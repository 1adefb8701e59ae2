//! The gateway on the lean HTTP/1.1 front ([`crate::h1`]): a plain `GET` (the front's
//! narrow subset: HTTP/1.1, no body, no `Transfer-Encoding`, `Expect` or `Upgrade`,
//! `Connection` only `keep-alive`) with one `Host` at most, no `TE`, an origin-form target
//! and an `http://` upstream is answered from the socket's bytes: decided, its upstream
//! head written as bytes from the client's field lines, sent on the lean lane
//! ([`crate::lane`]), and the upstream's response head written back as bytes, its body
//! streamed after it by the driver ([`h1::Tail`]). No hyper `Request` or `Response` on
//! the client's side, no `HeaderMap` for the upstream's request.
//!
//! Everything else (bodies, HEAD and other methods, TLS, upgrades, HTTP/1.0, odd heads) is
//! hyper's, as before: `accepts` says no before anything is decided, so a request is
//! never decided twice.
//!
//! **The same bytes as hyper's path.** The decision reads the field lines through the
//! limiter's `check_fields`, which decides as `check` does on the `HeaderMap` hyper would
//! have built (the rules are shared; `sluicegate-middleware`'s `tests/field_lines.rs`
//! holds the two entries to the same decisions); the upstream head is the one
//! `to_upstream` and the lane's `write_request` make, field for field in the `HeaderMap`'s
//! order — which its removals change (`swap_remove`), so the order is modelled with the
//! same operations ([`Fields`]); the response head is the lane's `HeaderMap` after the same
//! `response_head` as hyper's path, written as hyper's encoder writes it
//! ([`h1::write_proxied_head`]); 429, 502 and 504 are the same `Response`s, written in
//! hyper's layout. `tests/lean_gateway.rs` compares the two paths byte for byte.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use axum::body::Body;
use http::{Method, Uri};

use super::fields::{Entry, Fields, Lines, Offsets, is_hop_by_hop, strip_hop_by_hop};
use super::{Gateway, Worker};
use crate::h1;
use sluicegate_middleware::{FieldLines, LeaseGuard, PoolPermit, RateLimitDecision};

use crate::lane::{Framing, LaneError};
use crate::upstream::{Exchanged, UpstreamError};

impl h1::Handler for Gateway {
    type Body = Body;

    fn accepts(&self, head: &h1::Head<'_>) -> bool {
        accepts(&self.0, head)
    }

    fn answer<'a>(
        &'a self,
        request: h1::Request<'a>,
        out: &'a mut Vec<u8>,
    ) -> impl Future<Output = Option<h1::Tail<Body>>> + Send + 'a {
        answer(&self.0, request, out)
    }
}

/// Whether the lean path answers `head` exactly as hyper's would (see the module).
fn accepts(worker: &Worker, head: &h1::Head<'_>) -> bool {
    // A target hyper's `Uri` would refuse (400) or alter (a fragment) is hyper's.
    if head.method() != "GET" || head.content_length() != 0 || !h1::plain_target(head.path()) {
        return false;
    }
    let mut hosts = 0;
    for field in head.fields() {
        // `TE: trailers` would have hyper send the upstream's trailers; two `Host`s are
        // made one by `to_upstream`'s map. Rare: hyper's.
        if h1::same_name(field.name.as_bytes(), b"te") {
            return false;
        }
        hosts += usize::from(h1::same_name(field.name.as_bytes(), b"host"));
    }
    hosts <= 1
        && worker
            .state
            .current()
            .config
            .gateway
            .as_ref()
            .is_some_and(|g| g.upstream.scheme_str() == Some("http"))
}

/// `proxy`'s steps for a request `accepts` took, on bytes.
async fn answer(
    worker: &Arc<Worker>,
    request: h1::Request<'_>,
    out: &mut Vec<u8>,
) -> Option<h1::Tail<Body>> {
    let runtime = worker.state.runtime();
    let Some(config) = runtime.config.gateway.as_ref() else {
        return whole(out, super::bad_gateway()).await;
    };
    let (head, peer) = (request.head, request.peer);
    // Decided on the field lines as parsed: the limiter reads them as it would the map.
    let fields = FieldLines(head.fields());
    let decision = runtime
        .limiter
        .check_fields(&Method::GET, head.path(), fields, peer.ip())
        .await;
    let held = match super::admit(decision.as_ref()).await {
        Ok(held) => held,
        Err(refused) => return whole(out, refused).await,
    };
    if config.upstream.scheme_str() != Some("http") {
        // A reload made the upstream https:// since `accepts`: the lane cannot carry it.
        tracing::warn!(upstream = %config.upstream, "upstream changed under a request; answered 502");
        return whole(out, super::bad_gateway()).await;
    }
    // The upstream head is written at the end of the output buffer (the connection's, kept
    // between requests) and cut off it once sent: no buffer of its own a request.
    let start = out.len();
    write_upstream_head(out, head, &config.upstream, peer);
    let deadline = tokio::time::Instant::now() + config.upstream_timeout;
    let get = crate::lane::Request::Get(&out[start..]);
    let exchanged = worker.upstream.exchange_lane(config, get, deadline).await;
    out.truncate(start);
    let sets = runtime.limiter.header_sets();
    match exchanged {
        Ok(sent) => match pass_on(out, (worker, sets), sent, decision.as_ref(), held) {
            Ok(tail) => tail,
            Err(e) => {
                let error = UpstreamError::Lane(e);
                whole(out, super::failed(config, &error, decision.as_ref())).await
            }
        },
        Err(UpstreamError::TimedOut) => {
            tracing::warn!(upstream = %config.upstream, timeout = ?config.upstream_timeout, "upstream sent no response head in time");
            let mut response = super::gateway_timeout(held.1);
            super::after_response(decision.as_ref(), &mut response);
            whole(out, response).await
        }
        Err(e) => whole(out, super::failed(config, &e, decision.as_ref())).await,
    }
}

/// A response the gateway made itself (429, 502, 504), as hyper writes it.
async fn whole(out: &mut Vec<u8>, response: axum::response::Response) -> Option<h1::Tail<Body>> {
    crate::front::write_full(out, response).await;
    None
}

/// The upstream's response as the client gets it (hyper's path: `pass_on`): the head
/// written here, the body appended when it came whole with the head and nothing is held
/// until its end, else streamed by the driver. A head the lane refuses is the error.
fn pass_on(
    out: &mut Vec<u8>,
    (worker, sets): (&Arc<Worker>, &[sluicegate_core::render::HeaderSet]),
    mut sent: Exchanged,
    decision: Option<&RateLimitDecision>,
    held: (Option<LeaseGuard>, Option<PoolPermit>),
) -> Result<Option<h1::Tail<Body>>, LaneError> {
    // A route that settles or counts from the response reads and edits its head: the
    // map's path, as hyper's. So does an upstream field the rate-limit fields would replace.
    let settles = decision.is_some_and(|d| d.after_response().is_some());
    let (framing, writes, tap) = if settles || (decision.is_some() && names_a_limit_field(&sent)) {
        let head = std::mem::take(&mut sent.head);
        let (mut parts, framing) = sent.conn.decode(head, &sent.parsed, false)?;
        let tap = super::response_head(&mut parts, decision);
        let length = body_length(framing);
        let writes = h1::write_proxied_head(out, parts.status, &parts.headers, length);
        (framing, writes, tap)
    } else {
        let (status, framing) = sent.conn.frame(&sent.head, &sent.parsed, false)?;
        let writes = write_head(out, &sent, status, framing, decision, sets);
        (framing, writes, None)
    };
    let length = body_length(framing);
    let mut body = sent.body(framing, &worker.upstream);
    let unheld = held.0.is_none() && held.1.is_none() && tap.is_none();
    if let Some(whole) = unheld.then(|| body.take_whole()).flatten() {
        if let (Some(whole), Some(_)) = (whole, writes) {
            out.extend_from_slice(&whole);
        }
        return Ok(None);
    }
    let body = super::holding(Body::new(body), held, tap);
    Ok(match writes {
        Some(chunked) if length != h1::BodyLength::Ended => Some(h1::Tail { body, chunked }),
        // Ended, or a status without a body: hyper drops it unpolled, and so does this.
        _ => None,
    })
}

/// What hyper's dispatcher reads off a lane body of `framing` before it writes the head.
fn body_length(framing: Framing) -> h1::BodyLength {
    match framing {
        Framing::Empty => h1::BodyLength::Ended,
        Framing::Length(n) => h1::BodyLength::Known(n),
        Framing::Chunked | Framing::Close => h1::BodyLength::Unknown,
    }
}

/// Whether the upstream's head has a field the rate-limit fields would replace in place
/// (`ratelimit*`, `x-ratelimit*`, `retry-after`): the map's path handles that.
fn names_a_limit_field(sent: &Exchanged) -> bool {
    sent.conn.offsets().iter().any(|&[start, end, ..]| {
        let name = &sent.head[start..end];
        let starts = |prefix: &[u8]| {
            name.len() >= prefix.len() && h1::same_name(&name[..prefix.len()], prefix)
        };
        starts(b"ratelimit") || starts(b"x-ratelimit") || h1::same_name(name, b"retry-after")
    })
}

/// The upstream's head as `response_head` and hyper's encoder make it, from the lane's
/// bytes: the fields in the map's order without the hop-by-hop ones, then the rate-limit
/// fields (appended: no upstream field has their names), then hyper's framing and `date`.
/// Returns how the body is written (`ProxiedHead::finish`).
fn write_head(
    out: &mut Vec<u8>,
    sent: &Exchanged,
    status: http::StatusCode,
    framing: Framing,
    decision: Option<&RateLimitDecision>,
    sets: &[sluicegate_core::render::HeaderSet],
) -> Option<bool> {
    let lines = Offsets {
        head: &sent.head,
        offsets: sent.conn.offsets(),
    };
    let mut head = h1::ProxiedHead::new(out, status, body_length(framing));
    write_fields(out, &mut head, lines);
    if let Some(decision) = decision.filter(|d| !d.is_forbidden()) {
        let policy_field = decision.policy_field().map(http::HeaderValue::as_bytes);
        crate::header_lines::write_lines(sets, decision.verdict(), policy_field, out);
    }
    head.finish(out)
}

/// The upstream's fields as the map holds them after `strip_hop_by_hop`. The usual head —
/// no name twice, no hop-by-hop field — is the lines in order (`strip_hop_by_hop` does
/// nothing without a hop-by-hop name, and each name is then its own first line): written
/// in one pass. Any other through the order model ([`write_modelled_fields`]);
/// `tests::generated_response_fields_are_the_models` holds the two equal.
fn write_fields<'a>(out: &mut Vec<u8>, head: &mut h1::ProxiedHead, lines: impl Lines<'a>) {
    let count = lines.count();
    let plain = (0..count).all(|i| {
        let name = lines.name(i);
        !is_hop_by_hop(name) && !(0..i).any(|j| h1::same_name(lines.name(j), name))
    });
    if !plain {
        return write_modelled_fields(out, head, lines);
    }
    for i in 0..count {
        head.field(out, lines.name(i), lines.value(i), true);
    }
}

/// [`write_fields`] for any head, through the `HeaderMap` order model ([`Fields`]).
fn write_modelled_fields<'a>(out: &mut Vec<u8>, head: &mut h1::ProxiedHead, lines: impl Lines<'a>) {
    let mut map = Fields::of(lines);
    strip_hop_by_hop(&mut map);
    for entry in map.entries() {
        if let Entry::Client(first) = *entry {
            for (i, (name, value)) in map.lines(first).enumerate() {
                head.field(out, name, value, i == 0);
            }
        }
    }
}

/// The head `to_upstream` and the lane's `write_request` make for this request: `GET`,
/// the target under the upstream's base path, the client's fields without the hop-by-hop
/// ones, one `X-Forwarded-For` (every line the client sent, then the peer),
/// `X-Forwarded-Proto: http`, `X-Forwarded-Host` and `Host` (the client's, else the
/// upstream's authority). Names lower-case, as the map writes them.
fn write_upstream_head(out: &mut Vec<u8>, head: &h1::Head<'_>, upstream: &Uri, peer: SocketAddr) {
    if !write_plain_upstream_head(out, head, upstream, peer) {
        write_modelled_upstream_head(out, head, upstream, peer);
    }
}

/// The usual head — no name twice, no hop-by-hop field, no `X-Forwarded-*` — for which the
/// map's order is the lines' order with the gateway's fields appended (and `Host` kept in
/// its place): written in one pass, without the map model. `false`, having written
/// nothing, for any other head. `tests::the_upstream_head_is_the_one_hypers_path_writes`
/// and its proptest hold both ways to hyper's.
fn write_plain_upstream_head(
    out: &mut Vec<u8>,
    head: &h1::Head<'_>,
    upstream: &Uri,
    peer: SocketAddr,
) -> bool {
    let fields = head.fields();
    let mut host = None;
    for (i, field) in fields.iter().enumerate() {
        let name = field.name.as_bytes();
        let forwarded = [
            &b"x-forwarded-for"[..],
            b"x-forwarded-proto",
            b"x-forwarded-host",
        ]
        .iter()
        .any(|f| h1::same_name(name, f));
        let again = fields[..i]
            .iter()
            .any(|f| h1::same_name(f.name.as_bytes(), name));
        if forwarded || again || is_hop_by_hop(name) {
            return false;
        }
        if h1::same_name(name, b"host") {
            host = Some(field.value);
        }
    }
    write_request_line(out, head, upstream);
    for field in fields {
        h1::field_line(out, field.name.as_bytes(), field.value);
    }
    out.extend_from_slice(b"x-forwarded-for: ");
    super::push_ip(out, peer.ip());
    out.extend_from_slice(b"\r\nx-forwarded-proto: http\r\n");
    match (host, upstream.authority()) {
        (Some(host), _) => h1::field_line(out, b"x-forwarded-host", host),
        (None, Some(authority)) => h1::field_line(out, b"host", authority.as_str().as_bytes()),
        (None, None) => {}
    }
    out.extend_from_slice(b"\r\n");
    true
}

/// `GET <the upstream's base path><target> HTTP/1.1`.
fn write_request_line(out: &mut Vec<u8>, head: &h1::Head<'_>, upstream: &Uri) {
    out.extend_from_slice(b"GET ");
    let base = upstream.path().trim_end_matches('/');
    out.extend_from_slice(base.as_bytes());
    out.extend_from_slice(head.path().as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
}

/// [`write_upstream_head`] for any head, through the `HeaderMap` order model ([`Fields`]).
fn write_modelled_upstream_head(
    out: &mut Vec<u8>,
    head: &h1::Head<'_>,
    upstream: &Uri,
    peer: SocketAddr,
) {
    let mut map = Fields::of(head.fields());
    let host = map.values(b"host").next();
    strip_hop_by_hop(&mut map);
    // The lines the client sent, if the map still holds them (written in place below).
    let forwarded = map.position(b"x-forwarded-for").is_some();
    map.insert(b"x-forwarded-for", Entry::ForwardedFor);
    map.insert(b"x-forwarded-proto", Entry::ForwardedProto);
    if host.is_some() {
        map.insert(b"x-forwarded-host", Entry::ForwardedHost);
    }
    let authority = upstream.authority().map(|a| a.as_str().as_bytes());
    let host_line = host.or(authority);
    if host_line.is_some() {
        map.insert(b"host", Entry::Host);
    }

    write_request_line(out, head, upstream);
    let line = h1::field_line;
    for entry in map.entries() {
        match *entry {
            Entry::Client(first) => {
                for (name, value) in map.lines(first) {
                    line(out, name, value);
                }
            }
            Entry::ForwardedFor => {
                out.extend_from_slice(b"x-forwarded-for: ");
                let lines = head.fields().iter().filter(|_| forwarded);
                for field in lines.filter(|f| h1::same_name(f.name.as_bytes(), b"x-forwarded-for"))
                {
                    let value = field.value.trim_ascii();
                    if !value.is_empty() {
                        out.extend_from_slice(value);
                        out.extend_from_slice(b", ");
                    }
                }
                super::push_ip(out, peer.ip());
                out.extend_from_slice(b"\r\n");
            }
            Entry::ForwardedProto => line(out, b"x-forwarded-proto", b"http"),
            Entry::ForwardedHost => line(out, b"x-forwarded-host", host.unwrap_or_default()),
            Entry::Host => line(out, b"host", host_line.unwrap_or_default()),
        }
    }
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The head hyper's path sends for the same request (`to_upstream`, `write_request`).
    fn by_hyper(bytes: &[u8], upstream: &Uri, peer: SocketAddr) -> Vec<u8> {
        let mut fields = [h1::EMPTY_HEADER; h1::MAX_FIELDS];
        let mut parsed = httparse::Request::new(&mut fields);
        parsed.parse(bytes).unwrap();
        let mut request = http::Request::get(parsed.path.unwrap());
        for f in parsed.headers.iter() {
            request = request.header(f.name, f.value);
        }
        let request = request.body(()).unwrap();
        let upstream_request = super::super::to_upstream(request, upstream, peer, false).unwrap();
        let (parts, ()) = upstream_request.into_parts();
        let mut out = Vec::new();
        crate::lane::write_request_for_test(&mut out, &parts);
        out
    }

    fn lean(bytes: &[u8], upstream: &Uri, peer: SocketAddr) -> Vec<u8> {
        let mut fields = [h1::EMPTY_HEADER; h1::MAX_FIELDS];
        let h1::Parsed::Plain(head) = h1::parse(bytes, &mut fields) else {
            panic!("not plain: {}", String::from_utf8_lossy(bytes));
        };
        let mut out = Vec::new();
        write_upstream_head(&mut out, &head, upstream, peer);
        out
    }

    proptest::proptest! {
        /// Generated response fields, plain (no name twice, no hop-by-hop field) or not: the
        /// one-pass writer writes what the order model writes.
        #[test]
        fn generated_response_fields_are_the_models(
            lines in proptest::collection::vec((0..12usize, 0..4usize), 0..8),
            ended in proptest::bool::ANY,
        ) {
            const NAMES: [&str; 12] = [
                "Content-Length", "content-length", "Date", "date", "A", "a", "X-Key",
                "Connection", "Keep-Alive", "Transfer-Encoding", "Content-Type", "Set-Cookie",
            ];
            const VALUES: [&str; 4] = ["1", "a, b", "keep-alive, x-key", "close"];
            let fields: Vec<h1::Header<'_>> = lines
                .iter()
                .map(|&(n, v)| h1::Header { name: NAMES[n], value: VALUES[v].as_bytes() })
                .collect();
            let length = if ended { h1::BodyLength::Ended } else { h1::BodyLength::Known(1) };
            let write = |modelled: bool| {
                let mut out = Vec::new();
                let mut head = h1::ProxiedHead::new(&mut out, http::StatusCode::OK, length);
                if modelled {
                    write_modelled_fields(&mut out, &mut head, &fields[..]);
                } else {
                    write_fields(&mut out, &mut head, &fields[..]);
                }
                let chunked = head.finish(&mut out);
                (out, chunked)
            };
            let (mut ours, mut model) = (write(false), write(true));
            if ours != model {
                // The `date` line turned a second between the two: once more.
                (ours, model) = (write(false), write(true));
            }
            proptest::prop_assert_eq!(String::from_utf8_lossy(&ours.0), String::from_utf8_lossy(&model.0));
            proptest::prop_assert_eq!(ours.1, model.1);
        }

        /// Generated heads, plain (no name twice, no hop-by-hop or forwarded field) or not:
        /// the one-pass writer and the map model both write hyper's head.
        #[test]
        fn generated_upstream_heads_are_hypers(
            lines in proptest::collection::vec((0..16usize, 0..6usize), 0..7),
            base in proptest::bool::ANY,
        ) {
            const NAMES: [&str; 16] = [
                "Host", "host", "Accept", "accept", "A", "b", "User-Agent", "X-Key",
                "X-Forwarded-For", "x-forwarded-proto", "X-Forwarded-Host", "Keep-Alive",
                "Connection", "Proxy-Authorization", "Trailer", "X-Forwarded-Fo",
            ];
            const VALUES: [&str; 6] = ["1", "a, b", "keep-alive", "1.2.3.4", "", "A, x"];
            let mut request = b"GET /x?q=1 HTTP/1.1\r\n".to_vec();
            for (name, value) in lines {
                request.extend_from_slice(format!("{}: {}\r\n", NAMES[name], VALUES[value]).as_bytes());
            }
            request.extend_from_slice(b"\r\n");
            let mut fields = [h1::EMPTY_HEADER; h1::MAX_FIELDS];
            let plain = matches!(h1::parse(&request, &mut fields), h1::Parsed::Plain(_));
            proptest::prop_assume!(plain);
            let upstream: Uri = if base { "http://up:81/base/" } else { "http://127.0.0.1:3000" }
                .parse()
                .unwrap();
            let peer: SocketAddr = "192.0.2.7:4000".parse().unwrap();
            let (ours, hypers) = (lean(&request, &upstream, peer), by_hyper(&request, &upstream, peer));
            proptest::prop_assert_eq!(String::from_utf8_lossy(&ours), String::from_utf8_lossy(&hypers));
        }
    }

    #[test]
    fn the_upstream_head_is_the_one_hypers_path_writes() {
        let peer: SocketAddr = "192.0.2.7:4000".parse().unwrap();
        for upstream in ["http://127.0.0.1:3000", "http://up:81/base/"] {
            let upstream: Uri = upstream.parse().unwrap();
            for request in [
                &b"GET / HTTP/1.1\r\nHost: a\r\n\r\n"[..],
                b"GET /x?y=1 HTTP/1.1\r\n\r\n",
                b"GET /x HTTP/1.1\r\nX-Forwarded-For: 1.1.1.1\r\nHost: a\r\nx-forwarded-for: 2.2.2.2, 3.3.3.3\r\nAccept: */*\r\n\r\n",
                b"GET /x HTTP/1.1\r\nConnection: keep-alive\r\nA: 1\r\nKeep-Alive: 5\r\nB: 2\r\nHost: h\r\nC: 3\r\n\r\n",
                b"GET /x HTTP/1.1\r\nProxy-Authorization: x\r\nA: 1\r\nx-forwarded-proto: https\r\nB: 2\r\nX-Forwarded-Host: evil\r\nA: 4\r\n\r\n",
                b"GET /x HTTP/1.1\r\nTrailer: a\r\nProxy-Connection: x\r\nZ: 1\r\nY: 2\r\nX: 3\r\nW: \xff\r\nHost: h\r\n\r\n",
                b"GET /x HTTP/1.1\r\nx-forwarded-for:   \r\nX-Forwarded-For: \r\n\r\n",
            ] {
                assert_eq!(
                    String::from_utf8_lossy(&lean(request, &upstream, peer)),
                    String::from_utf8_lossy(&by_hyper(request, &upstream, peer)),
                    "{}",
                    String::from_utf8_lossy(request)
                );
            }
        }
    }
}
