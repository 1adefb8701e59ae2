//! The API's error JSON, `{"error": "<code>", "message": "<human text>"}`, and the mapping
//! of axum's own rejections onto it, so no bad request ever gets plain text or a 500.

use axum::Json;
use axum::extract::rejection::{JsonRejection, PathRejection};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use sluicegate_core::StoreError;
use utoipa::ToSchema;

/// The body of every API error.
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ErrorBody {
    /// A stable code: `invalid_request`, `unknown_policy`, `unauthorized`, `forbidden`,
    /// `admin_disabled`, `payload_too_large`, `not_found`, `method_not_allowed`,
    /// `store_unavailable`.
    pub error: &'static str,
    /// A human explanation.
    pub message: String,
}

/// An error answer of the API.
#[derive(Debug, Clone)]
pub struct ApiError {
    /// The HTTP status.
    pub status: StatusCode,
    /// The body.
    pub body: ErrorBody,
}

impl ApiError {
    /// An error with this status, code and message.
    pub fn new(status: StatusCode, error: &'static str, message: impl Into<String>) -> Self {
        ApiError {
            status,
            body: ErrorBody {
                error,
                message: message.into(),
            },
        }
    }

    /// 400 `invalid_request`.
    pub fn invalid(message: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, "invalid_request", message)
    }

    /// 404 `unknown_policy`.
    pub fn unknown_policy(name: &str) -> Self {
        Self::new(
            StatusCode::NOT_FOUND,
            "unknown_policy",
            format!("no policy named {name:?} is loaded (see GET /v1/policies)"),
        )
    }

    /// 413 `payload_too_large`.
    pub fn too_large() -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload_too_large",
            format!("request body over {} bytes", super::MAX_BODY),
        )
    }

    /// A store error: the caller's fault (400), an outage (503), or an error of the
    /// configuration or the code (500). The store's own text stays in the log.
    pub fn from_store(e: &StoreError) -> Self {
        if e.is_bad_request() {
            Self::invalid(e.to_string())
        } else if e.is_outage() {
            Self::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "store_unavailable",
                "the rate-limit store is unavailable",
            )
        } else {
            Self::new(
                StatusCode::INTERNAL_SERVER_ERROR,
                "internal_error",
                "the rate-limit store could not decide this request; see the server log",
            )
        }
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let unauthorized = self.status == StatusCode::UNAUTHORIZED;
        let mut response = (self.status, Json(self.body)).into_response();
        if unauthorized {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        response
    }
}

impl From<JsonRejection> for ApiError {
    fn from(rejection: JsonRejection) -> Self {
        match rejection {
            JsonRejection::BytesRejection(_)
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE =>
            {
                Self::too_large()
            }
            JsonRejection::MissingJsonContentType(_) => {
                Self::invalid("expected Content-Type: application/json")
            }
            other => Self::invalid(other.body_text()),
        }
    }
}

impl From<PathRejection> for ApiError {
    fn from(rejection: PathRejection) -> Self {
        Self::invalid(rejection.body_text())
    }
}

/// The JSON 404 for paths the API does not have.
pub async fn not_found() -> ApiError {
    ApiError::new(StatusCode::NOT_FOUND, "not_found", "no such endpoint")
}
