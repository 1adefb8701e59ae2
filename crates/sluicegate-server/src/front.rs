//! The front door of the API listener: `POST /v1/check` is answered here, straight from
//! hyper's request; every other request goes to the axum [`Router`] (`app.rs`, with the
//! dashboard merged in and the API guard around it).
//!
//! Why: the decision endpoint is the one request an application makes for each of its own,
//! and the router's generic machinery (a clone of the router, its path match, the
//! `MatchedPath` and `OriginalUri` extensions, the guard layer's service, a boxed body and
//! boxed futures) cost about as much as the decision itself (issue 15; measured in
//! docs/benchmarks/server.md). The gateway answers its requests the same way (`conn::App`).
//!
//! What the router does for this endpoint is done here in the same order, with the same
//! functions: the API token (`app::authorize`, the guard's rule), the content type, the
//! body bound (64 KiB, 413), then [`api::check::answer`], which the router's handler calls
//! too. Any other method on `/v1/check` still reaches the router (405 with `Allow`), and
//! the route stays registered there, so the OpenAPI document and the router's behaviour
//! are unchanged.

use std::future::Future;
use std::net::SocketAddr;

use axum::Router;
use axum::body::{Body, Bytes};
use axum::extract::ConnectInfo;
use axum::response::{IntoResponse, Response};
use futures_util::future::Either;
use http::{Method, Request};
use hyper::body::Incoming;
use tower::ServiceExt;

use crate::api::{self, ApiError};
use crate::state::AppState;

/// The API listener's app: the decision endpoint answered directly, the rest by `router`.
#[derive(Clone)]
pub struct Front {
    router: Router,
    state: AppState,
}

impl Front {
    /// `router` (already guarded) for everything but `POST /v1/check`, which is decided
    /// with `state`.
    pub fn new(router: Router, state: AppState) -> Front {
        Front { router, state }
    }

    /// The router behind the front door.
    pub fn router(&self) -> &Router {
        &self.router
    }

    /// The response to `request` from `peer`. Generic in the body so that the benchmarks'
    /// in-process probe drives the same path as the listener (which passes hyper's body).
    pub fn serve<B>(
        &self,
        mut request: Request<B>,
        peer: SocketAddr,
    ) -> impl Future<Output = Response> + Send + 'static + use<B>
    where
        B: http_body::Body<Data = Bytes> + Send + 'static,
        B::Error: Into<axum::BoxError>,
    {
        if is_check(&request) {
            return Either::Left(check(self.state.clone(), request));
        }
        request.extensions_mut().insert(ConnectInfo(peer));
        let response = self.router.clone().oneshot(request.map(Body::new));
        Either::Right(async move {
            match response.await {
                Ok(response) => response,
                Err(infallible) => match infallible {},
            }
        })
    }
}

impl crate::conn::App for Front {
    fn call(
        &self,
        request: hyper::Request<Incoming>,
        peer: SocketAddr,
    ) -> impl Future<Output = Response<Body>> + Send + 'static + use<> {
        self.serve(request, peer)
    }
}

/// Whether the router would send `request` to the decision handler: `POST` on exactly
/// `/v1/check` (the router matches the path as sent, a query aside, without decoding it).
fn is_check<B>(request: &Request<B>) -> bool {
    request.method() == Method::POST && request.uri().path() == "/v1/check"
}

/// `POST /v1/check`: the guard's rule, then the handler's steps.
async fn check<B>(state: AppState, request: Request<B>) -> Response
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<axum::BoxError>,
{
    match checked(&state, request).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn checked<B>(state: &AppState, request: Request<B>) -> Result<Response, ApiError>
where
    B: http_body::Body<Data = Bytes>,
    B::Error: Into<axum::BoxError>,
{
    // One configuration snapshot for the token and the decision (the router's path loads
    // it twice, in the guard and in the handler).
    let runtime = state.current();
    crate::app::authorize(&runtime, request.headers())?;
    api::check::require_json(request.headers())?;
    let body = api::check::read_body(request.into_body()).await?;
    api::check::answer(state, &runtime, &body).await
}
