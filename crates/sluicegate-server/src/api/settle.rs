//! Leases and reservations of the decision API: what `/v1/check` attaches to an admitted
//! answer, `POST /v1/settle` (the real cost of a reserved decision) and `POST /v1/release`
//! (the end of a request holding concurrency slots). The tokens are signed (see
//! [`super::token`]); the rules of a settle are core's (`Algorithm::settle`).

use std::cell::LazyCell;
use std::sync::Arc;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use sluicegate_core::{AlgorithmKind, Lease, Policy, Settled, Settlement, Verdict};

use super::check::{decide, respond};
use super::error::ApiError;
use super::token::{Kind, LeaseClaims, ReservationClaims, Signer, nonce};
use super::types::{CheckBody, CheckResponse, ReleaseBody, SettleBody};
use crate::state::{AppState, Runtime};

/// Adds the `lease` (an admitted decision on concurrency policies) and, when asked, the
/// `reservation` to an answer.
pub fn attach(
    signer: &LazyCell<Arc<Signer>, impl FnOnce() -> Arc<Signer>>,
    runtime: &Runtime,
    verdict: &Verdict,
    body: &CheckBody<'_>,
    answer: &mut CheckResponse,
) {
    if !verdict.allowed {
        return;
    }
    let leases = verdict.leases(&body.key, body.cost);
    if !leases.is_empty() {
        let claims = LeaseClaims {
            p: leases
                .iter()
                .map(|l| (l.policy.name().to_owned(), l.expires_at))
                .collect(),
            k: body.key.clone().into_owned(),
            c: body.cost,
        };
        answer.lease = Some(signer.sign(Kind::Lease, &claims));
    }
    // A verdict no store decided (on_store_error admitted it) charged nothing to settle.
    if body.reserve && verdict.at != 0 {
        let consumed = verdict.decisions.iter().enumerate().filter(|(i, d)| {
            verdict.consumes(*i) && d.policy.algorithm() != AlgorithmKind::Concurrency
        });
        let (p, r) = consumed
            .map(|(_, d)| (d.policy.name().to_owned(), d.decision.remaining))
            .unzip();
        let ttl = runtime.config.server.reservation_ttl.as_micros() as u64;
        let claims = ReservationClaims {
            p,
            r,
            k: body.key.clone().into_owned(),
            e: body.cost,
            a: verdict.at,
            x: verdict.at.saturating_add(ttl),
            n: nonce(),
        };
        answer.reservation = Some(signer.sign(Kind::Reservation, &claims));
    }
}

/// The loaded policies a token names; those removed (or renamed) by a reload since are
/// skipped, with the numbers that go with them.
fn loaded<'a, T: Copy>(
    runtime: &Runtime,
    named: impl Iterator<Item = (&'a String, T)>,
) -> (Vec<Arc<Policy>>, Vec<T>) {
    named
        .filter_map(|(name, extra)| runtime.policy(name).map(|p| (Arc::clone(p), extra)))
        .unzip()
}

/// Set the real cost of a reserved decision.
///
/// Every policy the decision consumed from gets the real cost instead of the estimate:
/// the difference is given back, or the excess charged (a key may go into debt and then
/// waits longer). A reservation settles once, until it expires (`server.reservation_ttl`
/// after its admission, default 10 minutes).
#[utoipa::path(post, path = "/v1/settle", tag = "decisions",
    request_body = SettleBody,
    responses(
        (status = 200, description = "Settled; the key's state now (nothing consumed)", body = CheckResponse),
        (status = 400, description = "Not a genuine reservation, or a bad body", body = super::ErrorBody),
        (status = 409, description = "`reservation_expired`, or `reservation_settled` (settled before)", body = super::ErrorBody),
        (status = 503, description = "The store is unavailable", body = super::ErrorBody),
    ))]
pub async fn settle(
    State(state): State<AppState>,
    body: Result<Json<SettleBody>, axum::extract::rejection::JsonRejection>,
) -> Result<Response, ApiError> {
    let Json(body) = body?;
    let runtime = state.runtime();
    let claims: ReservationClaims = state
        .signer(&runtime)
        .verify(Kind::Reservation, &body.reservation)
        .map_err(|e| ApiError::invalid(e.to_string()))?;
    if claims.p.len() != claims.r.len() {
        return Err(ApiError::invalid("not a genuine reservation"));
    }
    let (policies, remaining) = loaded(&runtime, claims.p.iter().zip(claims.r.iter().copied()));
    if policies.is_empty() {
        // Nothing left to settle (no policy consumed, or all were removed).
        return Ok(StatusCode::NO_CONTENT.into_response());
    }
    let settled = state
        .store
        .settle(Settlement {
            policies: &policies,
            remaining: &remaining,
            key: &claims.k,
            estimate: claims.e,
            real: body.cost,
            admitted_at: claims.a,
            expires_at: claims.x,
            id: &claims.n,
        })
        .await
        .map_err(|e| ApiError::from_store(&e))?;
    match settled {
        Settled::Done => {
            let verdict = decide(&state, &policies, &claims.k, 0).await?;
            Ok(respond(&runtime, &verdict, policies.len() > 1))
        }
        Settled::Replayed => Err(ApiError::new(
            StatusCode::CONFLICT,
            "reservation_settled",
            "this reservation was settled already",
        )),
        Settled::Expired => Err(ApiError::new(
            StatusCode::CONFLICT,
            "reservation_expired",
            "this reservation has expired (server.reservation_ttl after its admission)",
        )),
    }
}

/// Free the concurrency slots of a request that ended.
///
/// Idempotent: a lease already freed, or expired, is not an error.
#[utoipa::path(post, path = "/v1/release", tag = "decisions",
    request_body = ReleaseBody,
    responses(
        (status = 204, description = "Freed (or already free)"),
        (status = 400, description = "Not a genuine lease, or a bad body", body = super::ErrorBody),
        (status = 503, description = "The store is unavailable", body = super::ErrorBody),
    ))]
pub async fn release(
    State(state): State<AppState>,
    body: Result<Json<ReleaseBody>, axum::extract::rejection::JsonRejection>,
) -> Result<StatusCode, ApiError> {
    let Json(body) = body?;
    let runtime = state.runtime();
    let claims: LeaseClaims = state
        .signer(&runtime)
        .verify(Kind::Lease, &body.lease)
        .map_err(|e| ApiError::invalid(e.to_string()))?;
    let (policies, expiries) = loaded(&runtime, claims.p.iter().map(|(n, x)| (n, *x)));
    let leases: Vec<Lease> = policies
        .into_iter()
        .zip(expiries)
        .map(|(policy, expires_at)| Lease {
            policy,
            key: claims.k.clone(),
            expires_at,
            cost: claims.c,
        })
        .collect();
    state
        .store
        .release(&leases)
        .await
        .map_err(|e| ApiError::from_store(&e))?;
    Ok(StatusCode::NO_CONTENT)
}
