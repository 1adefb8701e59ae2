//! Upgrades through the gateway (WebSocket, and any other HTTP/1.1 `Upgrade`): the
//! handshake is a request like any other — decided by its route, refused with 429 before
//! anything reaches the upstream — and, when admitted and the upstream answers
//! `101 Switching Protocols`, both connections are handed over and bytes are copied both
//! ways until either side closes (or nothing moves for `idle_timeout`).
//!
//! What the request was admitted with is held for the tunnel's life: a concurrency lease
//! (a route limiting WebSockets in flight counts open ones), and a pool slot. The client's
//! socket keeps its `max_connections` slot too (see [`crate::conn`]).
//!
//! Only an upgrade keeps `Upgrade` and `Connection: upgrade` on its way through; every
//! other request loses them with the other hop-by-hop headers.

use axum::body::Body;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Version, header};
use axum::response::Response;
use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use sluicegate_middleware::{LeaseGuard, PoolPermit, RateLimitDecision};

use crate::config::ConnectionLimits;

/// The client side of an upgrade, taken from `request` when it asks for one: HTTP/1.1,
/// `Connection` naming `upgrade`, and an `Upgrade` header. `None` for any other request.
pub fn client_upgrade<B>(request: &mut http::Request<B>) -> Option<OnUpgrade> {
    if request.version() != Version::HTTP_11 || !is_upgrade(request.headers()) {
        return None;
    }
    request.extensions_mut().remove::<OnUpgrade>()
}

/// Whether `headers` ask for an upgrade (`Connection: upgrade` and an `Upgrade`).
fn is_upgrade(headers: &HeaderMap) -> bool {
    let names_upgrade = headers
        .get_all(header::CONNECTION)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|token| token.trim().eq_ignore_ascii_case("upgrade"));
    names_upgrade && headers.contains_key(header::UPGRADE)
}

/// Puts an upgrade's own two headers back after the hop-by-hop ones were removed.
pub fn upgrade_headers(headers: &mut HeaderMap, protocol: HeaderValue) {
    headers.insert(header::UPGRADE, protocol);
    headers.insert(header::CONNECTION, HeaderValue::from_static("upgrade"));
}

/// The upstream switched protocols: answers the client with its 101 (the rate-limit
/// headers added) and starts the tunnel, which holds `held` until it ends.
pub fn switch(
    mut response: hyper::Response<hyper::body::Incoming>,
    client: OnUpgrade,
    decision: Option<&RateLimitDecision>,
    held: (Option<LeaseGuard>, Option<PoolPermit>),
    limits: ConnectionLimits,
) -> Response {
    let upstream = hyper::upgrade::on(&mut response);
    let (mut parts, _) = response.into_parts();
    let protocol = parts.headers.get(header::UPGRADE).cloned();
    crate::gateway::strip_hop_by_hop(&mut parts.headers);
    if let Some(protocol) = protocol {
        upgrade_headers(&mut parts.headers, protocol);
    }
    let mut answer = Response::from_parts(parts, Body::empty());
    if let Some(decision) = decision {
        decision.write_headers(answer.headers_mut());
    }
    crate::gateway::after_response(decision, &mut answer);
    debug_assert_eq!(answer.status(), StatusCode::SWITCHING_PROTOCOLS);
    tokio::spawn(run(client, upstream, held, limits));
    answer
}

/// Waits for both sides to be handed over, then copies until the end; what the request
/// was admitted with (`held`) is released after.
async fn run(
    client: OnUpgrade,
    upstream: OnUpgrade,
    held: (Option<LeaseGuard>, Option<PoolPermit>),
    limits: ConnectionLimits,
) {
    match tokio::try_join!(client, upstream) {
        Ok((client, upstream)) => {
            crate::conn::tunnel(TokioIo::new(client), TokioIo::new(upstream), limits).await;
        }
        Err(error) => tracing::debug!(%error, "an upgrade was not completed"),
    }
    drop(held);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_upgrade_needs_both_headers() {
        let mut h = HeaderMap::new();
        h.insert(header::UPGRADE, HeaderValue::from_static("websocket"));
        assert!(!is_upgrade(&h), "Upgrade without Connection: upgrade");
        h.insert(
            header::CONNECTION,
            HeaderValue::from_static("keep-alive, Upgrade"),
        );
        assert!(is_upgrade(&h));
        h.remove(header::UPGRADE);
        assert!(!is_upgrade(&h), "Connection: upgrade without Upgrade");
    }
}
