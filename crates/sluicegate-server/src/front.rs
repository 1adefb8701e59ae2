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
//!
//! On the listener the same steps first run on the lean HTTP/1.1 path ([`crate::h1`]): a
//! plain `POST /v1/check` is answered from the request's bytes, its response written as
//! bytes (the rate-limit headers as field lines, [`crate::header_lines`]), with no hyper
//! `Request`, `Response` or `HeaderMap`; any other request on the connection, and every one
//! after it, is hyper's and comes to [`Front::serve`] as before.

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

use crate::api::check::Answered;
use crate::api::{self, ApiError};
use crate::h1;
use crate::state::{AppState, Runtime};

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

/// The lean path of the API listener: a plain `POST /v1/check` with its body within the
/// 64 KiB bound (a larger one is hyper's, which answers 413 as before).
impl h1::Handler for Front {
    /// Every answer is whole: no tail.
    type Body = http_body_util::Empty<Bytes>;

    fn accepts(&self, head: &h1::Head<'_>) -> bool {
        head.method() == "POST"
            && head.path() == "/v1/check"
            && head.content_length() <= api::MAX_BODY as u64
    }

    async fn answer<'a>(
        &'a self,
        request: h1::Request<'a>,
        out: &'a mut Vec<u8>,
    ) -> Option<h1::Tail<Self::Body>> {
        // The steps of `checked`, in its order, on the request's bytes.
        let runtime = self.state.current();
        let head = request.head;
        let decided = async {
            crate::app::authorize_value(&runtime, head.field("authorization"))?;
            api::check::require_json_value(head.field("content-type"))?;
            api::check::decided(&self.state, &runtime, request.body).await
        };
        match decided.await {
            Ok(Answered::Plain {
                verdict,
                policy_field,
                json,
            }) => write_plain(out, &runtime, &verdict, policy_field, &json),
            Ok(Answered::Full(response)) => write_full(out, response).await,
            Err(e) => write_full(out, e.into_response()).await,
        }
        None
    }
}

/// The common answer as hyper would send the response `api::check::answer` builds for it:
/// `content-type`, the rate-limit fields, `content-length`, `date`, the JSON.
fn write_plain(
    out: &mut Vec<u8>,
    runtime: &Runtime,
    verdict: &sluicegate_core::Verdict,
    policy_field: Option<&http::HeaderValue>,
    json: &[u8],
) {
    out.extend_from_slice(b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n");
    let field = policy_field.map(http::HeaderValue::as_bytes);
    crate::header_lines::write_lines(&runtime.header_sets, verdict, field, out);
    out.extend_from_slice(b"content-length: ");
    out.extend_from_slice(itoa::Buffer::new().format(json.len()).as_bytes());
    out.extend_from_slice(b"\r\n");
    h1::date(out);
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(json);
}

/// Any other answer (an error, a batch, an answer with a lease or reservation), written
/// from its response. Their bodies are whole (`Full`): collecting one does not wait.
pub(crate) async fn write_full(out: &mut Vec<u8>, response: Response) {
    let (parts, body) = response.into_parts();
    match axum::body::to_bytes(body, usize::MAX).await {
        Ok(body) => h1::write_response(out, parts.status, &parts.headers, &body),
        Err(e) => {
            tracing::error!(error = %e, "an answer's body could not be read");
            let failed = http::StatusCode::INTERNAL_SERVER_ERROR;
            h1::write_response(out, failed, &http::HeaderMap::new(), b"");
        }
    }
}
