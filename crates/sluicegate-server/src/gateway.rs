//! The gateway: a streaming reverse proxy in front of one upstream. Requests matching a
//! route are decided by the rate-limit engine (rejected with the contract's 429, delayed,
//! or forwarded with the rate-limit headers); everything else is forwarded untouched.
//!
//! Bodies stream both ways (nothing is buffered); hop-by-hop headers are removed in both
//! directions (RFC 9110 §7.6.1); the upstream gets one `X-Forwarded-For` that joins every
//! line the client sent and appends the peer, and `X-Forwarded-Proto`/`X-Forwarded-Host`;
//! the client's `Host` (HTTP/2: its `:authority`) is passed on. An unreachable upstream
//! answers 502, one that sends no response head within `gateway.upstream_timeout` 504,
//! both with a JSON error that names no upstream address (the log does).
//!
//! Clients speak HTTP/1.1 or HTTP/2 (h2c with prior knowledge, or h2 by ALPN when the
//! gateway serves TLS, `crate::tls`); every request, every HTTP/2 stream, is decided on its
//! own. The upstream is `http://` or `https://` (HTTP/1.1, rustls). Upgrades (WebSocket)
//! are decided at the handshake and then tunnelled ([`crate::tunnel`]).
//!
//! A plain HTTP/1.1 `GET` to an `http://` upstream is answered on the lean front instead
//! (`gateway/lean.rs`, on [`crate::h1`]): the same steps and the same bytes, without hyper's
//! server `Request`/`Response` or the upstream request's `HeaderMap`.

mod fields;
mod lean;

use crate::error::ServerError;
use std::future::Future;
use std::io::Write as _;
use std::net::SocketAddr;

use axum::body::Body;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use http::uri::PathAndQuery;
use sluicegate_middleware::PermitBody;
use tokio::net::TcpSocket;

use std::sync::Arc;

use tokio::sync::Semaphore;

use sluicegate_middleware::{LeaseBody, LeaseGuard, PoolPermit, RateLimitDecision};

use crate::api::ApiError;
use crate::config::ConnectionLimits;
use crate::state::AppState;
use crate::upstream::{GiveBackBody, Sent, Upstream, UpstreamError};

/// One worker's gateway, shared by its connections. Behind one `Arc` per worker, so a
/// request clones one reference that only this thread touches, instead of the shared
/// state's references, whose counts the two workers' cores would pass back and forth.
#[derive(Clone)]
struct Gateway(Arc<Worker>);

struct Worker {
    state: AppState,
    /// This worker's upstream connections (a new pool when a reload changes the upstream).
    upstream: Arc<Upstream>,
}

/// The gateway's sockets: one per worker thread, all bound to the same address with
/// `SO_REUSEPORT`, so the kernel spreads connections over the workers.
pub struct Listeners {
    sockets: Vec<TcpSocket>,
    addr: SocketAddr,
}

impl Listeners {
    /// Binds one socket per available core to `addr` (port 0: one free port for all).
    pub fn bind(addr: SocketAddr) -> Result<Listeners, ServerError> {
        let workers = std::thread::available_parallelism().map_or(1, |n| n.get());
        // SO_REUSEPORT would let a second instance share a given port silently; an ordinary
        // bind first fails as usual when the address is taken. Port 0 skips that probe: the
        // kernel never hands out a port another socket holds, even with SO_REUSEPORT, and
        // a probe's port, once dropped, could be taken by any outgoing connection before the
        // workers listen on it (`listen` then fails with "address in use").
        let addr = if addr.port() == 0 {
            addr
        } else {
            std::net::TcpListener::bind(addr)
                .and_then(|probe| probe.local_addr())
                .map_err(|source| listen_error(addr, source))?
        };
        let first = reuse_socket(addr)?;
        let addr = first.local_addr().map_err(|source| ServerError::Setup {
            what: "gateway socket",
            source,
        })?;
        let mut sockets = vec![first];
        for _ in 1..workers {
            sockets.push(reuse_socket(addr)?);
        }
        Ok(Listeners { sockets, addr })
    }

    /// The bound address.
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }
}

fn listen_error(addr: SocketAddr, source: std::io::Error) -> ServerError {
    ServerError::Listen {
        addr,
        what: "gateway",
        source,
    }
}

