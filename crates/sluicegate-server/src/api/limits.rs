//! `GET` and `DELETE /v1/limits/{policy}/{key}`: peek and reset.

use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::ApiError;
use super::admin::authorize;
use super::check::{decide, respond};
use super::types::PolicyNames;
use crate::state::AppState;

/// A key's state under one policy; nothing is consumed.
#[utoipa::path(get, path = "/v1/limits/{policy}/{key}", tag = "decisions",
    params(("policy" = String, Path, description = "Policy name"), ("key" = String, Path, description = "Client key (percent-encoded)")),
    responses(
        (status = 200, description = "The key's state", body = super::types::CheckResponse),
        (status = 400, description = "Empty or over-long key", body = super::ErrorBody),
        (status = 404, description = "Unknown policy", body = super::ErrorBody)))]
pub async fn get_limit(
    State(state): State<AppState>,
    path: Result<Path<(String, String)>, axum::extract::rejection::PathRejection>,
) -> Result<Response, ApiError> {
    let Path((policy, key)) = path?;
    let runtime = state.runtime();
    let policies = super::check::resolve(&runtime, &PolicyNames::One(policy.into()))?;
    let verdict = decide(&state, &policies, &key, 0).await?;
    Ok(respond(&runtime, &verdict, false))
}

/// Forgets a key's state under one policy. Needs `Authorization: Bearer <admin_token>`.
#[utoipa::path(delete, path = "/v1/limits/{policy}/{key}", tag = "admin",
    params(("policy" = String, Path, description = "Policy name"), ("key" = String, Path, description = "Client key (percent-encoded)")),
    security(("admin_token" = [])),
    responses(
        (status = 204, description = "Reset"),
        (status = 401, description = "No bearer token", body = super::ErrorBody),
        (status = 403, description = "Wrong token, or admin endpoints disabled (no admin_token configured)", body = super::ErrorBody),
        (status = 404, description = "Unknown policy", body = super::ErrorBody),
        (status = 503, description = "The store is not reachable", body = super::ErrorBody)))]
pub async fn delete_limit(
    State(state): State<AppState>,
    headers: HeaderMap,
    path: Result<Path<(String, String)>, axum::extract::rejection::PathRejection>,
) -> Result<Response, ApiError> {
    let runtime = state.runtime();
    authorize(runtime.config.server.admin_token.as_deref(), &headers)?;
    let Path((policy, key)) = path?;
    let policy = runtime
        .policy(&policy)
        .cloned()
        .ok_or_else(|| ApiError::unknown_policy(&policy))?;
    sluicegate_core::store::check_key(&key).map_err(|e| ApiError::from_store(&e))?;
    state
        .store
        .reset(&policy, &key)
        .await
        .map_err(|e| ApiError::from_store(&e))?;
    tracing::info!(
        policy = policy.name(),
        key = %sluicegate_middleware::identity::key_hint(&key),
        "key reset by admin"
    );
    Ok(StatusCode::NO_CONTENT.into_response())
}
