//! `POST /v1/check`: single, multi-policy and batch decisions.

use std::borrow::Cow;
use std::cell::LazyCell;
use std::sync::Arc;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use http_body_util::{BodyExt, LengthLimitError, Limited};
use sluicegate_core::{CheckRequest, Policy, Verdict};

use super::answer::Answer;
use super::error::ApiError;
use super::types::{BatchBody, BatchEntry, BatchResponse, CheckBody, CheckResponse, PolicyNames};
use super::{MAX_BATCH, MAX_BODY};
use crate::state::{AppState, Runtime};
use sluicegate_middleware::headers::write_headers_cached;

/// Decide (and, if admitted, consume) one request, or a batch of independent ones.
///
/// The body is either one request `{"policy", "key", "cost"}` or a batch
/// `{"requests": [ … ]}`, answered `{"results": [ … ]}` in order, each entry an answer or
/// an error object. A batch goes to the store in one call (one round trip on Redis).
#[utoipa::path(post, path = "/v1/check", tag = "decisions",
    request_body(content = CheckBody, description = "One request, or a batch: {\"requests\": [CheckBody, …]}"),
    responses(
        (status = 200, description = "Decided; `allowed` says whether the request may go ahead. A batch answers BatchResponse.", body = CheckResponse,
            headers(("RateLimit-Limit" = u64, description = "draft-6 header set"), ("RateLimit-Policy" = String, description = "ietf header set"))),
        (status = 400, description = "Bad JSON, empty or over-long key, negative, fractional or impossible cost", body = super::ErrorBody),
        (status = 404, description = "Unknown policy", body = super::ErrorBody),
        (status = 413, description = "Body over 64 KiB", body = super::ErrorBody),
    ))]
pub async fn check(
    State(state): State<AppState>,
    request: axum::extract::Request,
) -> Result<Response, ApiError> {
    // Taking the request whole avoids copying its header map for one header.
    require_json(request.headers())?;
    let body = read_body(request.into_body()).await?;
    let runtime = state.current();
    answer(&state, &runtime, &body).await
}

/// The answer to a `/v1/check` body that passed the token and content-type checks: the
/// handler above (behind the router) and the listener's front door
/// ([`crate::front`], which answers this endpoint without the router) both end here.
pub async fn answer(
    state: &AppState,
    runtime: &Runtime,
    body: &[u8],
) -> Result<Response, ApiError> {
    Ok(match decided(state, runtime, body).await? {
        Answered::Plain {
            verdict,
            policy_field,
            json,
        } => with_json(runtime, &verdict, policy_field, json),
        Answered::Full(response) => response,
    })
}

/// A `/v1/check` answer before it becomes a response.
#[derive(Debug)]
pub enum Answered<'r> {
    /// The common answer (one policy, nothing attached): a 200 with `json` as its body,
    /// `Content-Type: application/json` and the rate-limit headers of `verdict`, for the
    /// caller to write (the lean HTTP path writes them as bytes, [`answer`] as a response).
    Plain {
        /// The decision.
        verdict: Verdict,
        /// The `RateLimit-Policy` value computed at load, when there is one.
        policy_field: Option<&'r HeaderValue>,
        /// The body.
        json: Vec<u8>,
    },
    /// Any other answer, as a response.
    Full(Response),
}