fn reuse_socket(addr: SocketAddr) -> Result<TcpSocket, ServerError> {
    let socket = if addr.is_ipv4() {
        TcpSocket::new_v4()
    } else {
        TcpSocket::new_v6()
    }
    .map_err(|source| ServerError::Setup {
        what: "gateway socket",
        source,
    })?;
    let _ = socket.set_reuseaddr(true);
    #[cfg(unix)]
    socket
        .set_reuseport(true)
        .map_err(|source| ServerError::Setup {
            what: "gateway socket: SO_REUSEPORT",
            source,
        })?;
    let _ = socket.set_nodelay(true);
    socket
        .bind(addr)
        .map_err(|source| listen_error(addr, source))?;
    Ok(socket)
}

/// Starts the gateway's workers and returns once every one of them listens (so a client
/// never finds the port closed after the server said it is ready). The returned future
/// resolves when they have all stopped (after `stop` turns true, and draining).
///
/// Each socket gets its own thread running a single-threaded Tokio runtime with its own
/// upstream connection pool, the way nginx runs one event loop per worker: a proxied
/// request then never hops between threads (which costs more than the proxying itself on
/// a small machine).
pub async fn start(
    listeners: Listeners,
    state: AppState,
    stop: tokio::sync::watch::Receiver<bool>,
) -> Result<impl std::future::Future<Output = Result<(), ServerError>> + Send + 'static, ServerError>
{
    let mut ready = Vec::new();
    let mut done = Vec::new();
    // `max_connections` is shared out among the workers (nginx's worker_connections is per
    // worker too). One budget for all would deadlock when full: a freed slot could go to a
    // worker whose socket has nothing waiting while the kernel queued the next connection
    // on another's. A worker never gets less than one slot, so a budget below the number of
    // cores runs that many workers; the other sockets are closed before they listen.
    let limits = state.runtime().config.server.connections;
    let workers = listeners.sockets.len().min(limits.max_connections.max(1));
    let share = |i: usize| {
        let (each, rest) = (
            limits.max_connections / workers,
            limits.max_connections % workers,
        );
        crate::conn::permits(&ConnectionLimits {
            max_connections: each + usize::from(i < rest),
            ..limits
        })
    };
    // TLS is decided at start (a reload changes the certificate, not whether there is one).
    let tls = state
        .runtime()
        .config
        .gateway
        .as_ref()
        .and_then(|g| g.tls.as_ref())
        .map(|_| tokio_rustls::TlsAcceptor::from(crate::tls::server_config(state.clone())));
    for (i, socket) in listeners.sockets.into_iter().take(workers).enumerate() {
        let permits = share(i);
        let tls = tls.clone();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel::<Result<(), ServerError>>();
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<Result<(), ServerError>>();
        let state = state.clone();
        let stop = stop.clone();
        std::thread::Builder::new()
            .name(format!("gateway-{i}"))
            .spawn(move || {
                let result = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|source| ServerError::Setup {
                        what: "gateway runtime",
                        source,
                    })
                    .and_then(|rt| {
                        rt.block_on(worker(
                            socket,
                            state,
                            (limits, permits, tls),
                            stop,
                            ready_tx,
                        ))
                    });
                let _ = done_tx.send(result);
            })
            .map_err(|source| ServerError::Setup {
                what: "gateway thread",
                source,
            })?;
        ready.push(ready_rx);
        done.push(done_rx);
    }
    for rx in ready {
        rx.await
            .map_err(|_| ServerError::Worker("a gateway worker failed to start"))??;
    }
    Ok(async move {
        for rx in done {
            rx.await
                .map_err(|_| ServerError::Worker("a gateway worker panicked"))??;
        }
        Ok(())
    })
}

async fn worker(
    socket: TcpSocket,
    state: AppState,
    (limits, permits, tls): (
        ConnectionLimits,
        Arc<Semaphore>,
        Option<tokio_rustls::TlsAcceptor>,
    ),
    stop: tokio::sync::watch::Receiver<bool>,
    ready: tokio::sync::oneshot::Sender<Result<(), ServerError>>,
) -> Result<(), ServerError> {
    let listener = match socket.listen(1024) {
        Ok(listener) => listener,
        Err(e) => {
            let _ = ready.send(Err(ServerError::Setup {
                what: "gateway listen",
                source: e,
            }));
            return Ok(());
        }
    };
    let _ = ready.send(Ok(()));
    let runtime = state.runtime();
    let upstream = Arc::new(Upstream::new(runtime.config.gateway.as_ref()));
    drop(runtime);
    let app = Gateway(Arc::new(Worker { state, upstream }));
    // Plain HTTP/1.1 requests are answered on the lean front (`lean.rs`); over TLS, hyper
    // answers all (the TLS handshake and ALPN are its, and `X-Forwarded-Proto` says https).
    let front = crate::conn::Handlers {
        lean: tls.is_none().then(|| app.clone()),
        app,
    };
    crate::conn::serve_with(listener, front, limits, permits, tls, stop).await
}

