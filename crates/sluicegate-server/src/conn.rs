//! Serving HTTP connections so that slow, idle or many clients cannot tie a listener up:
//! `server.header_read_timeout`, `idle_timeout` and `max_connections`, on the API and
//! gateway listeners alike.
//!
//! `axum::serve` has none of these, and hyper's own `header_read_timeout` also runs while a
//! keep-alive connection waits for its next request (so it would cut idle connections at
//! the header deadline). Hence this accept loop, with one watchdog per connection:
//!
//! - no request yet: the head must be complete `header_read_timeout` after the accept;
//! - between requests: idle for at most `idle_timeout`; once the next request's first byte
//!   arrives, its head must be complete within `header_read_timeout` (HTTP/1 only: on an
//!   HTTP/2 connection the bytes between streams are PINGs, SETTINGS and window updates,
//!   not a request head, so after its first request only `idle_timeout` applies);
//! - a request in progress (reading its body, writing the response): closed after
//!   `idle_timeout` with no traffic either way (a stalled upload or a client that stops
//!   reading). Waits on our side (delay mode, the upstream) are bounded by their own
//!   settings, which should stay below `idle_timeout`.
//!
//! `max_connections` is a semaphore taken *before* `accept`: beyond it, new connections
//! wait in the kernel's backlog instead of costing a task and a file descriptor each. The
//! slot belongs to the socket: a connection upgraded to a tunnel (WebSocket) keeps it.
//!
//! A listener with a lean path ([`serve_with`]: the API's, and the gateway's without TLS)
//! runs each connection through
//! [`h1::drive`] first: plain requests its handler takes are answered from the socket's
//! bytes, reported to the watchdog as requests in progress like hyper's, and the connection
//! goes to hyper (below) at the first other request. A graceful shutdown closes a lean
//! connection between requests; the drain waits for it as for hyper's.
//!
//! On a TLS listener the handshake happens inside the same watch: it counts toward the
//! first request's `header_read_timeout`, so a client that opens TCP and never finishes
//! the handshake is closed like one that never finishes its head.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Body;
use axum::extract::ConnectInfo;
use axum::response::Response;
use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use tower::ServiceExt;

use crate::config::ConnectionLimits;
use crate::h1;

/// The connection budget of one listener (shared by the gateway's worker threads).
pub fn permits(limits: &ConnectionLimits) -> Arc<Semaphore> {
    Arc::new(Semaphore::new(
        limits.max_connections.min(Semaphore::MAX_PERMITS),
    ))
}

/// What answers the requests of a connection: the API's axum [`Router`], or the gateway,
/// which answers from hyper's request directly (no router, no extractors: it has one
/// handler, and each step saved there is a step saved on every proxied request).
pub trait App: Clone + Send + 'static {
    /// The response to `request`, which came from `peer`.
    fn call(
        &self,
        request: hyper::Request<Incoming>,
        peer: SocketAddr,
    ) -> impl Future<Output = Response<Body>> + Send + 'static + use<Self>;
}

impl App for Router {
    fn call(
        &self,
        mut request: hyper::Request<Incoming>,
        peer: SocketAddr,
    ) -> impl Future<Output = Response<Body>> + Send + 'static + use<> {
        request.extensions_mut().insert(ConnectInfo(peer));
        let response = self.clone().oneshot(request.map(Body::new));
        async move {
            match response.await {
                Ok(response) => response,
                Err(infallible) => match infallible {},
            }
        }
    }
}

/// Accepts connections on `listener` and serves `app` on each (HTTP/1.1 and HTTP/2,
/// upgrades allowed; over TLS when `tls` is given) within `limits`, until `stop` turns
/// true; then stops accepting and waits for the connections in progress to finish (the
/// caller bounds that wait).
pub async fn serve(
    listener: TcpListener,
    app: impl App,
    limits: ConnectionLimits,
    permits: Arc<Semaphore>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    stop: watch::Receiver<bool>,
) -> Result<(), crate::error::ServerError> {
    let front = Handlers {
        app,
        lean: None::<h1::Never>,
    };
    serve_with(listener, front, limits, permits, tls, stop).await
}