/// The steps of [`answer`] short of building the common answer's response.
pub async fn decided<'r>(
    state: &AppState,
    runtime: &'r Runtime,
    body: &[u8],
) -> Result<Answered<'r>, ApiError> {
    let body = match parse_body(body)? {
        CheckInput::One(body) => body,
        CheckInput::Batch(batch) => {
            let batch = check_batch(state, runtime, batch).await?;
            return Ok(Answered::Full(Json(batch).into_response()));
        }
    };
    if body.reserve && body.cost == 0 {
        return Err(ApiError::invalid(
            "reserve needs a cost of at least 1 (the estimate charged now)",
        ));
    }
    let (policies, field) = resolve_with_field(runtime, &body.policy)?;
    let verdict = decide(state, &policies, &body.key, body.cost).await?;
    let Some(top) = Answer::from_verdict(&verdict) else {
        return Err(ApiError::invalid("the request names no policy"));
    };
    // The common answer (one policy, nothing to attach) is written by hand: serde's bytes
    // without serde (api/answer.rs).
    let attaches = body.reserve || verdict.decisions.iter().any(|d| d.decision.lease != 0);
    if !body.policy.is_list() && !attaches {
        let mut json = Vec::with_capacity(256);
        top.write_json(&mut json);
        return Ok(Answered::Plain {
            verdict,
            policy_field: field,
            json,
        });
    }
    let Some(mut answer) = CheckResponse::from_verdict(&verdict, body.policy.is_list()) else {
        return Err(ApiError::invalid("the request names no policy"));
    };
    // Made only when a token is signed: with `reservation_secret` set, making one keys HMAC.
    let signer = LazyCell::new(|| state.signer(runtime));
    super::settle::attach(&signer, runtime, &verdict, &body, &mut answer);
    Ok(Answered::Full(with_headers(
        runtime, &verdict, field, &answer,
    )))
}

/// [`resolve`], with the `RateLimit-Policy` value computed at load for the policies named
/// (one lookup for one name).
fn resolve_with_field<'r>(
    runtime: &'r Runtime,
    names: &PolicyNames<'_>,
) -> Result<(Policies<'r>, Option<&'r HeaderValue>), ApiError> {
    if let PolicyNames::One(name) = names {
        let (policy, field) = runtime
            .policy_with_field(name)
            .ok_or_else(|| ApiError::unknown_policy(name))?;
        return Ok((Cow::Borrowed(std::slice::from_ref(policy)), field));
    }
    let policies = resolve(runtime, names)?;
    let field = runtime.policy_field(&policies);
    Ok((policies, field))
}

/// The request body, at most [`MAX_BODY`] bytes (413 beyond). Bounded here rather than by
/// the router's `DefaultBodyLimit` layer, as the other endpoints are: the same bound, read
/// the same way, without the layer's per-request extension. Generic so that the front door
/// reads hyper's body as it comes, without boxing it into axum's.
pub async fn read_body<B>(body: B) -> Result<Bytes, ApiError>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<axum::BoxError>,
{
    match Limited::new(body, MAX_BODY).collect().await {
        Ok(collected) => Ok(collected.to_bytes()),
        Err(e) if e.is::<LengthLimitError>() => Err(ApiError::too_large()),
        Err(e) => Err(ApiError::invalid(format!(
            "cannot read the body: Failed to buffer the request body: {e}"
        ))),
    }
}

/// A parsed `/v1/check` body (one request borrows its strings from the body's bytes).
#[derive(Debug)]
pub enum CheckInput<'a> {
    /// One request (`{"policy", "key", "cost"}`).
    One(CheckBody<'a>),
    /// A batch (`{"requests": [ … ]}`); its entries are parsed one by one later, so that a
    /// bad entry answers with its own error in place.
    Batch(BatchBody),
}

/// Parses a `/v1/check` body: one request or a batch, or the 400 (413 over 64 KiB) to
/// answer. The one parser of that body (the fuzz target `check_body` calls it too).
pub fn parse_body(body: &[u8]) -> Result<CheckInput<'_>, ApiError> {
    if body.len() > MAX_BODY {
        return Err(ApiError::too_large());
    }
    // The common case first: one plain request, read by hand (what serde would make of
    // it; anything else goes to serde), then one request, parsed straight into its type.
    if let Some(body) = super::plain_body::parse(body) {
        return Ok(CheckInput::One(body));
    }
    let single_error = match serde_json::from_slice::<CheckBody>(body) {
        Ok(body) => return Ok(CheckInput::One(body)),
        Err(e) => e,
    };
    let value: serde_json::Value = serde_json::from_slice(body)
        .map_err(|e| ApiError::invalid(format!("invalid JSON: {e}")))?;
    if !value.is_object() {
        return Err(ApiError::invalid("the body must be a JSON object"));
    }
    if value.get("requests").is_none() {
        return Err(ApiError::invalid(format!(
            "invalid request: {single_error}"
        )));
    }
    serde_json::from_value(value)
        .map(CheckInput::Batch)
        .map_err(|e| ApiError::invalid(format!("invalid batch: {e}")))
}