impl crate::conn::App for Gateway {
    fn call(
        &self,
        request: hyper::Request<hyper::body::Incoming>,
        peer: SocketAddr,
    ) -> impl Future<Output = Response> + Send + 'static + use<> {
        proxy(self.clone(), peer, request)
    }
}

/// The request stays hyper's `Incoming` until it must go through hyper's client: the common
/// bodyless request on the lean lane never needs it boxed as a `Body` (an allocation a request).
async fn proxy(
    Gateway(gateway): Gateway,
    peer: SocketAddr,
    mut request: hyper::Request<hyper::body::Incoming>,
) -> Response {
    let runtime = gateway.state.runtime();
    let Some(config) = runtime.config.gateway.as_ref() else {
        return bad_gateway();
    };
    let upgrade = crate::tunnel::client_upgrade(&mut request);
    let decision = runtime
        .limiter
        .check(
            request.method(),
            request.uri().path_and_query().map_or("/", |p| p.as_str()),
            request.headers(),
            peer.ip(),
        )
        .await;
    let (guard, permit) = match admit(decision.as_ref()).await {
        Ok(held) => held,
        Err(refused) => return refused,
    };
    let upstream_request = match to_upstream(request, &config.upstream, peer, upgrade.is_some()) {
        Ok(request) => request,
        Err(e) => return e.into_response(),
    };
    let sent = gateway
        .upstream
        .send(config, upstream_request, upgrade.is_some());
    // `send` bounds the wait for the response head by `upstream_timeout` itself (the lane
    // with one timer per upstream connection, not one per request).
    let (response, body) = match sent.await {
        Ok(Sent::Lane(response)) => {
            let (parts, body) = response.into_parts();
            (parts, Body::new(body))
        }
        Ok(Sent::Hyper(response, pooled)) => {
            if let Some(client_side) =
                upgrade.filter(|_| response.status() == StatusCode::SWITCHING_PROTOCOLS)
            {
                // The connection becomes the tunnel's: not the pool's.
                drop(pooled);
                let limits = runtime.config.server.connections;
                return crate::tunnel::switch(
                    response,
                    client_side,
                    decision.as_ref(),
                    (guard, permit),
                    limits,
                );
            }
            let (parts, body) = response.into_parts();
            (parts, hyper_body(&gateway.upstream, body, pooled))
        }
        Err(UpstreamError::TimedOut) => {
            tracing::warn!(upstream = %config.upstream, timeout = ?config.upstream_timeout, "upstream sent no response head in time");
            let mut response = gateway_timeout(permit);
            after_response(decision.as_ref(), &mut response);
            return response;
        }
        Err(e) => return failed(config, &e, decision.as_ref()),
    };
    pass_on(response, body, decision.as_ref(), (guard, permit))
}

/// The 502 for an upstream that could not be reached or answered malformed.
fn failed(
    config: &crate::config::GatewayConfig,
    error: &UpstreamError,
    decision: Option<&RateLimitDecision>,
) -> Response {
    let error = error_chain(error);
    tracing::warn!(upstream = %config.upstream, %error, "upstream request failed");
    let mut response = bad_gateway();
    after_response(decision, &mut response);
    response
}

/// A body from hyper's client. Usually hyper has read the whole response off the connection
/// by the time its head is here, and the connection is ready for the next request;
/// otherwise it goes back when the body has been read.
fn hyper_body(
    upstream: &Arc<Upstream>,
    body: hyper::body::Incoming,
    pooled: crate::upstream::Pooled,
) -> Body {
    if pooled.is_ready() {
        upstream.give_back(pooled);
        Body::new(body)
    } else {
        Body::new(GiveBackBody::new(body, pooled, upstream.clone()))
    }
}

/// The upstream's response as the client gets it: hop-by-hop headers removed, the rate-limit
/// headers added, its body holding what the request was admitted with until it ends.
fn pass_on(
    mut parts: http::response::Parts,
    body: Body,
    decision: Option<&RateLimitDecision>,
    held: (Option<LeaseGuard>, Option<PoolPermit>),
) -> Response {
    let tap = response_head(&mut parts, decision);
    Response::from_parts(parts, holding(body, held, tap))
}

