//! `/healthz` (the process answers) and `/readyz` (the store answers).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;

use super::ApiError;
use super::types::Health;
use crate::state::AppState;

/// The process is up.
#[utoipa::path(get, path = "/healthz", tag = "health",
    responses((status = 200, description = "The process is up", body = Health)))]
pub async fn healthz() -> Json<Health> {
    Json(Health {
        status: "ok",
        store: None,
    })
}

/// The store answers a ping.
#[utoipa::path(get, path = "/readyz", tag = "health", responses(
    (status = 200, description = "The store is reachable", body = Health),
    (status = 503, description = "The store is not reachable", body = super::ErrorBody)))]
pub async fn readyz(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    match state.store.ping().await {
        Ok(()) => Ok(Json(Health {
            status: "ready",
            store: Some(state.store.kind()),
        })),
        Err(e) => {
            // The reason goes to the log, not to whoever can reach /readyz: store error
            // text can name hosts, ports and key layouts.
            tracing::debug!(store = state.store.kind(), error = %e, "readiness probe failed");
            Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                format!("the {} store is not reachable", state.store.kind()),
            ))
        }
    }
}
