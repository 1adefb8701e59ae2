//! The axum [`Router`] of the decision API (on `server.listen`).
//!
//! Peers add their endpoints here (e.g. the dashboard's `GET /dashboard`), next to the
//! API's, so that one listener serves them all.

use axum::Router;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::{any, get, post};

use crate::api::{self, ApiError, MAX_BODY};
use crate::forward_auth::forward_auth;
use crate::state::AppState;

/// The decision API, admin, forward-auth, health and metrics endpoints.
pub fn router(state: AppState) -> Router {
    Router::new()
        .route("/v1/check", post(api::check::check))
        .route(
            "/v1/limits/{policy}/{key}",
            get(api::limits::get_limit).delete(api::limits::delete_limit),
        )
        .route("/v1/policies", get(api::policies::list_policies))
        // Proxies send the auth subrequest with various methods (nginx keeps the original one).
        .route("/v1/forward-auth", any(forward_auth))
        .route("/healthz", get(api::health::healthz))
        .route("/readyz", get(api::health::readyz))
        .route("/metrics", get(metrics))
        .route("/openapi.json", get(api::openapi::openapi_json))
        .fallback(api::error::not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(MAX_BODY))
        .with_state(state)
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
