//! The gateway's upstream client: one per worker thread, a bounded pool of idle HTTP/1.1
//! connections (`hyper::client::conn::http1` senders) to the one upstream, `http://` or
//! `https://` (rustls).
//!
//! Why not `hyper_util`'s pooled client: per request it hashed the pool key (SipHash), raced
//! a connect future against the checkout, boxed the response future and spawned a task to
//! return the connection once the response was read (callgrind: ~10,000 instructions a
//! request, a fifth of the gateway's). Here a request takes the most recently used idle
//! connection under one uncontended lock, and gives it back when the connection is ready for
//! the next request, which for an ordinary response is already true when its head arrives
//! (hyper's connection task reads the whole small body at once and goes idle).
//!
//! What keeps the pool honest:
//! - a connection goes back only when hyper says it is ready for another request (the
//!   response read to its end, the request sent to its end); anything else (an upstream that
//!   closed it, a response body the client did not read to the end, an upstream that
//!   answered before the request body was sent, an upgrade) is dropped, and hyper closes it;
//! - at most [`MAX_IDLE`] idle connections a worker (the oldest goes first), none kept
//!   longer than [`IDLE_TIMEOUT`];
//! - a request the upstream never saw (a kept-alive connection it had just closed) is sent
//!   again, once, on a new connection;
//! - a reload that changes the upstream, its scheme or `upstream_ca` starts a new pool; the
//!   old connections are not reused.
//!
//! The common request — an `http://` upstream, no request body, no upgrade — takes the lean
//! lane instead ([`crate::lane`]: a hand-written HTTP/1.1 client on a connection of this
//! same pool, kept in a list of its own); the rules above hold for it too, a request the
//! upstream never answered on a kept-alive connection being sent again only when its method
//! is idempotent (the lane cannot tell "never seen" from "seen, then closed").

use std::collections::VecDeque;
use std::pin::Pin;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::Body;
use http::uri::Authority;
use hyper::body::{Frame, Incoming, SizeHint};
use hyper::client::conn::http1::SendRequest;
use hyper_rustls::HttpsConnector;
use hyper_util::client::legacy::connect::HttpConnector;
use tower::ServiceExt as _;

use crate::config::GatewayConfig;
use crate::lane::{Conn, LaneBody, LaneError};

