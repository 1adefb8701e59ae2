//! `GET /openapi.json`, generated from the handlers and their types.

use axum::Json;
use axum::extract::State;
use sluicegate_middleware::ClientIpHeader;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::{Modify, OpenApi};

use super::types::{
    BatchBody, BatchEntry, BatchResponse, CheckBody, CheckResponse, Health, PoliciesResponse,
    PolicyInfo, PolicyNames, PolicyResult, ReleaseBody, SettleBody,
};

use crate::config::ForwardAuthSource;
use crate::state::AppState;

/// The decision API's OpenAPI 3 description.
#[derive(OpenApi)]
#[openapi(
    info(title = "Sluicegate decision API", description = "Rate-limit decisions, admin and health endpoints of the sluicegate server."),
    paths(
        super::check::check,
        super::settle::settle,
        super::settle::release,
        super::limits::get_limit,
        super::limits::delete_limit,
        super::overrides::put_override,
        super::overrides::get_override,
        super::overrides::delete_override,
        super::policies::list_policies,
        super::health::healthz,
        super::health::readyz,
        crate::forward_auth::forward_auth,
    ),
    components(schemas(
        CheckBody, SettleBody, ReleaseBody, BatchBody, PolicyNames, CheckResponse, PolicyResult, BatchResponse, BatchEntry,
        PoliciesResponse, PolicyInfo, Health, super::ErrorBody, super::overrides::OverrideBody
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

/// The spec as JSON, describing this server as configured: forward-auth's parameters are
/// the header pair `server.forward_auth_source` names and the `server.client_ip_header`.
#[utoipa::path(get, path = "/openapi.json", tag = "meta",
    responses((status = 200, description = "This API's OpenAPI 3 description")))]
pub async fn openapi_json(State(state): State<AppState>) -> Json<serde_json::Value> {
    let mut doc = ApiDoc::openapi();
    let server = &state.runtime().config.server;
    let renames: [(&str, &str); 3] = match server.forward_auth_source {
        ForwardAuthSource::XOriginal => [
            ("X-Original-URI", "X-Original-URI"),
            ("X-Original-Method", "X-Original-Method"),
            ("X-Forwarded-For", client_ip_header(server.client_ip_header)),
        ],
        ForwardAuthSource::XForwarded => [
            ("X-Original-URI", "X-Forwarded-Uri"),
            ("X-Original-Method", "X-Forwarded-Method"),
            ("X-Forwarded-For", client_ip_header(server.client_ip_header)),
        ],
    };
    if let Some(item) = doc.paths.paths.get_mut("/v1/forward-auth") {
        let operations = [
            &mut item.get,
            &mut item.post,
            &mut item.put,
            &mut item.delete,
            &mut item.options,
            &mut item.head,
            &mut item.patch,
            &mut item.trace,
        ];
        for operation in operations.into_iter().flatten() {
            for parameter in operation.parameters.iter_mut().flatten() {
                if let Some((_, to)) = renames.iter().find(|(from, _)| parameter.name == *from) {
                    parameter.name = (*to).to_owned();
                }
            }
        }
    }
    let mut json = serde_json::to_value(doc).unwrap_or_default();
    add_conditions(&mut json);
    Json(json)
}

/// Rules between fields that utoipa's derive cannot write: a `reserve` asks for a cost of at
/// least 1 (a reservation of nothing would let its settle charge nothing). JSON Schema's
/// `if`/`then`, so that a client (and schemathesis) knows the request before sending it.
fn add_conditions(json: &mut serde_json::Value) {
    if let Some(check) = json.pointer_mut("/components/schemas/CheckBody")
        && let Some(check) = check.as_object_mut()
    {
        check.insert(
            "if".into(),
            serde_json::json!({"properties": {"reserve": {"const": true}}, "required": ["reserve"]}),
        );
        check.insert(
            "then".into(),
            serde_json::json!({"properties": {"cost": {"minimum": 1}}}),
        );
    }
}

fn client_ip_header(header: ClientIpHeader) -> &'static str {
    match header {
        ClientIpHeader::XForwardedFor => "X-Forwarded-For",
        ClientIpHeader::Forwarded => "Forwarded",
        ClientIpHeader::XRealIp => "X-Real-IP",
    }
}
