//! [`RateLimitLayer`] and [`RateLimitService`]: the [`RateLimiter`] as tower middleware.

use std::future::Future;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll, Waker};

use bytes::Bytes;
use http::{Extensions, Request, Response};
use http_body_util::{Either, Full};
use tower::{Layer, Service};

use crate::handle::LimiterHandle;
use crate::lease::{LeaseBody, LeaseGuard};
use crate::limiter::{RateLimitDecision, RateLimiter};
use crate::pool::{PermitBody, PoolPermit};

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

/// What [`RateLimitService`] answers: the inner service's response (with the rate-limit
/// headers when a route matched), or the layer's own 429 or 403.
pub type LayerResponse<B> = Response<Either<HeldBody<B>, Full<Bytes>>>;

type BoxedResponse<B, E> = Pin<Box<dyn Future<Output = Result<LayerResponse<B>, E>> + Send>>;

pin_project_lite::pin_project! {
    /// The future of [`RateLimitService`].
    ///
    /// When the decision is known as the request arrives (the in-memory store answers at
    /// once) and the request waits for neither a turn (delay mode) nor a pool slot, this is
    /// the inner service's own future plus the decision to write onto its response: no
    /// allocation around it and no clone of the inner service. Otherwise a boxed future
    /// waits for the store, the turn and the slot.
    pub struct ResponseFuture<F, B, E> {
        #[pin]
        state: State<F, B, E>,
    }
}

pin_project_lite::pin_project! {
    #[project = StateProjection]
    enum State<F, B, E> {
        // The inner service is working; then the decision's headers (if any) go on.
        Forward { #[pin] inner: F, admitted: Option<Admitted> },
        // Refused: the layer's own answer, never forwarded.
        Answered { response: Option<Response<Full<Bytes>>> },
        // The store answers later, or the request waits for its turn or a pool slot.
        Boxed { future: BoxedResponse<B, E> },
    }
}

/// An admitted request on its way to the inner service, with the leases it holds. The
/// guard frees them if the request never gets a response (its future dropped, the inner
/// service failing); else the response body does when it ends.
struct Admitted {
    decision: RateLimitDecision,
    guard: Option<LeaseGuard>,
}

/// What to do with a request once the limiter has decided.
enum Plan {
    /// No route (or an allow-listed client): forward untouched.
    Pass,
    /// Refused (429, or 403 for a denied client): answer without forwarding.
    Refuse(Response<Full<Bytes>>),
    /// Admitted and nothing to wait for: forward now.
    Go(Admitted),
    /// Admitted after its turn (delay mode) and a pool slot.
    Wait(Admitted),
}

impl Plan {
    fn of(decision: Option<RateLimitDecision>) -> Plan {
        let Some(decision) = decision else {
            return Plan::Pass;
        };
        if !decision.is_allowed() {
            return Plan::Refuse(decision.rejection());
        }
        let admitted = Admitted {
            guard: decision.lease_guard(),
            decision,
        };
        if admitted.decision.goes_ahead_at_once() {
            Plan::Go(admitted)
        } else {
            Plan::Wait(admitted)
        }
    }
}

impl<F, B, E> Future for ResponseFuture<F, B, E>
where
    F: Future<Output = Result<Response<B>, E>>,
{
    type Output = Result<LayerResponse<B>, E>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        match self.project().state.project() {
            StateProjection::Forward { inner, admitted } => {
                let response = std::task::ready!(inner.poll(cx))?;
                Poll::Ready(Ok(respond(admitted.take(), None, response)))
            }
            StateProjection::Answered { response } => {
                let response = response
                    .take()
                    .expect("ResponseFuture polled after completion");
                Poll::Ready(Ok(response.map(Either::Right)))
            }
            StateProjection::Boxed { future } => future.as_mut().poll(cx),
        }
    }
}

