//! `GET /v1/policies`.

use std::time::Duration;

use axum::Json;
use axum::extract::State;
use sluicegate_core::{Mode, OnStoreError, Policy};

use super::types::{PoliciesResponse, PolicyInfo};
use crate::state::AppState;

/// The loaded policies, in configuration order.
#[utoipa::path(get, path = "/v1/policies", tag = "decisions",
    responses((status = 200, description = "The loaded policies", body = PoliciesResponse)))]
pub async fn list_policies(State(state): State<AppState>) -> Json<PoliciesResponse> {
    let runtime = state.runtime();
    Json(PoliciesResponse {
        policies: runtime.config.policies.iter().map(|p| info(p)).collect(),
    })
}

fn info(p: &Policy) -> PolicyInfo {
    PolicyInfo {
        name: p.name().to_owned(),
        algorithm: p.algorithm().name().to_owned(),
        limit: p.limit(),
        period: match p.calendar() {
            Some(c) => c.unit().name().to_owned(),
            None => humantime::format_duration(p.period_duration()).to_string(),
        },
        period_ms: super::types::ms(p.period()),
        burst: p.burst(),
        mode: p.mode().name().to_owned(),
        max_delay_ms: (p.mode() == Mode::Delay)
            .then(|| Duration::from_micros(p.max_delay()).as_millis() as u64),
        on_store_error: match p.on_store_error() {
            OnStoreError::Allow => "allow",
            OnStoreError::Deny => "deny",
        }
        .to_owned(),
        penalty_ms: (p.penalty() > 0).then(|| super::types::ms(p.penalty())),
        calendar: p.calendar().map(|c| c.unit().name().to_owned()),
        timezone: p.calendar().map(|c| c.zone().to_owned()),
    }
}
