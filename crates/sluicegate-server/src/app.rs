//! The axum [`Router`] of the decision API (on `server.listen`).
//!
//! Peers add their endpoints here (e.g. the dashboard's `GET /dashboard`), next to the
//! API's, so that one listener serves them all.

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{MethodFilter, get, on, post};

use crate::api::{self, ApiError, MAX_BODY};
use crate::forward_auth::forward_auth;
use crate::state::AppState;

/// The decision API, admin, forward-auth, health and metrics endpoints.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/check", post(api::check::check))
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
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
}

/// Puts `server.api_token` in front of `/v1/*` and `/dashboard*` of `router` (the API and
/// whatever was merged into it): in fact in front of every path but `/healthz`, `/readyz`,
/// `/metrics` and `/openapi.json`, so that an endpoint added later is guarded by default.
/// The token is read from the current configuration, so a reload changes it.
pub fn guard(router: Router, state: AppState) -> Router {
    router.layer(axum::middleware::from_fn_with_state(state, api_token))
}

async fn api_token(
    State(state): State<AppState>,
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    let open = matches!(
        request.uri().path(),
        "/healthz" | "/readyz" | "/metrics" | "/openapi.json"
    );
    if !open {
        let runtime = state.current();
        let server = &runtime.config.server;
        if let Err(e) = api::admin::authorize_api(
            server.api_token.as_deref(),
            server.admin_token.as_deref(),
            request.headers(),
        ) {
            return e.into_response();
        }
    }
    next.run(request).await
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
