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
//! **The same bytes as hyper's path.** The decision gets the `HeaderMap` hyper would have
//! built (the limiter and the key extractors read it); the upstream head is the one
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
use http::{HeaderMap, HeaderName, HeaderValue, Method, Uri};
use http_body::Body as _;

use super::{Gateway, Worker};
use crate::h1;
use crate::lane::LaneBody;
use crate::upstream::UpstreamError;

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
    let path = head.path();
    // A target hyper's `Uri` would refuse (400) or alter (a fragment) is hyper's.
    if head.method() != "GET"
        || head.content_length() != 0
        || !path.starts_with('/')
        || path.contains('#')
        || http::uri::PathAndQuery::try_from(path).is_err()
    {
        return false;
    }
    let mut hosts = 0;
    for field in head.fields() {
        // `TE: trailers` would have hyper send the upstream's trailers; two `Host`s are
        // made one by `to_upstream`'s map. Rare: hyper's.
        if field.name.eq_ignore_ascii_case("te") {
            return false;
        }
        hosts += usize::from(field.name.eq_ignore_ascii_case("host"));
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
    let headers = header_map(head);
    let decision = runtime
        .limiter
        .check(&Method::GET, head.path(), &headers, peer.ip())
        .await;
    drop(headers);
    let held = match super::admit(decision.as_ref()).await {
        Ok(held) => held,
        Err(refused) => return whole(out, refused).await,
    };
    if config.upstream.scheme_str() != Some("http") {
        // A reload made the upstream https:// since `accepts`: the lane cannot carry it.
        tracing::warn!(upstream = %config.upstream, "upstream changed under a request; answered 502");
        return whole(out, super::bad_gateway()).await;
    }
    let mut upstream_head = Vec::with_capacity(head.len() + 96);
    write_upstream_head(&mut upstream_head, head, &config.upstream, peer);
    let deadline = tokio::time::Instant::now() + config.upstream_timeout;
    let get = crate::lane::Request::Get(&upstream_head);
    match worker.upstream.send_lane(config, get, deadline).await {
        Ok(response) => pass_on(out, response, decision.as_ref(), held),
        Err(UpstreamError::TimedOut) => {
            tracing::warn!(upstream = %config.upstream, timeout = ?config.upstream_timeout, "upstream sent no response head in time");
            let mut response = super::gateway_timeout(held.1);
            super::after_response(decision.as_ref(), &mut response);
            whole(out, response).await
        }
        Err(e) => whole(out, super::failed(config, &e, decision.as_ref())).await,
    }
}

/// The request's fields as hyper's `HeaderMap` holds them (for the decision).
fn header_map(head: &h1::Head<'_>) -> HeaderMap {
    let mut map = HeaderMap::with_capacity(head.fields().len());
    for field in head.fields() {
        // `httparse` admits only what these admit (tokens; no control bytes but tab).
        let name = HeaderName::from_bytes(field.name.as_bytes());
        let value = HeaderValue::from_bytes(field.value);
        if let (Ok(name), Ok(value)) = (name, value) {
            map.append(name, value);
        }
    }
    map
}

/// A response the gateway made itself (429, 502, 504), as hyper writes it.
async fn whole(out: &mut Vec<u8>, response: axum::response::Response) -> Option<h1::Tail<Body>> {
    crate::front::write_full(out, response).await;
    None
}

/// The upstream's response as the client gets it (hyper's path: `pass_on`): the head
/// written here, the body appended when it came whole with the head and nothing is held
/// until its end, else streamed by the driver.
fn pass_on(
    out: &mut Vec<u8>,
    response: http::Response<LaneBody>,
    decision: Option<&sluicegate_middleware::RateLimitDecision>,
    held: (
        Option<sluicegate_middleware::LeaseGuard>,
        Option<sluicegate_middleware::PoolPermit>,
    ),
) -> Option<h1::Tail<Body>> {
    let (mut parts, mut body) = response.into_parts();
    let tap = super::response_head(&mut parts, decision);
    // What hyper's dispatcher reads off the body before it writes the head.
    let length = if body.is_end_stream() {
        h1::BodyLength::Ended
    } else {
        body.size_hint()
            .exact()
            .map_or(h1::BodyLength::Unknown, h1::BodyLength::Known)
    };
    let framing = h1::write_proxied_head(out, parts.status, &parts.headers, length);
    let unheld = held.0.is_none() && held.1.is_none() && tap.is_none();
    if let Some(whole) = unheld.then(|| body.take_whole()).flatten() {
        if let (Some(whole), Some(_)) = (whole, framing) {
            out.extend_from_slice(&whole);
        }
        return None;
    }
    let body = super::holding(Body::new(body), held, tap);
    match framing {
        Some(chunked) if length != h1::BodyLength::Ended => Some(h1::Tail { body, chunked }),
        // Ended, or a status without a body: hyper drops it unpolled, and so does this.
        _ => None,
    }
}

/// The names `strip_hop_by_hop` removes, in its order.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "proxy-authenticate",
    "proxy-authorization",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
];

/// One name of the upstream head, where `to_upstream`'s `HeaderMap` holds it.
#[derive(Debug, Clone, Copy)]
enum Entry {
    /// The client's field lines of one name, from the first (its index).
    Client(usize),
    ForwardedFor,
    ForwardedProto,
    ForwardedHost,
    Host,
}

