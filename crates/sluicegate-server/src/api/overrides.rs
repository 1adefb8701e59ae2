//! `PUT`, `GET` and `DELETE /v1/overrides/{policy}/{key}`: a key's own limit (a
//! customer's contract), kept in the store so every instance sharing it uses it from its
//! next decision. Admin token for all three (an override says what a customer bought).

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use sluicegate_core::{OverrideSpec, StoreError};
use utoipa::ToSchema;

use super::ApiError;
use super::admin::authorize;
use crate::state::AppState;

/// A key's own numbers under a policy.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct OverrideBody {
    /// The key's limit (requests per period; concurrency: in flight).
    #[serde(deserialize_with = "super::types::exact_whole_number")]
    #[schema(minimum = 1, maximum = 9007199254740992_u64)]
    pub limit: u64,
    /// The key's burst (bucket algorithms); default: the policy's, or the new limit where
    /// the policy's burst is its limit.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "super::types::optional_exact_whole_number"
    )]
    #[schema(minimum = 1, maximum = 9007199254740992_u64)]
    pub burst: Option<u64>,
    /// The key's period, e.g. `"1h"`; default: the policy's. Not for calendar or
    /// concurrency policies.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<String>,
}

type PathArgs = Result<Path<(String, String)>, PathRejection>;

/// The policy and key of the path, after the admin check.
fn target(
    state: &AppState,
    headers: &HeaderMap,
    path: PathArgs,
) -> Result<(std::sync::Arc<sluicegate_core::Policy>, String), ApiError> {
    let runtime = state.runtime();
    authorize(runtime.config.server.admin_token.as_deref(), headers)?;
    let Path((policy, key)) = path?;
    let policy = runtime
        .policy(&policy)
        .cloned()
        .ok_or_else(|| ApiError::unknown_policy(&policy))?;
    sluicegate_core::store::check_key(&key).map_err(|e| ApiError::from_store(&e))?;
    Ok((policy, key))
}

/// An override the store cannot decide exactly is the caller's mistake (400).
fn store_error(e: &StoreError) -> ApiError {
    match e {
        StoreError::Unsupported(message) => ApiError::invalid(message.clone()),
        other => ApiError::from_store(other),
    }
}

/// Sets a key's own limit under a policy; the key keeps what it has used.
#[utoipa::path(put, path = "/v1/overrides/{policy}/{key}", tag = "admin",
    params(("policy" = String, Path, description = "Policy name"), ("key" = String, Path, description = "Client key (percent-encoded)")),
    request_body = OverrideBody,
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "Set; the override as stored", body = OverrideBody),
        (status = 400, description = "Invalid numbers for this policy, bad JSON or key", body = super::ErrorBody),
        (status = 401, description = "No bearer token", body = super::ErrorBody),
        (status = 403, description = "Wrong token, or admin endpoints disabled", body = super::ErrorBody),
        (status = 404, description = "Unknown policy", body = super::ErrorBody),
        (status = 503, description = "The store is not reachable", body = super::ErrorBody)))]
pub async fn put_override(
    State(state): State<AppState>,
    headers: HeaderMap,
    path: PathArgs,
    body: Result<Json<OverrideBody>, JsonRejection>,
) -> Result<Response, ApiError> {
    let (policy, key) = target(&state, &headers, path)?;
    let Json(body) = body?;
    let spec = OverrideSpec {
        limit: body.limit,
        burst: body.burst,
        period: body.period,
    };
    let value = spec
        .parse(&policy)
        .map_err(|e| ApiError::invalid(format!("override of {:?}: {e}", policy.name())))?;
    state
        .set_override(&policy, &key, Some(value))
        .await
        .map_err(|e| store_error(&e))?;
    tracing::info!(
        policy = policy.name(),
        key = %sluicegate_middleware::identity::key_hint(&key),
        limit = value.limit,
        "override set by admin"
    );
    Ok(Json(body_of(&value)).into_response())
}

/// A key's override under a policy; 404 `not_found` when it has none.
#[utoipa::path(get, path = "/v1/overrides/{policy}/{key}", tag = "admin",
    params(("policy" = String, Path, description = "Policy name"), ("key" = String, Path, description = "Client key (percent-encoded)")),
    security(("admin_token" = [])),
    responses(
        (status = 200, description = "The key's override", body = OverrideBody),
        (status = 400, description = "Empty or over-long key", body = super::ErrorBody),
        (status = 401, description = "No bearer token", body = super::ErrorBody),
        (status = 403, description = "Wrong token, or admin endpoints disabled", body = super::ErrorBody),
        (status = 404, description = "Unknown policy, or no override for this key", body = super::ErrorBody),
        (status = 503, description = "The store is not reachable", body = super::ErrorBody)))]
pub async fn get_override(
    State(state): State<AppState>,
    headers: HeaderMap,
    path: PathArgs,
) -> Result<Response, ApiError> {
    let (policy, key) = target(&state, &headers, path)?;
    match state
        .store
        .get_override(&policy, &key)
        .await
        .map_err(|e| store_error(&e))?
    {
        Some(value) => Ok(Json(body_of(&value)).into_response()),
        None => Err(ApiError::new(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("key has no override under {:?}", policy.name()),
        )),
    }
}

/// Removes a key's override: the policy's own numbers apply again (204, also when there
/// was none); the key keeps what it has used.
#[utoipa::path(delete, path = "/v1/overrides/{policy}/{key}", tag = "admin",
    params(("policy" = String, Path, description = "Policy name"), ("key" = String, Path, description = "Client key (percent-encoded)")),
    security(("admin_token" = [])),
    responses(
        (status = 204, description = "Removed"),
        (status = 400, description = "Empty or over-long key", body = super::ErrorBody),
        (status = 401, description = "No bearer token", body = super::ErrorBody),
        (status = 403, description = "Wrong token, or admin endpoints disabled", body = super::ErrorBody),
        (status = 404, description = "Unknown policy", body = super::ErrorBody),
        (status = 503, description = "The store is not reachable", body = super::ErrorBody)))]
pub async fn delete_override(
    State(state): State<AppState>,
    headers: HeaderMap,
    path: PathArgs,
) -> Result<Response, ApiError> {
    let (policy, key) = target(&state, &headers, path)?;
    state
        .set_override(&policy, &key, None)
        .await
        .map_err(|e| store_error(&e))?;
    tracing::info!(
        policy = policy.name(),
        key = %sluicegate_middleware::identity::key_hint(&key),
        "override removed by admin"
    );
    Ok(StatusCode::NO_CONTENT.into_response())
}

fn body_of(value: &sluicegate_core::Override) -> OverrideBody {
    let spec = OverrideSpec::from_override(value);
    OverrideBody {
        limit: spec.limit,
        burst: spec.burst,
        period: spec.period,
    }
}
