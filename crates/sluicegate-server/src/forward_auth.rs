//! `/v1/forward-auth`: the decision endpoint for nginx `auth_request`, Traefik ForwardAuth
//! and Caddy `forward_auth`.
//!
//! The proxy describes the client's request in headers; the routes of the configuration
//! decide it exactly as the gateway would. The proxy is the TCP peer: it must be listed in
//! `server.trusted_proxies` for its `X-Forwarded-For` to name the client.

use std::borrow::Cow;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};

use axum::body::Body;
use axum::extract::{ConnectInfo, State};
use axum::http::{HeaderMap, Method, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::api::ApiError;
use crate::state::AppState;

/// Decides the request the proxy describes in the header pair `server.forward_auth_source`
/// names: `X-Original-URI`/`X-Original-Method` (`x-original`, nginx) or
/// `X-Forwarded-Uri`/`X-Forwarded-Method` (`x-forwarded`, Traefik, Caddy). The other pair is
/// ignored: Traefik and Caddy pass the client's own headers to the auth call, so reading
/// both would let a client choose the path that is decided. 200 with the rate-limit headers
/// when admitted (after the wait, in delay mode) or when no route matches; else
/// `server.forward_auth_deny_status` (default 429) with `Retry-After`, the rate-limit
/// headers and the rejection JSON. Without the URI header, 400: a proxy that does not send
/// it is misconfigured, and admitting would fail open.
// Every method: proxies send the auth subrequest with the client's (nginx) or their own.
#[utoipa::path(method(get, post, put, delete, options, head, patch, trace), path = "/v1/forward-auth", tag = "forward-auth",
    params(
        ("X-Original-URI" = String, Header, pattern = "^/", description = "The client's request target, origin form (`/path?query`; nginx $request_uri). With forward_auth_source = x-forwarded it is X-Forwarded-Uri instead: /openapi.json shows the pair this server reads"),
        ("X-Original-Method" = Option<String>, Header, pattern = "^[!#$%&'*+.^_`|~0-9A-Za-z-]+$", description = "The client's method (or X-Forwarded-Method). Default: this request's method"),
        ("X-Forwarded-For" = Option<String>, Header, description = "The client's address (or the header server.client_ip_header names); used only when the peer is in server.trusted_proxies"),
    ),
    responses(
        (status = 200, description = "Admitted, or no route matches"),
        (status = 400, description = "The URI header is missing or invalid, or the method header is not a method", body = crate::api::ErrorBody),
        (status = 403, description = "The client is on a deny list (server.deny or the route's deny)", body = crate::api::ErrorBody),
        (status = 429, description = "Rejected (the status is server.forward_auth_deny_status)")))]
pub async fn forward_auth(
    State(state): State<AppState>,
    ConnectInfo(peer): ConnectInfo<SocketAddr>,
    // Taken whole: the `HeaderMap` extractor would copy every header of the request.
    request: axum::extract::Request,
) -> Response {
    let runtime = state.current();
    let headers = request.headers();
    let (uri_header, method_header) = runtime.config.server.forward_auth_source.headers();
    let path = match original_path(headers, uri_header) {
        Ok(path) => path,
        Err(e) => return e.into_response(),
    };
    let method = match original_method(headers, method_header, request.method()) {
        Ok(method) => method,
        Err(e) => return e.into_response(),
    };
    warn_untrusted_once(&runtime.limiter, peer, headers);
    let Some(decision) = runtime
        .limiter
        .check(&method, &path, headers, peer.ip())
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
fn original_path<'h>(headers: &'h HeaderMap, name: &str) -> Result<Cow<'h, str>, ApiError> {
    let Some(value) = headers.get(name) else {
        return Err(ApiError::invalid(format!(
            "forward-auth needs the {name} header (server.forward_auth_source); \
             is the proxy configured to send it?"
        )));
    };
    // Origin form (`/a//b?q`): what nginx's $request_uri, Caddy and Traefik send. It is
    // taken as it is, not parsed as a URI: `//a` would read `a` as a host and skip the limit
    // of `/a`. Bytes that are not UTF-8 are replaced, never a reason to refuse (or admit).
    /// The target without surrounding blanks and the fragment.
    fn target(text: &str) -> &str {
        text.trim().split('#').next().unwrap_or("/")
    }
    let text = String::from_utf8_lossy(value.as_bytes());
    if !text.trim().starts_with('/') {
        return Err(ApiError::invalid(format!(
            "the {name} header must be the request target in origin form (`/path?query`)"
        )));
    }
    // Borrowed from the header when it is UTF-8 (the usual case): no copy per request.
    Ok(match text {
        Cow::Borrowed(text) => Cow::Borrowed(target(text)),
        Cow::Owned(text) => Cow::Owned(target(&text).to_owned()),
    })
}

fn original_method(headers: &HeaderMap, name: &str, own: &Method) -> Result<Method, ApiError> {
    match headers.get(name) {
        None => Ok(own.clone()),
        Some(value) => Method::from_bytes(value.as_bytes())
            .map_err(|_| ApiError::invalid(format!("the {name} header is not an HTTP method"))),
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
    if WARNED.load(Ordering::Relaxed) {
        return; // said once: no header lookup per request from now on
    }
    let forwarded = headers.contains_key(limiter.identity().header.name());
    if forwarded
        && !limiter.identity().is_trusted(peer.ip())
        && !WARNED.swap(true, Ordering::Relaxed)
    {
        tracing::warn!(
            peer = %peer.ip(),
            header = limiter.identity().header.name(),
            "forward-auth request carries the client IP header from a peer not in server.trusted_proxies; \
             the header is ignored and clients are keyed by the proxy's address"
        );
    }
}
