//! The axum [`Router`] of the decision API (on `server.listen`).
//!
//! Peers add their endpoints here (e.g. the dashboard's `GET /dashboard`), next to the
//! API's, so that one listener serves them all.

use std::future::{Ready, ready};
use std::task::{Context, Poll};

use axum::Router;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, get, on, post};
use futures_util::future::Either;

use crate::api::{self, ApiError, MAX_BODY};
use crate::forward_auth::forward_auth;
use crate::state::{AppState, Runtime};

/// The decision API, admin, forward-auth, health and metrics endpoints.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/settle", post(api::settle::settle))
        .route("/v1/release", post(api::settle::release))
        .route(
            "/v1/limits/{policy}/{key}",
            get(api::limits::get_limit).delete(api::limits::delete_limit),
        )
        .route(
            "/v1/overrides/{policy}/{key}",
            get(api::overrides::get_override)
                .put(api::overrides::put_override)
                .delete(api::overrides::delete_override),
        )
        .route("/v1/policies", get(api::policies::list_policies))
        // nginx, Caddy and Traefik send the auth call as GET (the client's method travels in
        // a header); any method OpenAPI can declare is accepted, others get 405 with `Allow`.
        .route("/v1/forward-auth", on(forward_auth_methods(), forward_auth))
        .route("/healthz", get(api::health::healthz))
        .route("/readyz", get(api::health::readyz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(api::openapi::openapi_json))
        .fallback(api::error::not_found)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        // Added after the layer, so without it: the decision endpoint bounds its body
        // itself (the layer's request extension is an allocation and a lookup a request).
        .route("/v1/check", post(api::check::check))
        // Last: it applies to the routes registered before it.
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(state)
}

/// Puts `server.api_token` in front of `/v1/*` and `/dashboard*` of `router` (the API and
/// whatever was merged into it): in fact in front of every path but `/healthz`, `/readyz`,
/// `/metrics` and `/openapi.json`, so that an endpoint added later is guarded by default.
/// The token is read from the current configuration, so a reload changes it.
pub fn guard(router: Router, state: AppState) -> Router {
    router.layer(Guard { state })
}

/// The layer of [`guard`]: a service of its own rather than `middleware::from_fn`, which
/// boxes the inner service and a future per request (measured: ~800 instructions a
/// request, on every endpoint).
#[derive(Clone)]
struct Guard {
    state: AppState,
}

impl<S> tower::Layer<S> for Guard {
    type Service = Guarded<S>;
    fn layer(&self, inner: S) -> Guarded<S> {
        Guarded {
            inner,
            state: self.state.clone(),
        }
    }
}

/// A route behind [`Guard`].
#[derive(Clone)]
struct Guarded<S> {
    inner: S,
    state: AppState,
}

impl<S> tower::Service<Request> for Guarded<S>
where
    S: tower::Service<Request, Response = Response>,
{
    type Response = Response;
    type Error = S::Error;
    type Future = Either<Ready<Result<Response, S::Error>>, S::Future>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), S::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, request: Request) -> Self::Future {
        match api_token(&self.state, &request) {
            Ok(()) => Either::Right(self.inner.call(request)),
            Err(e) => Either::Left(ready(Ok(e.into_response()))),
        }
    }
}

/// The [`guard`] rule: `Err` is the 401/403 to answer.
fn api_token(state: &AppState, request: &Request) -> Result<(), ApiError> {
    let open = matches!(
        request.uri().path(),
        "/healthz" | "/readyz" | "/metrics" | "/openapi.json"
    );
    if open {
        return Ok(());
    }
    authorize(&state.current(), request.headers())
}

/// `server.api_token` of `runtime`, checked against a guarded request's `headers`: the
/// guard's rule, also applied by the front door ([`crate::front`]) to `/v1/check`, which
/// it answers without the router.
pub fn authorize(runtime: &Runtime, headers: &HeaderMap) -> Result<(), ApiError> {
    let server = &runtime.config.server;
    api::admin::authorize_api(
        server.api_token.as_deref(),
        server.admin_token.as_deref(),
        headers,
    )
}

/// [`authorize`] on the `Authorization` value itself (the lean HTTP path has no map).
pub fn authorize_value(runtime: &Runtime, authorization: Option<&[u8]>) -> Result<(), ApiError> {
    let server = &runtime.config.server;
    api::admin::authorize_api_value(
        server.api_token.as_deref(),
        server.admin_token.as_deref(),
        authorization,
    )
}

/// The methods `/v1/forward-auth` answers: the eight an OpenAPI document can declare (its
/// spec declares them all). Extension methods (`QUERY`, `PROPFIND`…) are answered 405.
fn forward_auth_methods() -> MethodFilter {
    [
        MethodFilter::POST,
        MethodFilter::PUT,
        MethodFilter::DELETE,
        MethodFilter::OPTIONS,
        MethodFilter::HEAD,
        MethodFilter::PATCH,
        MethodFilter::TRACE,
    ]
    .into_iter()
    .fold(MethodFilter::GET, MethodFilter::or)
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this endpoint does not accept that method",
    )
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
        crate::metrics::render(state.store.as_ref()),
    )
}
