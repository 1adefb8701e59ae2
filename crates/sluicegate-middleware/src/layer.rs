//! [`RateLimitLayer`] and [`RateLimitService`]: the [`RateLimiter`] as tower middleware.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::{Extensions, Request, Response};
use http_body_util::{Either, Full};
use tower::{Layer, Service};

use crate::handle::LimiterHandle;
use crate::lease::LeaseBody;
use crate::limiter::{CheckNow, RateLimitDecision, RateLimiter};
use crate::pool::PermitBody;

/// Puts a [`RateLimiter`] in front of a service.
///
/// Requests matching no route pass untouched. Admitted requests are forwarded (after their
/// wait in delay mode) and their responses get the rate-limit headers; rejected ones get
/// the 429 of [`RateLimitDecision::rejection`](crate::RateLimitDecision::rejection) and never
/// reach the inner service. The response body is `Either<`[`HeldBody`]`<inner body>, Full<Bytes>>`;
/// a route's pool slot and concurrency leases are freed when that body ends or is dropped.
///
/// # The client address
/// The TCP peer is read from the request extensions: axum's
/// `ConnectInfo<SocketAddr>` (serve with `into_make_service_with_connect_info::<SocketAddr>()`),
/// else a plain [`SocketAddr`], else a [`PeerAddr`] (insert either yourself when serving
/// with hyper or hyper-util). Without any of them every request counts as coming from
/// `0.0.0.0`: IP-keyed routes then share one limit among all clients (never a spoofable
/// one), and a warning is logged once.
///
/// # Cost
/// With a store that answers at once (`MemoryStore`), an admitted request is decided in
/// `call` and runs as the inner service's own future: no boxing, no clone of the inner
/// service. Around a whole axum `Router` (`ServiceBuilder::new().map_response(
/// IntoResponse::into_response).layer(layer).service(router.with_state(()))`) it costs about
/// 800 instructions a request less than through `Router::layer`, which re-boxes each layered
/// route (docs/benchmarks/middleware.md).
///
/// ```no_run
/// use std::{net::SocketAddr, sync::Arc, time::Duration};
/// use axum::{Router, routing::get};
/// use sluicegate_core::{AlgorithmKind, MemoryStore, Policy};
/// use sluicegate_middleware::{RateLimitLayer, RateLimiter, RouteSpec};
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error>> {
/// let limiter = RateLimiter::builder(Arc::new(MemoryStore::new(100_000)))
///     .policy(Policy::builder("api", AlgorithmKind::Gcra, 100, Duration::from_secs(60)).build()?)
///     .route(RouteSpec::new("/api", &["api"]))
///     .build()?;
/// let app = Router::new()
///     .route("/api/hello", get(|| async { "hello" }))
///     .layer(RateLimitLayer::new(limiter));
/// let listener = tokio::net::TcpListener::bind("127.0.0.1:3000").await?;
/// axum::serve(listener, app.into_make_service_with_connect_info::<SocketAddr>()).await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RateLimitLayer {
    handle: LimiterHandle,
}

impl RateLimitLayer {
    /// A layer using `limiter` for good.
    pub fn new(limiter: RateLimiter) -> Self {
        RateLimitLayer {
            handle: LimiterHandle::new(limiter),
        }
    }

    /// A layer using whatever limiter `handle` holds at each request (hot reload).
    pub fn from_handle(handle: LimiterHandle) -> Self {
        RateLimitLayer { handle }
    }

    /// The handle, to swap the limiter.
    pub fn handle(&self) -> &LimiterHandle {
        &self.handle
    }
}

impl<S> Layer<S> for RateLimitLayer {
    type Service = RateLimitService<S>;
    fn layer(&self, inner: S) -> Self::Service {
        RateLimitService {
            inner,
            handle: self.handle.clone(),
        }
    }
}

/// The peer address, for servers that are not axum: insert it into the request
/// extensions before [`RateLimitService`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerAddr(pub IpAddr);

/// The service made by [`RateLimitLayer`].
#[derive(Clone, Debug)]
pub struct RateLimitService<S> {
    inner: S,
    handle: LimiterHandle,
}

