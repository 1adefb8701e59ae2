//! The token checks: the admin token for mutating endpoints, the API token for `/v1/*` and
//! `/dashboard*`.
//!
//! No `admin_token` configured: 403 `admin_disabled`. No or malformed `Authorization`
//! header: 401 `unauthorized` (with `WWW-Authenticate: Bearer`). A wrong token: 403
//! `forbidden`. Tokens are compared in constant time.

use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
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
    let authorization = headers.get(header::AUTHORIZATION);
    let Some(token) = authorization.and_then(|v| bearer(v.as_bytes())) else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "this endpoint needs Authorization: Bearer <admin_token>",
        ));
    };
    if same(token, expected) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "wrong admin token",
        ))
    }
}

/// `server.api_token`: when set, `/v1/*` and `/dashboard*` need it (or the admin token).
/// Without it everything is open, as before the setting existed.
pub fn authorize_api(
    api_token: Option<&str>,
    admin_token: Option<&str>,
    headers: &HeaderMap,
) -> Result<(), ApiError> {
    let authorization = headers.get(header::AUTHORIZATION);
    authorize_api_value(
        api_token,
        admin_token,
        authorization.map(HeaderValue::as_bytes),
    )
}

/// [`authorize_api`] on the `Authorization` value itself (the lean HTTP path has no map).
pub fn authorize_api_value(
    api_token: Option<&str>,
    admin_token: Option<&str>,
    authorization: Option<&[u8]>,
) -> Result<(), ApiError> {
    let Some(expected) = api_token else {
        return Ok(());
    };
    let Some(token) = authorization.and_then(bearer) else {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "this endpoint needs Authorization: Bearer <api_token>",
        ));
    };
    // Both comparisons always run: which token matched must not show in the timing.
    let api = same(token, expected);
    let admin = admin_token.is_some_and(|admin| same(token, admin));
    if api | admin {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "forbidden",
            "wrong API token",
        ))
    }
}

/// The token of `Authorization: Bearer <token>`, if the header has that form.
/// Only a value `HeaderValue::to_str` accepts (visible ASCII and tab) has one.
fn bearer(value: &[u8]) -> Option<&str> {
    if !value
        .iter()
        .all(|&b| b == b'\t' || (0x20..0x7f).contains(&b))
    {
        return None;
    }
    let v = std::str::from_utf8(value).ok()?;
    let (scheme, token) = v.trim().split_once(' ')?;
    scheme.eq_ignore_ascii_case("bearer").then(|| token.trim())
}

/// Constant-time in the contents (the length of the configured token is no secret worth
/// the trouble: `ct_eq` answers at once on a length mismatch).
fn same(presented: &str, expected: &str) -> bool {
    bool::from(presented.as_bytes().ct_eq(expected.as_bytes()))
}