/// The upstream's response head as the client gets it: hop-by-hop headers removed, the
/// rate-limit headers added, the route's `settle` and `count` applied from the head; the
/// tap that reads the body's usage as it passes, if the route settles from the body.
fn response_head(
    parts: &mut http::response::Parts,
    decision: Option<&RateLimitDecision>,
) -> Option<sluicegate_middleware::UsageTap> {
    strip_hop_by_hop(&mut parts.headers);
    let decision = decision?;
    decision.write_headers(&mut parts.headers);
    decision
        .after_response()
        .and_then(|(settler, after)| settler.on_head(&after, parts.status, &mut parts.headers))
}

/// `body`, holding what the request was admitted with until it ends (or is dropped).
fn holding(
    body: Body,
    (guard, permit): (Option<LeaseGuard>, Option<PoolPermit>),
    tap: Option<sluicegate_middleware::UsageTap>,
) -> Body {
    if guard.is_none() && permit.is_none() && tap.is_none() {
        // Nothing to release when the body ends: no wrapper to poll through.
        return body;
    }
    Body::new(LeaseBody::new(PermitBody::new(body, permit), guard).with_tap(tap))
}

/// What an admitted request holds until its response body ends or is dropped (the client
/// went away): its concurrency lease (freed at once if the upstream fails) and its pool slot,
/// after any delay its decision asks for; or the refusal to answer with.
async fn admit(
    decision: Option<&RateLimitDecision>,
) -> Result<(Option<LeaseGuard>, Option<PoolPermit>), Response> {
    let Some(decision) = decision else {
        return Ok((None, None));
    };
    if !decision.is_allowed() {
        return Err(decision.rejection().map(Body::new));
    }
    let guard = decision.lease_guard();
    decision.wait().await;
    match decision.enter_pool().await {
        Ok(permit) => Ok((guard, permit)),
        Err(rejected) => Err(rejected.response().map(Body::new)),
    }
}

/// The client's request as the upstream gets it: its path under `upstream`'s (origin-form,
/// as HTTP/1.1 sends it to a server, not a proxy), hop-by-hop
/// headers removed (but an upgrade's `Upgrade`/`Connection: upgrade` when `upgrading`),
/// `X-Forwarded-*` added, HTTP/1.1 (the client may speak 1.1 or 2 to us; an HTTP/2
/// client's `:authority` becomes the `Host`).
fn to_upstream<B>(
    request: http::Request<B>,
    upstream: &http::Uri,
    peer: SocketAddr,
    upgrading: bool,
) -> Result<http::Request<B>, ApiError> {
    let (mut parts, body) = request.into_parts();
    let host = parts.headers.get(header::HOST).cloned().or_else(|| {
        let authority = parts.uri.authority()?;
        HeaderValue::from_str(authority.as_str()).ok()
    });
    let secure = parts.extensions.get::<crate::conn::Secure>().is_some();
    parts.uri = upstream_uri(upstream, &parts.uri)?;
    let protocol = upgrading
        .then(|| parts.headers.get(header::UPGRADE).cloned())
        .flatten();
    strip_hop_by_hop(&mut parts.headers);
    if let Some(protocol) = protocol {
        crate::tunnel::upgrade_headers(&mut parts.headers, protocol);
    }
    forwarded_headers(&mut parts.headers, peer, host.clone(), secure);
    // HTTP/1.1 needs a `Host`: the client's, else (an HTTP/1.0 client) the upstream's.
    let host = host.or_else(|| {
        let authority = upstream.authority()?;
        HeaderValue::from_str(authority.as_str()).ok()
    });
    if let Some(host) = host {
        parts.headers.insert(header::HOST, host);
    }
    parts.version = axum::http::Version::HTTP_11;
    Ok(axum::http::Request::from_parts(parts, body))
}

/// The route's `count` (and `settle`) for an answer the gateway made itself (502, 504), or
/// an upgrade's 101.
pub(crate) fn after_response(decision: Option<&RateLimitDecision>, response: &mut Response) {
    if let Some((settler, after)) = decision.and_then(RateLimitDecision::after_response) {
        let status = response.status();
        drop(settler.on_head(&after, status, response.headers_mut()));
    }
}