/// What answers a listener's connections: `lean` on the lean HTTP/1.1 path ([`h1`]) when
/// set, `app` behind hyper for everything else.
#[derive(Clone)]
pub struct Handlers<A, L> {
    /// The app behind hyper.
    pub app: A,
    /// The lean path's handler, if the listener has one.
    pub lean: Option<L>,
}

impl<A: App + h1::Handler> Handlers<A, A> {
    /// `app` on both paths (the API's `Front`).
    pub fn both(app: A) -> Handlers<A, A> {
        Handlers {
            app: app.clone(),
            lean: Some(app),
        }
    }
}

/// [`serve`], with the requests `front.lean` takes answered on the lean path.
pub async fn serve_with<A: App, L: h1::Handler>(
    listener: TcpListener,
    front: Handlers<A, L>,
    limits: ConnectionLimits,
    permits: Arc<Semaphore>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    stop: watch::Receiver<bool>,
) -> Result<(), crate::error::ServerError> {
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    let stopped = crate::serve::stopped(stop.clone());
    tokio::pin!(stopped);
    loop {
        let (stream, peer, permit) = tokio::select! {
            accepted = accept(&listener, &permits) => match accepted {
                Some(accepted) => accepted,
                None => break,
            },
            () = &mut stopped => break,
        };
        let activity = Arc::new(Activity::new());
        let io = Metered {
            inner: stream,
            activity: Arc::clone(&activity),
            _slot: Some(permit),
        };
        let watch = Watch {
            watcher: graceful.watcher(),
            stop: stop.clone(),
        };
        let served = served(io, peer, front.clone(), tls.clone(), watch);
        tokio::spawn(async move {
            // Whichever ends first; dropping the connection closes the socket (and frees
            // its slot, unless an upgrade took the socket over).
            tokio::select! {
                () = served => {}
                () = watchdog(activity, limits) => {}
            }
        });
    }
    drop(listener);
    graceful.shutdown().await;
    Ok(())
}