/// One entry of a batch, parsed like a single request.
pub fn parse_entry(value: serde_json::Value) -> Result<CheckBody<'static>, ApiError> {
    // `from_value` wants a type owning its strings; `Value` deserialises into owned ones.
    <CheckBody<'static> as serde::Deserialize>::deserialize(value)
        .map_err(|e| ApiError::invalid(format!("invalid request: {e}")))
}

/// A 400 unless the body is declared as JSON (a missing Content-Type is accepted, as curl
/// users often forget it, but a different one is not).
pub fn require_json(headers: &HeaderMap) -> Result<(), ApiError> {
    require_json_value(
        headers
            .get(axum::http::header::CONTENT_TYPE)
            .map(HeaderValue::as_bytes),
    )
}

/// [`require_json`] on the `Content-Type` value itself (the lean HTTP path has no map).
pub fn require_json_value(value: Option<&[u8]>) -> Result<(), ApiError> {
    let Some(value) = value else {
        return Ok(());
    };
    // What clients send, compared first as it is.
    if value == b"application/json" {
        return Ok(());
    }
    // Compared ignoring ASCII case in place: no lower-cased copy per request.
    let essence = value.split(|b| *b == b';').next().unwrap_or_default();
    let essence = essence.trim_ascii();
    let starts = |prefix: &[u8]| {
        essence
            .get(..prefix.len())
            .is_some_and(|p| p.eq_ignore_ascii_case(prefix))
    };
    let ends = |suffix: &[u8]| {
        (essence.len() >= suffix.len())
            && essence[essence.len() - suffix.len()..].eq_ignore_ascii_case(suffix)
    };
    if essence.eq_ignore_ascii_case(b"application/json")
        || (starts(b"application/") && ends(b"+json"))
    {
        Ok(())
    } else {
        Err(ApiError::invalid("expected Content-Type: application/json"))
    }
}

/// The policies of one request: one borrowed from the configuration (no list to allocate,
/// no reference to count), several in a list of their own.
pub type Policies<'r> = Cow<'r, [Arc<Policy>]>;

/// The loaded policies named in a request.
pub fn resolve<'r>(
    runtime: &'r Runtime,
    names: &PolicyNames<'_>,
) -> Result<Policies<'r>, ApiError> {
    let names = match names {
        PolicyNames::One(name) => {
            return runtime
                .policy(name)
                .map(|policy| Cow::Borrowed(std::slice::from_ref(policy)))
                .ok_or_else(|| ApiError::unknown_policy(name));
        }
        PolicyNames::Many(names) if names.is_empty() => {
            return Err(ApiError::invalid("`policy` names no policy"));
        }
        PolicyNames::Many(names) => names,
    };
    names
        .iter()
        .map(|name| {
            runtime
                .policy(name)
                .cloned()
                .ok_or_else(|| ApiError::unknown_policy(name))
        })
        .collect::<Result<Vec<_>, _>>()
        .map(Cow::Owned)
}

/// Asks the store; a failing store decides by each policy's `on_store_error`.
pub async fn decide(
    state: &AppState,
    policies: &[Arc<Policy>],
    key: &str,
    cost: u64,
) -> Result<Verdict, ApiError> {
    let decided = state
        .decider
        .check(CheckRequest::new(policies, key, cost))
        .await
        .map_err(|e| {
            if !e.is_bad_request() {
                tracing::error!(error = %e, store = state.store.kind(), "store could not decide; failing closed");
            }
            ApiError::from_store(&e)
        })?;
    // An outage was answered by on_store_error; the store logs it, at most once a second.
    Ok(decided.verdict)
}

