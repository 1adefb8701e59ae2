//! `/v1/forward-auth`: the decision endpoint for nginx `auth_request`, Traefik ForwardAuth
//! and Caddy `forward_auth`.
//!
//! The proxy describes the client's request in headers; the routes of the configuration
//! decide it exactly as the gateway would. The proxy is the TCP peer: it must be listed in
//! `server.trusted_proxies` for its `X-Forwarded-For` to name the client.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::api::ApiError;
use crate::state::AppState;

/// Headers carrying the original URI, in order of preference.
const URI_HEADERS: [&str; 2] = ["x-original-uri", "x-forwarded-uri"];
/// Headers carrying the original method.
const METHOD_HEADERS: [&str; 2] = ["x-original-method", "x-forwarded-method"];

/// Decides the request the proxy describes in `X-Original-URI`/`X-Original-Method` (nginx)
/// or `X-Forwarded-Uri`/`X-Forwarded-Method` (Traefik, Caddy): 200 with the rate-limit
/// headers when admitted (after the wait, in delay mode) or when no route matches; else
/// `server.forward_auth_deny_status` (default 429) with `Retry-After`, the rate-limit headers
/// and the rejection JSON.
#[utoipa::path(get, path = "/v1/forward-auth", tag = "forward-auth",
    params(
        ("X-Original-URI" = Option<String>, Header, description = "The client's request URI (nginx); or X-Forwarded-Uri (Traefik, Caddy)"),
        ("X-Original-Method" = Option<String>, Header, description = "The client's method (nginx); or X-Forwarded-Method. Default: this request's method"),
        ("X-Forwarded-For" = Option<String>, Header, description = "The client's address; used only when the peer is in server.trusted_proxies"),
    ),
    responses(
        (status = 200, description = "Admitted, or no route matches"),
        (status = 400, description = "Neither X-Original-URI nor X-Forwarded-Uri, or an invalid one", body = crate::api::ErrorBody),
        (status = 403, description = "The client is on a deny list (server.deny or the route's deny)", body = crate::api::ErrorBody),
        (status = 429, description = "Rejected (the status is server.forward_auth_deny_status)")))]
pub async fn forward_auth(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    method: Method,
    headers: HeaderMap,
) -> Response {
    let runtime = state.runtime();
    let path = match original_path(&headers) {
        Ok(path) => path,
        Err(e) => return e.into_response(),
    };
    let method = match original_method(&headers, method) {
        Ok(method) => method,
        Err(e) => return e.into_response(),
    };
    warn_untrusted_once(&runtime.limiter, peer, &headers);
    let Some(decision) = runtime
        .limiter
        .check(&method, &path, &headers, peer.ip())
        .await
    else {
        return StatusCode::OK.into_response();
    };
    if !decision.is_allowed() {
        let status = StatusCode::from_u16(runtime.config.server.forward_auth_deny_status)
            .unwrap_or(StatusCode::TOO_MANY_REQUESTS);
        return decision.rejection_with_status(status).map(Body::new);
    }
    decision.wait().await;
    // Forward-auth answers before the request is proxied and never sees it end, so it
    // cannot hold a concurrency lease: the slot is checked free, then given back at once.
    // (`validate` refuses concurrency policies where only forward-auth uses the routes.)
    if let Some(guard) = decision.lease_guard() {
        guard.release();
    }
    let mut response = StatusCode::OK.into_response();
    decision.write_headers(response.headers_mut());
    response
}

/// The path and query of the original request (the query is not part of route matching;
/// only `query:<name>` keys read it).
fn original_path(headers: &HeaderMap) -> Result<String, ApiError> {
    let Some(value) = URI_HEADERS.iter().find_map(|h| headers.get(*h)) else {
        return Err(ApiError::invalid(
            "forward-auth needs X-Original-URI (nginx) or X-Forwarded-Uri (Traefik, Caddy)",
        ));
    };
    let uri: axum::http::Uri = value
        .to_str()
        .ok()
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| ApiError::invalid("the original URI header is not a valid URI"))?;
    let path = uri.path();
    let path = if path.is_empty() { "/" } else { path };
    Ok(match uri.query() {
        Some(query) => format!("{path}?{query}"),
        None => path.to_owned(),
    })
}

fn original_method(headers: &HeaderMap, own: Method) -> Result<Method, ApiError> {
    match METHOD_HEADERS.iter().find_map(|h| headers.get(*h)) {
        None => Ok(own),
        Some(value) => Method::from_bytes(value.as_bytes())
            .map_err(|_| ApiError::invalid("the original method header is not an HTTP method")),
    }
}

/// Forwarded headers from a peer that is not trusted are ignored (they could be spoofed);
/// that is right, but it is also the usual misconfiguration, so say it once.
fn warn_untrusted_once(
    limiter: &sluicegate_middleware::RateLimiter,
    peer: SocketAddr,
    headers: &HeaderMap,
) {
    static WARNED: AtomicBool = AtomicBool::new(false);
    let forwarded = headers.contains_key("x-forwarded-for") || headers.contains_key("forwarded");
    if forwarded
        && !limiter.identity().is_trusted(peer.ip())
        && !WARNED.swap(true, Ordering::Relaxed)
    {
        tracing::warn!(
            peer = %peer.ip(),
            "forward-auth request carries X-Forwarded-For from a peer not in server.trusted_proxies; \
             the header is ignored and clients are keyed by the proxy's address"
        );
    }
}
