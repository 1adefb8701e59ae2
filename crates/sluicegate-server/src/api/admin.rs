//! The admin token check for mutating endpoints.
//!
//! No `admin_token` configured: 403 `admin_disabled`. No or malformed `Authorization`
//! header: 401 `unauthorized` (with `WWW-Authenticate: Bearer`). A wrong token: 403
//! `forbidden`. Tokens are compared in constant time.

use axum::http::{HeaderMap, StatusCode, header};
use subtle::ConstantTimeEq;

use super::ApiError;

/// Checks `Authorization: Bearer <token>` against the configured token.
pub fn authorize(configured: Option<&str>, headers: &HeaderMap) -> Result<(), ApiError> {
    let Some(expected) = configured else {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "admin_disabled",
            "admin endpoints are disabled: set server.admin_token to enable them",
        ));
    };
    let presented = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| {
            let (scheme, token) = v.trim().split_once(' ')?;
            scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
        });
    let Some(token) = presented else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "this endpoint needs Authorization: Bearer <admin_token>",
        ));
    };
    if bool::from(token.as_bytes().ct_eq(expected.as_bytes())) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "wrong admin token",
        ))
    }
}