/// The 200 answer with the rate-limit headers (and `Retry-After` on a denial).
pub fn respond(runtime: &Runtime, verdict: &Verdict, list: bool) -> Response {
    let Some(body) = CheckResponse::from_verdict(verdict, list) else {
        return ApiError::invalid("the request names no policy").into_response();
    };
    with_headers(runtime, verdict, None, &body)
}

/// `answer` as JSON with the rate-limit headers of `verdict` (and `Retry-After` on a
/// denial); `policy_field` is the `RateLimit-Policy` value computed at load, when there is one.
fn with_headers(
    runtime: &Runtime,
    verdict: &Verdict,
    policy_field: Option<&HeaderValue>,
    answer: &CheckResponse,
) -> Response {
    let mut json = Vec::with_capacity(256);
    if serde_json::to_writer(&mut json, answer).is_err() {
        // Strings and numbers always serialise; axum's own answer if they ever did not.
        return Json(answer).into_response();
    }
    with_json(runtime, verdict, policy_field, json)
}

/// The 200 answer `json` with the rate-limit headers of `verdict` (and `Retry-After` on a
/// denial).
fn with_json(
    runtime: &Runtime,
    verdict: &Verdict,
    policy_field: Option<&HeaderValue>,
    json: Vec<u8>,
) -> Response {
    // One allocation each, sized for the usual answer and every header: neither the body
    // nor the header map grows while it is written (a grown map is rehashed).
    let mut headers = HeaderMap::with_capacity(runtime.header_sets.len() * 3 + 3);
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    write_headers_cached(&runtime.header_sets, verdict, policy_field, &mut headers);
    let mut response = Response::new(Body::from(json));
    *response.headers_mut() = headers;
    response
}

async fn check_batch(
    state: &AppState,
    runtime: &Runtime,
    batch: BatchBody,
) -> Result<BatchResponse, ApiError> {
    if batch.requests.len() > MAX_BATCH {
        return Err(ApiError::invalid(format!(
            "at most {MAX_BATCH} requests in one batch, got {}",
            batch.requests.len()
        )));
    }
    // Resolve and validate each entry; invalid ones answer with their error in place.
    let mut results: Vec<Option<BatchEntry>> = Vec::with_capacity(batch.requests.len());
    let mut valid: Vec<(usize, Policies<'_>, CheckBody<'static>)> = Vec::new();
    for (i, value) in batch.requests.into_iter().enumerate() {
        let parsed = parse_entry(value).and_then(|body| {
            if body.reserve {
                return Err(ApiError::invalid(
                    "reserve is not available in a batch; send the request alone",
                ));
            }
            let policies = resolve(runtime, &body.policy)?;
            CheckRequest::new(&policies, &body.key, body.cost)
                .validate()
                .map_err(|e| ApiError::from_store(&e))?;
            Ok((policies, body))
        });
        match parsed {
            Ok((policies, body)) => {
                valid.push((i, policies, body));
                results.push(None);
            }
            Err(e) => results.push(Some(BatchEntry::Failed(e.body))),
        }
    }
    let requests: Vec<CheckRequest<'_>> = valid
        .iter()
        .map(|(_, policies, body)| CheckRequest::new(policies, &body.key, body.cost))
        .collect();
    let decided = state.decider.check_batch(&requests).await;
    let signer = LazyCell::new(|| state.signer(runtime));
    for ((i, _, body), decided) in valid.iter().zip(decided) {
        results[*i] = match decided {
            Ok(decided) => CheckResponse::from_verdict(&decided.verdict, body.policy.is_list())
                .map(|mut answer| {
                    let verdict = &decided.verdict;
                    super::settle::attach(&signer, runtime, verdict, body, &mut answer);
                    BatchEntry::Decided(answer)
                }),
            Err(e) => {
                if !e.is_bad_request() {
                    tracing::error!(error = %e, "store could not decide; failing closed");
                }
                Some(BatchEntry::Failed(ApiError::from_store(&e).body))
            }
        };
    }
    Ok(BatchResponse {
        results: results
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    BatchEntry::Failed(ApiError::invalid("the request names no policy").body)
                })
            })
            .collect(),
    })
}