/// The next connection within the budget `permits`: the permit is taken *before*
/// `accept`, so beyond the bound new connections wait in the kernel's backlog instead of
/// costing a task and a file descriptor each. An accept error (out of file descriptors, or
/// another transient failure) is logged and retried after a pause instead of spinning on a
/// listener that stays readable. `None` once the budget is closed. The API, gateway and
/// Envoy listeners all accept through here.
pub async fn accept(
    listener: &TcpListener,
    permits: &Arc<Semaphore>,
) -> Option<(TcpStream, SocketAddr, OwnedSemaphorePermit)> {
    let permit = Arc::clone(permits).acquire_owned().await.ok()?;
    loop {
        match listener.accept().await {
            Ok((stream, peer)) => {
                let _ = stream.set_nodelay(true);
                return Some((stream, peer, permit));
            }
            Err(error) => {
                tracing::warn!(%error, "accept failed; retrying");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// How a connection learns of a graceful shutdown: hyper's connections through `watcher`,
/// the lean path through `stop` (holding `watcher` meanwhile, so the shutdown waits for it).
struct Watch {
    watcher: hyper_util::server::graceful::Watcher,
    stop: watch::Receiver<bool>,
}

/// One accepted socket served to the end: the TLS handshake first when `tls` is set (a
/// failed one is logged at debug and closes it), then HTTP, watched for graceful shutdown.
async fn served<T, A: App, L: h1::Handler>(
    io: Metered<T>,
    peer: SocketAddr,
    front: Handlers<A, L>,
    tls: Option<tokio_rustls::TlsAcceptor>,
    watch: Watch,
) where
    T: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let activity = Arc::clone(&io.activity);
    match tls {
        None => http(io, peer, front, &activity, false, watch).await,
        Some(acceptor) => match acceptor.accept(io).await {
            Ok(stream) => http(stream, peer, front, &activity, true, watch).await,
            Err(error) => tracing::debug!(%peer, %error, "TLS handshake failed"),
        },
    }
}

/// HTTP on `io`: the lean path first when the listener has one, hyper from the first
/// request it does not take; hyper alone otherwise.
async fn http<I, A: App, L: h1::Handler>(
    io: I,
    peer: SocketAddr,
    front: Handlers<A, L>,
    activity: &Arc<Activity>,
    secure: bool,
    watch: Watch,
) where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let Watch { watcher, stop } = watch;
    let Some(lean) = front.lean else {
        let _ = watcher
            .watch(connection(io, peer, front.app, activity, secure))
            .await;
        return;
    };
    let app = front.app;
    h1::drive(
        io,
        lean,
        peer,
        crate::serve::stopped(stop),
        || activity.request_started(),
        |rewound| async move {
            let _ = watcher
                .watch(connection(rewound, peer, app, activity, secure))
                .await;
        },
    )
    .await;
}

/// Copies bytes both ways between `client` and `upstream` until either side closes, or
/// until no byte has moved for `limits.idle_timeout` (the rule of a request in progress:
/// an idle tunnel is closed, as nginx's `proxy_read_timeout` closes an idle WebSocket).
pub async fn tunnel<A, B>(client: A, mut upstream: B, limits: ConnectionLimits)
where
    A: AsyncRead + AsyncWrite + Unpin,
    B: AsyncRead + AsyncWrite + Unpin,
{
    let activity = Arc::new(Activity::new());
    let _in_progress = activity.request_started();
    let mut client = Metered {
        inner: client,
        activity: Arc::clone(&activity),
        _slot: None,
    };
    tokio::select! {
        copied = tokio::io::copy_bidirectional(&mut client, &mut upstream) => {
            if let Err(error) = copied {
                tracing::debug!(%error, "tunnel closed");
            }
        }
        () = watchdog(Arc::clone(&activity), limits) => {
            tracing::debug!("closing a tunnel idle for idle_timeout");
        }
    }
}

/// Marks a request that arrived over TLS (the gateway's `X-Forwarded-Proto: https`).
#[derive(Debug, Clone, Copy)]
pub struct Secure;

/// One connection: HTTP/1.1 or HTTP/2 (upgrades allowed), its socket metered and each
/// request tracked in `activity` for the watchdog; `secure` marks its requests [`Secure`].
fn connection<I>(
    io: I,
    peer: SocketAddr,
    app: impl App,
    activity: &Arc<Activity>,
    secure: bool,
) -> impl hyper_util::server::graceful::GracefulConnection + Send + 'static
where
    I: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    let io = TokioIo::new(io);
    let service = hyper::service::service_fn({
        let activity = Arc::clone(activity);
        move |mut request: hyper::Request<Incoming>| {
            if secure {
                request.extensions_mut().insert(Secure);
            }
            let guard = activity.request_started();
            if request.version() == http::Version::HTTP_2 {
                activity.multiplexed.store(true, Ordering::Relaxed);
            }
            let response = app.call(request, peer);
            async move {
                let response = response.await;
                // The request counts as in progress until its response body is done.
                // Handed to hyper as it is: wrapping it in a `Body` again would box it (an
                // allocation and one more dynamic call per frame, on every response).
                Ok::<_, std::convert::Infallible>(response.map(|body| Tracked {
                    body,
                    _guard: guard,
                }))
            }
        }
    });
    auto::Builder::new(TokioExecutor::new())
        .serve_connection_with_upgrades(io, service)
        .into_owned()
}

/// What the watchdog knows of one connection. Times are milliseconds since it opened.
struct Activity {
    opened: Instant,
    last_io: AtomicU64,
    /// First byte read while no request was in progress, plus one (0: none).
    first_byte: AtomicU64,
    idle_since: AtomicU64,
    in_flight: AtomicUsize,
    served: AtomicBool,
    /// An HTTP/2 connection: bytes read between streams start no request head.
    multiplexed: AtomicBool,
}

impl Activity {
    fn new() -> Activity {
        Activity {
            opened: Instant::now(),
            last_io: AtomicU64::new(0),
            first_byte: AtomicU64::new(0),
            idle_since: AtomicU64::new(0),
            in_flight: AtomicUsize::new(0),
            served: AtomicBool::new(false),
            multiplexed: AtomicBool::new(false),
        }
    }

    fn now(&self) -> u64 {
        u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    fn read(&self) {
        let now = self.now();
        self.last_io.store(now, Ordering::Relaxed);
        if self.in_flight.load(Ordering::Relaxed) == 0 && !self.multiplexed.load(Ordering::Relaxed)
        {
            let _ =
                self.first_byte
                    .compare_exchange(0, now + 1, Ordering::Relaxed, Ordering::Relaxed);
        }
    }

    fn wrote(&self) {
        self.last_io.store(self.now(), Ordering::Relaxed);
    }

    fn request_started(self: &Arc<Self>) -> InFlight {
        self.in_flight.fetch_add(1, Ordering::AcqRel);
        self.served.store(true, Ordering::Relaxed);
        self.first_byte.store(0, Ordering::Relaxed);
        InFlight(Arc::clone(self))
    }

    /// When the connection must have shown progress by, in ms since it opened.
    fn deadline(&self, limits: &ConnectionLimits) -> u64 {
        let ms = |d: Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        let (head, idle) = (ms(limits.header_read_timeout), ms(limits.idle_timeout));
        if self.in_flight.load(Ordering::Acquire) > 0 {
            return self.last_io.load(Ordering::Relaxed).saturating_add(idle);
        }
        if !self.served.load(Ordering::Relaxed) {
            return head;
        }
        match self.first_byte.load(Ordering::Relaxed) {
            0 => self.idle_since.load(Ordering::Relaxed).saturating_add(idle),
            first => (first - 1).saturating_add(head),
        }
    }
}

/// A request in progress; dropped with its response body.
struct InFlight(Arc<Activity>);

impl Drop for InFlight {
    fn drop(&mut self) {
        let now = self.0.now();
        self.0.idle_since.store(now, Ordering::Relaxed);
        self.0.last_io.store(now, Ordering::Relaxed);
        self.0.first_byte.store(0, Ordering::Relaxed);
        self.0.in_flight.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Resolves when the connection has missed its deadline. Checks at least every second, so
/// a deadline that moved earlier (the first byte of a slow head) is seen in time.
async fn watchdog(activity: Arc<Activity>, limits: ConnectionLimits) {
    loop {
        let now = activity.now();
        let deadline = activity.deadline(&limits);
        if now >= deadline {
            tracing::debug!("closing a connection that missed its header or idle deadline");
            return;
        }
        tokio::time::sleep(Duration::from_millis((deadline - now).min(1_000))).await;
    }
}

/// The socket, noting when bytes move, and holding its listener slot until it is closed.
struct Metered<T> {
    inner: T,
    activity: Arc<Activity>,
    _slot: Option<OwnedSemaphorePermit>,
}

impl<T: AsyncRead + Unpin> AsyncRead for Metered<T> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if buf.filled().len() > before {
            self.activity.read();
        }
        result
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Metered<T> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, data);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        result
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.wrote();
        }
        result
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// A response body that keeps its request "in progress" until it is done or dropped.
struct Tracked {
    body: Body,
    _guard: InFlight,
}

impl HttpBody for Tracked {
    type Data = Bytes;
    type Error = axum::Error;
    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.body).poll_frame(cx)
    }
    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }
    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