/// How long connecting to the upstream may take before the gateway answers 502.
pub const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The most idle connections a worker keeps (nginx's `keepalive` is per worker too).
pub const MAX_IDLE: usize = 128;

/// How long an idle connection may wait for its next request before it is closed.
pub const IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a request did not get the upstream's response head.
#[derive(Debug, thiserror::Error)]
pub enum UpstreamError {
    /// No connection: refused, unreachable, timed out, or a TLS handshake that failed.
    #[error("connect")]
    Connect(#[source] Box<dyn std::error::Error + Send + Sync>),
    /// The HTTP/1.1 handshake on a new connection failed.
    #[error("handshake")]
    Handshake(#[source] hyper::Error),
    /// The connection failed while the request was sent or the response head read.
    #[error("request")]
    Request(#[source] hyper::Error),
    /// The lean lane's exchange failed, or the upstream's answer was malformed.
    #[error("request")]
    Lane(#[source] LaneError),
    /// No response head within `gateway.upstream_timeout` (the gateway answers 504).
    #[error("no response head in time")]
    TimedOut,
}

/// The upstream's response head: from hyper's client (with the connection, to give back
/// when hyper is ready), or from the lean lane (its body gives the connection back).
pub enum Sent {
    /// Through hyper's client: a body, an upgrade, or an `https://` upstream.
    Hyper(http::Response<Incoming>, Pooled),
    /// Through the lean lane.
    Lane(http::Response<LaneBody>),
}

/// What a pool was made for: the upstream's scheme and authority, and the `upstream_ca`
/// (its file hash; `None`: the system's roots, read only for an `https://` upstream).
#[derive(PartialEq)]
struct MadeFor {
    https: bool,
    authority: Option<Authority>,
    ca: Option<u64>,
}

impl MadeFor {
    fn of(config: Option<&GatewayConfig>) -> MadeFor {
        MadeFor {
            https: config.is_some_and(|g| g.upstream.scheme_str() == Some("https")),
            authority: config.and_then(|g| g.upstream.authority().cloned()),
            ca: config
                .and_then(|g| g.upstream_ca.as_ref())
                .map(|ca| ca.print),
        }
    }

    /// The comparison made on every request, without building a `MadeFor`.
    fn matches(&self, config: &GatewayConfig) -> bool {
        self.https == (config.upstream.scheme_str() == Some("https"))
            && same_authority(self.authority.as_ref(), config.upstream.authority())
            && self.ca == config.upstream_ca.as_ref().map(|ca| ca.print)
    }
}

/// `a == b` for authorities (`Authority`'s own comparison ignores ASCII case), the bytes
/// first: on every request they are the same text (the configuration's), and its byte at
/// a time comparison cost ~270 instructions a request (docs/benchmarks/server.md).
fn same_authority(a: Option<&Authority>, b: Option<&Authority>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a.as_str() == b.as_str() || a == b,
        (a, b) => a.is_none() && b.is_none(),
    }
}

/// One worker's upstream client (see the module's documentation).
pub struct Upstream(Mutex<Pool>);

struct Pool {
    made_for: MadeFor,
    /// Counts the pools this worker made: a connection of an earlier one is not taken back.
    generation: u64,
    connector: HttpsConnector<HttpConnector>,
    /// Oldest first; requests take from the back (the warmest connection).
    idle: VecDeque<Idle>,
    /// The lean lane's idle connections, the same way.
    lane: VecDeque<IdleConn>,
}

struct IdleConn {
    conn: Conn,
    since: Instant,
}

struct Idle {
    sender: SendRequest<Body>,
    since: Instant,
}

/// A response head the lane has read and not decoded: the connection it came on (its body
/// follows there), the head's bytes and what `parse` found (the fields' places in
/// `conn.offsets()`).
pub struct Exchanged {
    /// The connection, its buffer at the body.
    pub conn: Conn,
    /// The head's bytes.
    pub head: bytes::Bytes,
    /// Its status and length.
    pub parsed: crate::lane::ParsedHead,
    generation: u64,
}

impl Exchanged {
    /// The body that follows the head, framed by `framing` (from `conn.decode` or
    /// `conn.frame`); it gives the connection back to `upstream` at its end.
    pub fn body(self, framing: crate::lane::Framing, upstream: &Arc<Upstream>) -> LaneBody {
        LaneBody::start(self.conn, framing, upstream, self.generation)
    }
}

/// A connection in use by one request, to be given back with [`Upstream::give_back`].
pub struct Pooled {
    sender: SendRequest<Body>,
    generation: u64,
}

fn connector(config: Option<&GatewayConfig>, made_for: &MadeFor) -> HttpsConnector<HttpConnector> {
    let ca = config.and_then(|g| g.upstream_ca.as_ref());
    let mut http = HttpConnector::new();
    http.set_connect_timeout(Some(CONNECT_TIMEOUT));
    http.set_nodelay(true);
    // The https connector decides by the URI's scheme; the inner one must not refuse an
    // https:// URI itself.
    http.enforce_http(false);
    hyper_rustls::HttpsConnectorBuilder::new()
        .with_tls_config(crate::tls::upstream_client_config(ca, made_for.https))
        .https_or_http()
        .enable_http1()
        .wrap_connector(http)
}

impl Upstream {
    /// An empty pool for the running `[gateway]`.
    pub fn new(config: Option<&GatewayConfig>) -> Upstream {
        let made_for = MadeFor::of(config);
        Upstream(Mutex::new(Pool {
            connector: connector(config, &made_for),
            made_for,
            generation: 0,
            idle: VecDeque::new(),
            lane: VecDeque::new(),
        }))
    }

    fn lock(&self) -> MutexGuard<'_, Pool> {
        // The pool's state is valid after any panic (a list of senders): go on with it.
        self.0.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends `request` (origin-form URI, `Host` set) to `config`'s upstream: on the lean
    /// lane when it can carry it (`http://`, no body, not `upgrading`), else through
    /// hyper's client.
    pub async fn send(
        self: &Arc<Self>,
        config: &GatewayConfig,
        request: http::Request<Incoming>,
        upgrading: bool,
    ) -> Result<Sent, UpstreamError> {
        let lean = !upgrading
            && http_body::Body::is_end_stream(request.body())
            && request.method() != http::Method::CONNECT
            && config.upstream.scheme_str() != Some("https");
        let deadline = tokio::time::Instant::now() + config.upstream_timeout;
        if lean {
            let (parts, _) = request.into_parts();
            return self
                .send_lane(config, crate::lane::Request::Parts(&parts), deadline)
                .await
                .map(Sent::Lane);
        }
        // Only hyper's client needs the body as a `Body` (boxed). Boxed too: its state (a
        // TLS stream being set up, hyper's handshake) is several times the lane's, and every
        // request's future would otherwise carry that size, moved whole into hyper's
        // dispatcher per request.
        let request = request.map(Body::new);
        let sent = tokio::time::timeout_at(deadline, Box::pin(self.send_hyper(config, request)));
        let (response, pooled) = sent.await.map_err(|_| UpstreamError::TimedOut)??;
        Ok(Sent::Hyper(response, pooled))
    }

    /// The lean lane: the warmest idle lane connection, or a new one; a request that a
    /// kept-alive connection's upstream closed on without answering is sent again on a new
    /// one, once, when its method is idempotent. All of it by `deadline`.
    pub async fn send_lane(
        self: &Arc<Self>,
        config: &GatewayConfig,
        request: crate::lane::Request<'_>,
        deadline: tokio::time::Instant,
    ) -> Result<http::Response<LaneBody>, UpstreamError> {
        let mut sent = self.exchange_lane(config, request, deadline).await?;
        let head = std::mem::take(&mut sent.head);
        let (parts, framing) = sent
            .conn
            .decode(head, &sent.parsed, request.is_head())
            .map_err(UpstreamError::Lane)?;
        Ok(http::Response::from_parts(parts, sent.body(framing, self)))
    }

    /// [`Upstream::send_lane`] up to the response head, not decoded: for a caller that
    /// writes it on as bytes (the gateway's lean front), or decodes it itself.
    pub async fn exchange_lane(
        self: &Arc<Self>,
        config: &GatewayConfig,
        request: crate::lane::Request<'_>,
        deadline: tokio::time::Instant,
    ) -> Result<Exchanged, UpstreamError> {
        let (idle, generation) = self.checkout_conn(config);
        let reused = idle.is_some();
        let mut conn = match idle {
            Some(conn) => conn,
            // Boxed (here and below): connecting is rare, and its state (name resolution, a
            // timer) would otherwise enlarge every request's future.
            None => Box::pin(self.connect_conn(config, deadline)).await?,
        };
        let answer = match conn.exchange(request, deadline).await {
            Err(e) if reused && e.nothing_received() && request.is_idempotent() => {
                conn = Box::pin(self.connect_conn(config, deadline)).await?;
                conn.exchange(request, deadline).await
            }
            answer => answer,
        };
        let (head, parsed) = answer.map_err(|e| match e {
            LaneError::TimedOut => UpstreamError::TimedOut,
            e => UpstreamError::Lane(e),
        })?;
        Ok(Exchanged {
            conn,
            head,
            parsed,
            generation,
        })
    }

    /// A new lane connection to `config`'s upstream (by `deadline`, the request's).
    async fn connect_conn(
        &self,
        config: &GatewayConfig,
        deadline: tokio::time::Instant,
    ) -> Result<Conn, UpstreamError> {
        let authority = config
            .upstream
            .authority()
            .ok_or_else(|| UpstreamError::Connect("the upstream has no authority".into()))?;
        let connecting = crate::lane::connect(authority, CONNECT_TIMEOUT);
        tokio::time::timeout_at(deadline, connecting)
            .await
            .map_err(|_| UpstreamError::TimedOut)?
            .map_err(|e| UpstreamError::Connect(Box::new(e)))
    }

    /// The warmest idle lane connection still open (or none), and the pool's generation.
    fn checkout_conn(&self, config: &GatewayConfig) -> (Option<Conn>, u64) {
        let mut pool = self.lock();
        pool.follow(config);
        let now = Instant::now();
        while let Some(idle) = pool.lane.pop_back() {
            if now.saturating_duration_since(idle.since) > IDLE_TIMEOUT {
                pool.lane.clear();
                break;
            }
            if idle.conn.still_open() {
                return (Some(idle.conn), pool.generation);
            }
        }
        (None, pool.generation)
    }

    /// Takes a lane connection back if it is fit for another request (its response read
    /// to its exact end, nothing after it, keep-alive) and from the current pool.
    pub fn give_back_conn(&self, conn: Conn, generation: u64) {
        if !conn.reusable() {
            return;
        }
        let mut pool = self.lock();
        if pool.generation != generation {
            return;
        }
        if pool.lane.len() >= MAX_IDLE {
            pool.lane.pop_front();
        }
        pool.lane.push_back(IdleConn {
            conn,
            since: Instant::now(),
        });
    }

    /// Sends `request` through hyper's client on an idle connection, or a new one; returns
    /// the response head and the connection, to be given back when it is ready for another
    /// request.
    async fn send_hyper(
        &self,
        config: &GatewayConfig,
        mut request: http::Request<Body>,
    ) -> Result<(http::Response<Incoming>, Pooled), UpstreamError> {
        let connector = match self.checkout(config) {
            Ok(mut pooled) => match pooled.sender.try_send_request(request).await {
                Ok(response) => return Ok((response, pooled)),
                Err(mut error) => match error.take_message() {
                    // Never written: the upstream closed this kept-alive connection first.
                    Some(unsent) => {
                        request = unsent;
                        self.lock().connector.clone()
                    }
                    None => return Err(UpstreamError::Request(error.into_error())),
                },
            },
            Err(connector) => connector,
        };
        let mut pooled = self.connect(connector, &config.upstream).await?;
        let response = pooled
            .sender
            .send_request(request)
            .await
            .map_err(UpstreamError::Request)?;
        Ok((response, pooled))
    }

    /// The warmest idle connection ready for a request, or (none) the connector to make one.
    fn checkout(&self, config: &GatewayConfig) -> Result<Pooled, HttpsConnector<HttpConnector>> {
        let mut pool = self.lock();
        pool.follow(config);
        let now = Instant::now();
        while let Some(idle) = pool.idle.pop_back() {
            if now.saturating_duration_since(idle.since) > IDLE_TIMEOUT {
                // The warmest is too old, so all are.
                pool.idle.clear();
                break;
            }
            if idle.sender.is_ready() {
                return Ok(Pooled {
                    sender: idle.sender,
                    generation: pool.generation,
                });
            }
            // Closed by the upstream (or not ready, which an idle one always is): dropped.
        }
        Err(pool.connector.clone())
    }

    /// A new connection, its HTTP/1.1 state driven by a task of this worker.
    async fn connect(
        &self,
        connector: HttpsConnector<HttpConnector>,
        upstream: &http::Uri,
    ) -> Result<Pooled, UpstreamError> {
        let generation = self.lock().generation;
        let io = connector
            .oneshot(upstream.clone())
            .await
            .map_err(UpstreamError::Connect)?;
        let (sender, connection) = hyper::client::conn::http1::handshake(io)
            .await
            .map_err(UpstreamError::Handshake)?;
        tokio::spawn(async move {
            if let Err(error) = connection.with_upgrades().await {
                tracing::debug!(%error, "upstream connection ended");
            }
        });
        Ok(Pooled { sender, generation })
    }

    /// Takes `pooled` back when it is ready for another request; otherwise drops it (hyper
    /// closes the connection once it is done with what it is doing).
    pub fn give_back(&self, pooled: Pooled) {
        if !pooled.sender.is_ready() {
            return;
        }
        let mut pool = self.lock();
        if pool.generation != pooled.generation {
            return;
        }
        if pool.idle.len() >= MAX_IDLE {
            pool.idle.pop_front();
        }
        pool.idle.push_back(Idle {
            sender: pooled.sender,
            since: Instant::now(),
        });
    }

    /// How many idle connections this worker holds.
    #[cfg(test)]
    fn idle(&self) -> usize {
        self.lock().idle.len()
    }
}

impl Pool {
    /// A reload changed the upstream: a new pool, the old connections closed.
    fn follow(&mut self, config: &GatewayConfig) {
        if self.made_for.matches(config) {
            return;
        }
        let made_for = MadeFor::of(Some(config));
        self.connector = connector(Some(config), &made_for);
        self.made_for = made_for;
        self.generation += 1;
        self.idle.clear();
        self.lane.clear();
    }
}

impl Pooled {
    /// Whether the connection is ready for another request now.
    pub fn is_ready(&self) -> bool {
        self.sender.is_ready()
    }
}

/// A response body that gives its connection back to the pool once it has been read to its
/// end, for a connection that was not ready when the response head arrived (a large or slow
/// body). A body dropped before its end drops the connection (hyper closes it: the rest of
/// the response is still coming on it).
pub struct GiveBackBody {
    body: Incoming,
    pooled: Option<(Pooled, Arc<Upstream>)>,
}

impl GiveBackBody {
    /// `body`, which gives `pooled` back to `upstream` at its end.
    pub fn new(body: Incoming, pooled: Pooled, upstream: Arc<Upstream>) -> GiveBackBody {
        GiveBackBody {
            body,
            pooled: Some((pooled, upstream)),
        }
    }

    fn give_back(&mut self) {
        if let Some((pooled, upstream)) = self.pooled.take() {
            upstream.give_back(pooled);
        }
    }
}

impl http_body::Body for GiveBackBody {
    type Data = bytes::Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Self::Data>, Self::Error>>> {
        let polled = Pin::new(&mut self.body).poll_frame(cx);
        match &polled {
            Poll::Ready(None) => self.give_back(),
            Poll::Ready(Some(Err(_))) => drop(self.pooled.take()),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

impl Drop for GiveBackBody {
    fn drop(&mut self) {
        // The server stops polling a body that says it has ended.
        if http_body::Body::is_end_stream(&self.body) {
            self.give_back();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(upstream: &str) -> GatewayConfig {
        GatewayConfig {
            listen: "127.0.0.1:0".parse().unwrap(),
            upstream: upstream.parse().unwrap(),
            upstream_timeout: Duration::from_secs(1),
            tls: None,
            upstream_ca: None,
        }
    }

    #[test]
    fn same_authority_is_authoritys_eq() {
        let parse = |s: &str| s.parse::<Authority>().unwrap();
        let all = [
            "a:1",
            "A:1",
            "a:2",
            "b",
            "B",
            "127.0.0.1:80",
            "user@h:1",
            "USER@H:1",
        ];
        for x in all.map(parse).iter().map(Some).chain([None]) {
            for y in all.map(parse).iter().map(Some).chain([None]) {
                assert_eq!(same_authority(x, y), x == y, "{x:?} {y:?}");
            }
        }
    }

    #[test]
    fn made_for_follows_the_upstream() {
        let a = config("http://127.0.0.1:3000");
        let made = MadeFor::of(Some(&a));
        assert!(made.matches(&a));
        assert!(!made.matches(&config("http://127.0.0.1:3001")));
        assert!(!made.matches(&config("https://127.0.0.1:3000")));
    }

    /// A real listener that accepts connections and holds them (an HTTP/1.1 handshake
    /// needs no answer).
    async fn holding_listener() -> std::net::SocketAddr {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move {
            let mut held = Vec::new();
            while let Ok((socket, _)) = listener.accept().await {
                held.push(socket);
            }
        });
        addr
    }

    #[tokio::test]
    async fn idle_connections_are_bounded_and_a_reload_drops_them() {
        let addr = holding_listener().await;
        let running = config(&format!("http://{addr}"));
        let upstream = Upstream::new(Some(&running));
        let mut open = Vec::new();
        for _ in 0..MAX_IDLE + 5 {
            let connector = upstream.lock().connector.clone();
            let mut pooled = upstream
                .connect(connector, &running.upstream)
                .await
                .unwrap();
            pooled.sender.ready().await.unwrap();
            open.push(pooled);
        }
        for pooled in open {
            upstream.give_back(pooled);
        }
        assert_eq!(upstream.idle(), MAX_IDLE);
        let taken = upstream.checkout(&running).ok().unwrap();
        assert_eq!(upstream.idle(), MAX_IDLE - 1);

        // Another upstream: the idle connections go, and one of the old pool is not taken back.
        let other = config(&format!("http://{}", holding_listener().await));
        assert!(upstream.checkout(&other).is_err());
        assert_eq!(upstream.idle(), 0);
        upstream.give_back(taken);
        assert_eq!(upstream.idle(), 0);
    }
}
