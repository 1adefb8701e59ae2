//! `GET /openapi.json`, generated from the handlers and their types.

use axum::Json;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::types::{
    BatchBody, BatchEntry, BatchResponse, CheckBody, CheckResponse, Health, PoliciesResponse,
    PolicyInfo, PolicyNames, PolicyResult,
};

/// The decision API's OpenAPI 3 description.
#[derive(OpenApi)]
#[openapi(
    info(title = "Sluicegate decision API", description = "Rate-limit decisions, admin and health endpoints of the sluicegate server."),
    paths(
        super::check::check,
        super::limits::get_limit,
        super::limits::delete_limit,
        super::policies::list_policies,
        super::health::healthz,
        super::health::readyz,
        crate::forward_auth::forward_auth,
    ),
    components(schemas(
        CheckBody, BatchBody, PolicyNames, CheckResponse, PolicyResult, BatchResponse, BatchEntry,
        PoliciesResponse, PolicyInfo, Health, super::ErrorBody
    )),
    modifiers(&AdminToken),
)]
pub struct ApiDoc;

struct AdminToken;

impl Modify for AdminToken {
    fn modify(&self, openapi: &mut utoipa::openapi::OpenApi) {
        let components = openapi.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "admin_token",
            SecurityScheme::Http(HttpBuilder::new().scheme(HttpAuthScheme::Bearer).build()),
        );
    }
}

/// The spec as JSON.
#[utoipa::path(get, path = "/openapi.json", tag = "meta",
    responses((status = 200, description = "This API's OpenAPI 3 description")))]
pub async fn openapi_json() -> Json<utoipa::openapi::OpenApi> {
    Json(ApiDoc::openapi())
}