/// The request's target at the upstream (origin-form): the upstream's base path, then the
/// request's path and query.
fn upstream_uri(upstream: &Uri, request: &Uri) -> Result<Uri, ApiError> {
    let base = upstream.path().trim_end_matches('/');
    if base.is_empty()
        && let Some(path_and_query) = request
            .path_and_query()
            .filter(|pq| pq.as_str().starts_with('/'))
    {
        // The common case, an upstream without a base path: the request's own path and
        // query as parsed (shared, not copied), no text to format and parse again.
        return Ok(Uri::from(path_and_query.clone()));
    }
    let path_and_query = request.path_and_query().map_or("/", |pq| pq.as_str());
    PathAndQuery::try_from(format!("{base}{path_and_query}"))
        .map(Uri::from)
        .map_err(|e| ApiError::invalid(format!("cannot forward this URI: {e}")))
}

/// Connection-specific headers (RFC 9110 §7.6.1), and those the `Connection` header names.
pub(crate) fn strip_hop_by_hop(headers: &mut HeaderMap) {
    // Most messages carry none: one pass over the names instead of nine hashed removals.
    if !headers.keys().any(is_hop_by_hop) {
        return;
    }
    let named: Vec<HeaderName> = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .filter_map(|name| HeaderName::from_bytes(name.trim().as_bytes()).ok())
        .collect();
    for name in named {
        headers.remove(name);
    }
    for name in &HOP_BY_HOP {
        headers.remove(name);
    }
}

/// The connection-specific headers (RFC 9110 §7.6.1) removed from every message passed on.
static HOP_BY_HOP: [HeaderName; 9] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    HeaderName::from_static("proxy-connection"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Whether `name` is one of [`HOP_BY_HOP`] (`Connection` among them, so a message naming
/// other headers in it takes the full path).
fn is_hop_by_hop(name: &HeaderName) -> bool {
    HOP_BY_HOP.contains(name)
}

// Names made once: a `&str` key is parsed and checked again on every call (callgrind: ~1,800
// instructions a request for these three).
static X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
static X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
static X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");

/// One `X-Forwarded-For`: every line the client sent, in order, then the peer. A proxy that
/// kept only the first (or last) line would let a client hide entries from the upstream.
fn forwarded_headers(
    headers: &mut HeaderMap,
    peer: SocketAddr,
    host: Option<HeaderValue>,
    secure: bool,
) {
    let mut xff: Vec<u8> = Vec::new();
    for line in headers.get_all(&X_FORWARDED_FOR) {
        let line = line.as_bytes().trim_ascii();
        if !line.is_empty() {
            xff.extend_from_slice(line);
            xff.extend_from_slice(b", ");
        }
    }
    push_ip(&mut xff, peer.ip());
    match HeaderValue::from_maybe_shared(bytes::Bytes::from(xff)) {
        Ok(value) => {
            headers.insert(X_FORWARDED_FOR.clone(), value);
        }
        Err(_) => {
            headers.remove(&X_FORWARDED_FOR);
        }
    }
    let proto = if secure { "https" } else { "http" };
    headers.insert(X_FORWARDED_PROTO.clone(), HeaderValue::from_static(proto));
    if let Some(host) = host {
        headers.insert(X_FORWARDED_HOST.clone(), host);
    }
}

/// Appends `ip` as text, written into the buffer (no string of its own per request). IPv4
/// by hand: `Ipv4Addr`'s `Display` measures and pads through the formatter (callgrind: ~1,300
/// instructions a request, against ~100 here); IPv6 through `Display`.
fn push_ip(out: &mut Vec<u8>, ip: std::net::IpAddr) {
    let std::net::IpAddr::V4(v4) = ip else {
        let _ = write!(out, "{ip}");
        return;
    };
    for (i, octet) in v4.octets().into_iter().enumerate() {
        if i > 0 {
            out.push(b'.');
        }
        if octet >= 100 {
            out.push(b'0' + octet / 100);
        }
        if octet >= 10 {
            out.push(b'0' + octet / 10 % 10);
        }
        out.push(b'0' + octet % 10);
    }
}

/// The 504 for an upstream that sent no response head in time. A timeout is the upstream's
/// latency, so the pool slot is freed as a complete response (a latency sample for an
/// adaptive pool), unlike a refused connection's, which is dropped without one.
fn gateway_timeout(permit: Option<sluicegate_middleware::PoolPermit>) -> Response {
    if let Some(permit) = permit {
        permit.complete();
    }
    ApiError::new(
        StatusCode::GATEWAY_TIMEOUT,
        "gateway_timeout",
        "the upstream did not answer in time",
    )
    .into_response()
}

/// An error with its causes (hyper's client says only "client error (Connect)"; the cause,
/// such as a certificate the upstream's CA did not sign, is what an operator needs).
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        text.push_str(": ");
        text.push_str(&e.to_string());
        cause = e.source();
    }
    text
}