/// An admitted response's body: it holds the request's concurrency leases and its pool
/// slot until it has been sent to the end (or dropped), then frees both.
pub type HeldBody<B> = LeaseBody<PermitBody<B>>;

/// The response of [`RateLimitService`].
pub type LimitedResponse<B> = Response<Either<HeldBody<B>, Full<Bytes>>>;

type Boxed<B, E> = Pin<Box<dyn Future<Output = Result<LimitedResponse<B>, E>> + Send + 'static>>;

pin_project_lite::pin_project! {
    /// The future of [`RateLimitService`]. A request the limiter decides at once (the
    /// in-memory store) and that waits for nothing is the inner service's own future plus
    /// the decision, whose headers it writes on the response: no allocation, no clone of the
    /// inner service. A request that waits (delay mode, a pool, a store that answers later)
    /// runs in a boxed future.
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        kind: Kind<F, B, E>,
    }
}

pin_project_lite::pin_project! {
    #[project = KindProj]
    enum Kind<F, B, E> {
        // Forwarded at once: `decision` is `None` for a request no limit applies to;
        // `guard` holds its leases while the inner service works.
        Inner {
            #[pin]
            future: F,
            decision: Option<RateLimitDecision>,
            guard: Option<crate::LeaseGuard>,
        },
        // Answered by the limiter (429, 403).
        Answered { response: Option<Response<Full<Bytes>>> },
        Waiting { future: Boxed<B, E> },
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<LimitedResponse<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().kind.project() {
            KindProj::Inner {
                future,
                decision,
                guard,
            } => {
                let response = std::task::ready!(future.poll(cx))?;
                // The decision is read in place, not moved out (each move of it is a
                // `memcpy` call; docs/benchmarks/middleware.md, sixth pass), and dropped here.
                let response = match decision.as_ref() {
                    Some(decision) => finish(response, decision, guard.take(), None),
                    None => response.map(|body| Either::Left(held(body, None, None))),
                };
                *decision = None;
                Poll::Ready(Ok(response))
            }
            KindProj::Answered { response } => match response.take() {
                Some(response) => Poll::Ready(Ok(response.map(Either::Right))),
                None => panic!("ResponseFuture polled after it completed"),
            },
            KindProj::Waiting { future } => future.as_mut().poll(cx),
        }
    }
}

impl<F, B, E> std::fmt::Debug for ResponseFuture<F, B, E> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResponseFuture").finish_non_exhaustive()
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimitService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: 'static,
{
    type Response = LimitedResponse<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let limiter = self.handle.current();
        let peer = peer_addr(request.extensions());
        let checked = limiter.check_now(
            request.method(),
            request.uri().path_and_query().map_or("/", |p| p.as_str()),
            request.headers(),
            peer,
        );
        // Each arm builds the future where it is returned: a `kind` bound first and then
        // wrapped was one more copy of the whole future a request.
        match checked {
            // `inner` is the service `poll_ready` polled: called here, it needs no clone.
            CheckNow::Unlimited => ResponseFuture {
                kind: Kind::Inner {
                    future: self.inner.call(request),
                    decision: None,
                    guard: None,
                },
            },
            CheckNow::Decided(decision) if !decision.is_allowed() => ResponseFuture {
                kind: Kind::Answered {
                    response: Some(decision.rejection()),
                },
            },
            CheckNow::Decided(decision) if decision.answers_at_once() => {
                // Held from here: if the inner service fails or the future is dropped, the
                // guard frees the leases; else the body does when it ends.
                let guard = decision.lease_guard();
                ResponseFuture {
                    kind: Kind::Inner {
                        future: self.inner.call(request),
                        decision: Some(decision),
                        guard,
                    },
                }
            }
            CheckNow::Decided(decision) => ResponseFuture {
                kind: Kind::Waiting {
                    future: Box::pin(admit(self.take_inner(), request, decision)),
                },
            },
            CheckNow::Later => {
                let limiter = arc_swap::Guard::into_inner(limiter);
                ResponseFuture {
                    kind: Kind::Waiting {
                        future: Box::pin(check_later(self.take_inner(), request, limiter, peer)),
                    },
                }
            }
        }
    }
}