/// The order of `to_upstream`'s `HeaderMap`: one entry per name, in the order the names
/// first came; a removal moves the last entry into the removed one's place, as the map's
/// `swap_remove` does; an insert replaces an entry in place or appends one.
struct Fields<'h, 'a> {
    fields: &'h [h1::Header<'a>],
    entries: Vec<Entry>,
}

impl<'h, 'a> Fields<'h, 'a> {
    fn position(&self, name: &str) -> Option<usize> {
        self.entries.iter().position(|entry| match *entry {
            Entry::Client(i) => self.fields[i].name.eq_ignore_ascii_case(name),
            _ => false,
        })
    }

    fn remove(&mut self, name: &str) {
        if let Some(at) = self.position(name) {
            self.entries.swap_remove(at);
        }
    }

    fn insert(&mut self, name: &str, entry: Entry) {
        match self.position(name) {
            Some(at) => self.entries[at] = entry,
            None => self.entries.push(entry),
        }
    }

    /// The values of the client's lines named `name`, if the map still holds them.
    fn values<'n>(&self, name: &'n str) -> impl Iterator<Item = &'a [u8]> + use<'h, 'a, 'n> {
        let held = self.position(name).is_some();
        let fields: &'h [h1::Header<'a>] = self.fields;
        fields
            .iter()
            .filter(move |f| held && f.name.eq_ignore_ascii_case(name))
            .map(|f| f.value)
    }
}

/// The head `to_upstream` and the lane's `write_request` make for this request: `GET`,
/// the target under the upstream's base path, the client's fields without the hop-by-hop
/// ones, one `X-Forwarded-For` (every line the client sent, then the peer),
/// `X-Forwarded-Proto: http`, `X-Forwarded-Host` and `Host` (the client's, else the
/// upstream's authority). Names lower-case, as the map writes them.
fn write_upstream_head(out: &mut Vec<u8>, head: &h1::Head<'_>, upstream: &Uri, peer: SocketAddr) {
    let fields = head.fields();
    let mut map = Fields {
        fields,
        entries: Vec::with_capacity(fields.len() + 4),
    };
    for (i, field) in fields.iter().enumerate() {
        if !fields[..i]
            .iter()
            .any(|f| f.name.eq_ignore_ascii_case(field.name))
        {
            map.entries.push(Entry::Client(i));
        }
    }
    let host = map.values("host").next();
    strip_hop_by_hop(&mut map);
    let mut forwarded_for = Vec::with_capacity(64);
    for line in map.values("x-forwarded-for") {
        let line = line.trim_ascii();
        if !line.is_empty() {
            forwarded_for.extend_from_slice(line);
            forwarded_for.extend_from_slice(b", ");
        }
    }
    super::push_ip(&mut forwarded_for, peer.ip());
    map.insert("x-forwarded-for", Entry::ForwardedFor);
    map.insert("x-forwarded-proto", Entry::ForwardedProto);
    if host.is_some() {
        map.insert("x-forwarded-host", Entry::ForwardedHost);
    }
    let authority = upstream.authority().map(|a| a.as_str().as_bytes());
    let host_line = host.or(authority);
    if host_line.is_some() {
        map.insert("host", Entry::Host);
    }

    out.extend_from_slice(b"GET ");
    let base = upstream.path().trim_end_matches('/');
    out.extend_from_slice(base.as_bytes());
    out.extend_from_slice(head.path().as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    let line = |out: &mut Vec<u8>, name: &[u8], value: &[u8]| {
        out.extend(name.iter().map(u8::to_ascii_lowercase));
        out.extend_from_slice(b": ");
        out.extend_from_slice(value);
        out.extend_from_slice(b"\r\n");
    };
    for entry in &map.entries {
        match *entry {
            Entry::Client(first) => {
                let name = fields[first].name;
                for field in fields[first..]
                    .iter()
                    .filter(|f| f.name.eq_ignore_ascii_case(name))
                {
                    line(out, name.as_bytes(), field.value);
                }
            }
            Entry::ForwardedFor => line(out, b"x-forwarded-for", &forwarded_for),
            Entry::ForwardedProto => line(out, b"x-forwarded-proto", b"http"),
            Entry::ForwardedHost => line(out, b"x-forwarded-host", host.unwrap_or_default()),
            Entry::Host => line(out, b"host", host_line.unwrap_or_default()),
        }
    }
    out.extend_from_slice(b"\r\n");
}

/// `strip_hop_by_hop` on the model: only when a hop-by-hop name is there, the names the
/// `Connection` lines list (those `HeaderValue::to_str` reads), then the hop-by-hop ones.
fn strip_hop_by_hop(map: &mut Fields<'_, '_>) {
    if !HOP_BY_HOP.iter().any(|name| map.position(name).is_some()) {
        return;
    }
    let listed: Vec<&str> = map
        .values("connection")
        .filter_map(|v| std::str::from_utf8(v).ok())
        .filter(|v| v.bytes().all(|b| b == b'\t' || (0x20..0x7f).contains(&b)))
        .flat_map(|v| v.split(','))
        .map(str::trim)
        .filter(|name| !name.is_empty())
        .collect();
    for name in listed {
        map.remove(name);
    }
    for name in HOP_BY_HOP {
        map.remove(name);
    }
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