fn bad_gateway() -> Response {
    ApiError::new(
        StatusCode::BAD_GATEWAY,
        "bad_gateway",
        "the upstream did not answer",
    )
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn port_zero_binds_every_worker_to_one_port_and_a_taken_port_is_refused() {
        let listeners = Listeners::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let addr = listeners.local_addr();
        assert_ne!(addr.port(), 0);
        let mut listening = Vec::new();
        for socket in listeners.sockets {
            assert_eq!(socket.local_addr().unwrap(), addr);
            listening.push(socket.listen(16).unwrap());
        }
        // A second gateway on the same port is refused, not silently sharing it.
        assert!(Listeners::bind(addr).is_err());
    }

    #[test]
    fn upstream_uri_keeps_path_and_query() {
        let up: Uri = "http://127.0.0.1:3000".parse().unwrap();
        let req: Uri = "/api/x?a=1&b=%20".parse().unwrap();
        assert_eq!(
            upstream_uri(&up, &req).unwrap().to_string(),
            "/api/x?a=1&b=%20"
        );
        let based: Uri = "http://h:1/base/".parse().unwrap();
        assert_eq!(
            upstream_uri(&based, &req).unwrap().to_string(),
            "/base/api/x?a=1&b=%20"
        );
    }

    #[test]
    fn hop_by_hop_headers_go() {
        let mut h = HeaderMap::new();
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("close, x-secret"),
        );
        h.insert("x-secret", HeaderValue::from_static("1"));
        h.insert(
            header::TRANSFER_ENCODING,
            HeaderValue::from_static("chunked"),
        );
        h.insert("x-kept", HeaderValue::from_static("1"));
        strip_hop_by_hop(&mut h);
        assert_eq!(h.len(), 1);
        assert!(h.contains_key("x-kept"));
        // Each one alone goes too (the pass that skips messages without any of them).
        for name in &HOP_BY_HOP {
            let mut h = HeaderMap::new();
            h.insert(name.clone(), HeaderValue::from_static("1"));
            h.insert("x-kept", HeaderValue::from_static("1"));
            strip_hop_by_hop(&mut h);
            assert_eq!(h.len(), 1, "{name} stayed");
        }
    }

    #[test]
    fn addresses_are_written_as_display_writes_them() {
        let mut every_octet: Vec<std::net::IpAddr> = (0..=255u8)
            .map(|n| std::net::Ipv4Addr::new(n, 255 - n, n / 3, 7).into())
            .collect();
        every_octet.push("::1".parse().unwrap());
        every_octet.push("2001:db8::ff00:42:8329".parse().unwrap());
        every_octet.push("::ffff:192.0.2.1".parse().unwrap());
        for ip in every_octet {
            let mut out = Vec::new();
            push_ip(&mut out, ip);
            assert_eq!(String::from_utf8(out).unwrap(), ip.to_string());
        }
    }

    #[test]
    fn forwarded_for_is_appended() {
        let mut h = HeaderMap::new();
        h.insert("x-forwarded-for", HeaderValue::from_static("203.0.113.9"));
        forwarded_headers(&mut h, "192.0.2.1:5000".parse().unwrap(), None, false);
        assert_eq!(h["x-forwarded-for"], "203.0.113.9, 192.0.2.1");
        // Every line, in order, then the peer: one header.
        let mut h = HeaderMap::new();
        h.append(
            "x-forwarded-for",
            HeaderValue::from_static("1.1.1.1, 2.2.2.2"),
        );
        h.append("x-forwarded-for", HeaderValue::from_static(" "));
        h.append("x-forwarded-for", HeaderValue::from_static("3.3.3.3"));
        forwarded_headers(&mut h, "192.0.2.1:5000".parse().unwrap(), None, false);
        assert_eq!(h.get_all("x-forwarded-for").iter().count(), 1);
        assert_eq!(h["x-forwarded-for"], "1.1.1.1, 2.2.2.2, 3.3.3.3, 192.0.2.1");
    }
}