impl<S: Clone> RateLimitService<S> {
    /// The inner service that was polled ready, for a future that calls it later; a clone
    /// takes its place (tower's usual swap).
    fn take_inner(&mut self) -> S {
        let clone = self.inner.clone();
        std::mem::replace(&mut self.inner, clone)
    }
}

/// A request whose store answers only through a future: decided, then admitted or not.
async fn check_later<S, ReqBody, ResBody>(
    inner: S,
    request: Request<ReqBody>,
    limiter: Arc<RateLimiter>,
    peer: IpAddr,
) -> Result<LimitedResponse<ResBody>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    let decision = limiter
        .check(
            request.method(),
            request.uri().path_and_query().map_or("/", |p| p.as_str()),
            request.headers(),
            peer,
        )
        .await;
    match decision {
        None => {
            let response = called(inner, request).await?;
            Ok(response.map(|body| Either::Left(held(body, None, None))))
        }
        Some(decision) if !decision.is_allowed() => Ok(decision.rejection().map(Either::Right)),
        Some(decision) => admit(inner, request, decision).await,
    }
}

/// An admitted request: its wait (delay mode), its pool slot, the inner service, the
/// headers.
async fn admit<S, ReqBody, ResBody>(
    inner: S,
    request: Request<ReqBody>,
    decision: RateLimitDecision,
) -> Result<LimitedResponse<ResBody>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    // Held from here: if the wait is cancelled, the inner service fails or this future is
    // dropped, the guard frees the leases; else the body does when it ends.
    let guard = decision.lease_guard();
    decision.wait().await;
    // The pool's slot, like the leases, is held until the response body ends: a streamed
    // body still occupies the upstream. An error from the inner service drops it here.
    let permit = match decision.enter_pool().await {
        Ok(permit) => permit,
        Err(rejected) => return Ok(rejected.response().map(Either::Right)),
    };
    let response = called(inner, request).await?;
    Ok(finish(response, &decision, guard, permit))
}

/// Calls `inner`, which was polled ready before it was taken.
async fn called<S, ReqBody, ResBody>(
    mut inner: S,
    request: Request<ReqBody>,
) -> Result<Response<ResBody>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    inner.call(request).await
}

/// An admitted request's response: the rate-limit headers, the route's `settle` and
/// `count` (from the response head and body), the leases and pool slot held by the body.
fn finish<B>(
    mut response: Response<B>,
    decision: &RateLimitDecision,
    guard: Option<crate::LeaseGuard>,
    permit: Option<crate::PoolPermit>,
) -> LimitedResponse<B> {
    decision.write_headers(response.headers_mut());
    let tap = decision.after_response().and_then(|(settler, after)| {
        let status = response.status();
        settler.on_head(&after, status, response.headers_mut())
    });
    response.map(|body| Either::Left(held(body, guard, permit).with_tap(tap)))
}

fn held<B>(
    body: B,
    guard: Option<crate::LeaseGuard>,
    permit: Option<crate::PoolPermit>,
) -> HeldBody<B> {
    LeaseBody::new(PermitBody::new(body, permit), guard)
}

fn peer_addr(extensions: &Extensions) -> IpAddr {
    #[cfg(feature = "axum")]
    if let Some(info) = extensions.get::<axum::extract::ConnectInfo<SocketAddr>>() {
        return info.0.ip();
    }
    if let Some(addr) = extensions.get::<SocketAddr>() {
        return addr.ip();
    }
    if let Some(PeerAddr(ip)) = extensions.get::<PeerAddr>() {
        return *ip;
    }
    static WARNED: AtomicBool = AtomicBool::new(false);
    if !WARNED.swap(true, Ordering::Relaxed) {
        tracing::warn!(
            "sluicegate: no peer address in the request extensions (serve axum with \
             into_make_service_with_connect_info::<SocketAddr>()); all clients share the IP 0.0.0.0"
        );
    }
    IpAddr::V4(Ipv4Addr::UNSPECIFIED)
}