impl<S, ReqBody, ResBody> Service<Request<ReqBody>> for RateLimitService<S>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>> + Clone + Send + 'static,
    S::Future: Send + 'static,
    ReqBody: Send + 'static,
    ResBody: 'static,
{
    type Response = LayerResponse<ResBody>;
    type Error = S::Error;
    type Future = ResponseFuture<S::Future, ResBody, S::Error>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request<ReqBody>) -> Self::Future {
        let mut deciding = Box::pin(decide(self.handle.load(), request));
        // Polled once here, with a waker that does nothing: the in-memory store has answered
        // by then. A store that has not registers the runtime's waker when the boxed future
        // polls it again (a future must wake the waker of its latest poll).
        let polled = deciding
            .as_mut()
            .poll(&mut Context::from_waker(Waker::noop()));
        let state = match polled {
            Poll::Ready((decision, request)) => match Plan::of(decision) {
                Plan::Pass => State::Forward {
                    inner: self.inner.call(request),
                    admitted: None,
                },
                Plan::Go(admitted) => State::Forward {
                    inner: self.inner.call(request),
                    admitted: Some(admitted),
                },
                Plan::Refuse(response) => State::Answered {
                    response: Some(response),
                },
                plan @ Plan::Wait(_) => State::Boxed {
                    future: Box::pin(serve(self.take_ready(), plan, request)),
                },
            },
            Poll::Pending => {
                let inner = self.take_ready();
                State::Boxed {
                    future: Box::pin(async move {
                        let (decision, request) = deciding.await;
                        serve(inner, Plan::of(decision), request).await
                    }),
                }
            }
        };
        ResponseFuture { state }
    }
}

impl<S: Clone> RateLimitService<S> {
    /// The inner service that was polled ready, for a future to call later; a clone takes
    /// its place (tower's usual swap).
    fn take_ready(&mut self) -> S {
        let clone = self.inner.clone();
        std::mem::replace(&mut self.inner, clone)
    }
}

/// The request with the limiter's decision (`None`: not limited).
async fn decide<B>(
    limiter: Arc<RateLimiter>,
    request: Request<B>,
) -> (Option<RateLimitDecision>, Request<B>) {
    let peer = peer_addr(request.extensions());
    let decision = limiter
        .check(
            request.method(),
            request.uri().path_and_query().map_or("/", |p| p.as_str()),
            request.headers(),
            peer,
        )
        .await;
    (decision, request)
}

/// Carries out `plan` when something is waited for: the store's answer, the request's turn
/// (delay mode) or its pool slot.
async fn serve<S, ReqBody, ResBody>(
    mut inner: S,
    plan: Plan,
    request: Request<ReqBody>,
) -> Result<LayerResponse<ResBody>, S::Error>
where
    S: Service<Request<ReqBody>, Response = Response<ResBody>>,
{
    let admitted = match plan {
        Plan::Pass => None,
        Plan::Refuse(response) => return Ok(response.map(Either::Right)),
        Plan::Go(admitted) => Some(admitted),
        Plan::Wait(admitted) => {
            admitted.decision.wait().await;
            Some(admitted)
        }
    };
    // The pool's slot, like the leases, is held until the response body ends: a streamed
    // body still occupies the upstream. An error from the inner service drops it here.
    let permit = match &admitted {
        Some(admitted) => match admitted.decision.enter_pool().await {
            Ok(permit) => permit,
            Err(rejected) => return Ok(rejected.response().map(Either::Right)),
        },
        None => None,
    };
    let response = inner.call(request).await?;
    Ok(respond(admitted, permit, response))
}

/// The inner service's response to an admitted request: the rate-limit headers, the
/// route's `settle` and `count` (from the response head, and the body through a tap), and
/// a body that holds the leases and the pool slot until it ends. Untouched (but for the
/// body's wrapper) when the request was not limited.
fn respond<B>(
    admitted: Option<Admitted>,
    permit: Option<PoolPermit>,
    mut response: Response<B>,
) -> LayerResponse<B> {
    let Some(Admitted { decision, guard }) = admitted else {
        return response.map(|body| Either::Left(held(body, None, permit)));
    };
    decision.write_headers(response.headers_mut());
    let tap = decision.after_response().and_then(|(settler, after)| {
        let status = response.status();
        settler.on_head(&after, status, response.headers_mut())
    });
    response.map(|body| Either::Left(held(body, guard, permit).with_tap(tap)))
}

fn held<B>(body: B, guard: Option<LeaseGuard>, permit: Option<PoolPermit>) -> HeldBody<B> {
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
