//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` over any [`Store`].
//!
//! One request, every descriptor, one atomic step: each matched descriptor becomes one
//! [`KeyedCheck`] per policy of its rule (key = domain + entries, cost = its hits), and the
//! whole list goes to [`Store::check_keyed`], so a descriptor over its limit leaves every
//! other descriptor's state untouched. Every key of a request is placed by its domain, so on
//! Redis Cluster the request's keys share one hash slot and the step stays one script call.
//!
//! Quota mode adds rounds only when a quota descriptor is over while another has room: the
//! over ones are left out and the store is asked again (each round atomic, at most one
//! round per quota descriptor), so a denial still consumes nothing.
//!
//! The steps that need no store live in [`crate::decide`]; this module chains them, calls
//! the store, and renders the answer.

use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::Code;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService as RateLimitServiceApi, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::{ListValue, Struct, Value, value::Kind};
use sluicegate_core::{
    Clock, Decider, KeyedCheck, PolicyDecision, Store, StoreError, SystemClock, Verdict,
    VerdictObserver,
};
use tonic::{Request, Response, Status};

use crate::config::{EnvoyConfig, SharedConfig};
use crate::decide::{self, Item, Lookup, Plan};
use crate::headers::{self, HeaderSet};
use crate::metrics;
use crate::tree::RuleKind;

pub use crate::decide::MAX_DESCRIPTORS;

/// The rate limit service: a store, the Envoy configuration, and how to answer.
///
/// ```
/// use std::sync::Arc;
/// use sluicegate_core::MemoryStore;
/// use sluicegate_envoy::{EnvoyConfig, RateLimitService, SharedConfig};
/// let config = EnvoyConfig::from_yaml_str("domain: api\n", None).unwrap();
/// let service = RateLimitService::new(Arc::new(MemoryStore::new(10_000)), SharedConfig::new(config));
/// let _grpc = service.into_server(); // mount on a tonic Server, or use `sluicegate_envoy::serve`
/// ```
#[derive(Clone)]
pub struct RateLimitService {
    decider: Decider,
    config: SharedConfig,
    headers: Vec<HeaderSet>,
}

impl std::fmt::Debug for RateLimitService {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RateLimitService")
            .field("decider", &self.decider)
            .field("headers", &self.headers)
            .finish_non_exhaustive()
    }
}

impl RateLimitService {
    /// A service answering from `store` by `config`, sending the default header sets
    /// (`draft-6` and `ietf`).
    pub fn new(store: Arc<dyn Store>, config: SharedConfig) -> Self {
        RateLimitService {
            decider: Decider::new(store),
            config,
            headers: HeaderSet::DEFAULT.to_vec(),
        }
    }

    /// Which header sets go into `response_headers_to_add` (`server.headers`).
    pub fn with_headers(mut self, headers: Vec<HeaderSet>) -> Self {
        self.headers = headers;
        self
    }

    /// Who sees each descriptor's verdict (metrics per policy, the dashboard's top keys).
    pub fn with_observer(mut self, observer: Arc<dyn VerdictObserver>) -> Self {
        self.decider = self.decider.with_observer(observer);
        self
    }

    /// Decides through `decider` (the server's: its store, timeout and observer).
    pub fn with_decider(mut self, decider: Decider) -> Self {
        self.decider = decider;
        self
    }

    /// The configuration handle, for reloads.
    pub fn config(&self) -> &SharedConfig {
        &self.config
    }

    /// The tonic service to mount.
    pub fn into_server(self) -> RateLimitServiceServer<Self> {
        RateLimitServiceServer::new(self)
    }

    /// Decides one request. Errors: `INVALID_ARGUMENT` for an empty domain, an empty
    /// descriptor list or more than [`MAX_DESCRIPTORS`], `UNAVAILABLE` when the store fails
    /// (Envoy's `failure_mode_deny` decides).
    pub async fn decide(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
        decide::check_request(request).map_err(|e| {
            metrics::record_error("invalid");
            Status::invalid_argument(e.to_string())
        })?;
        let config = self.config.get();
        let domain = request.domain.as_str();
        let mut lookups = decide::match_descriptors(&config, &self.config, request);
        decide::drop_replaced(&mut lookups);
        let mut plan = decide::plan(&mut lookups);
        let mut allowed = self.consume(domain, &mut plan).await?;
        // Upstream's SHADOW_MODE: a request some limit would have refused is counted, then
        // answered OK. Its YAML limits are shadow policies, so the store admits and the
        // would-be refusal shows in their decisions; a native rule refuses outright.
        if config.options().shadow && (!allowed || decide::shadow_refused(&lookups, &plan.items)) {
            metrics::record_global_shadow(domain);
            allowed = true;
        }
        let response = self.respond(&config, domain, &lookups, &plan.items, allowed);
        self.refund_negative(domain, &lookups).await;
        Ok(response)
    }

    /// Step 5: the store calls. Returns whether the request is admitted (and consumed).
    async fn consume(&self, domain: &str, plan: &mut Plan) -> Result<bool, Status> {
        if plan.items.is_empty() {
            return Ok(!plan.blocked);
        }
        let read_only = plan.refused_up_front();
        // Each round leaves out at least one more quota item, or ends.
        for _ in 0..=plan.items.len() {
            let verdict = self.check(domain, &plan.items, read_only).await?;
            for (item, decision) in plan.items.iter_mut().zip(verdict.decisions) {
                item.decision = Some(decision);
            }
            let over_before = plan.items.iter().filter(|i| i.over).count();
            let outcome = if read_only {
                Some(false)
            } else if verdict.allowed {
                Some(true)
            } else if decide::after_denial(&mut plan.items)
                || plan.items.iter().filter(|i| i.over).count() == over_before
            {
                Some(false)
            } else {
                None
            };
            if let Some(allowed) = outcome {
                decide::settle(&mut plan.items);
                return Ok(allowed);
            }
        }
        decide::settle(&mut plan.items);
        Ok(false)
    }

    /// One atomic store call over every item; items already over are read at cost 0.
    async fn check(
        &self,
        domain: &str,
        items: &[Item],
        read_only: bool,
    ) -> Result<Verdict, Status> {
        let checks: Vec<KeyedCheck<'_>> = items
            .iter()
            .map(|item| {
                let cost = if read_only || item.over { 0 } else { item.cost };
                // One placement per domain: on Redis Cluster every key of a request
                // lives in one slot, so the request stays one atomic script call.
                KeyedCheck::new(&item.policy, &item.key, cost).placed(domain)
            })
            .collect();
        let decided = self
            .decider
            .check_keyed(&checks)
            .await
            .map_err(|error| store_status(&error))?;
        // Envoy's own `failure_mode_deny` decides a failed store, as upstream leaves it.
        match decided.failure {
            Some(error) => Err(store_status(&error)),
            None => Ok(decided.verdict),
        }
    }

    /// Steps 6 and 7: statuses, metrics, headers, body and dynamic metadata.
    fn respond(
        &self,
        config: &EnvoyConfig,
        domain: &str,
        lookups: &[Lookup],
        items: &[Item],
        allowed: bool,
    ) -> RateLimitResponse {
        let now = SystemClock.now();
        let mut response = RateLimitResponse {
            overall_code: if allowed { Code::Ok } else { Code::OverLimit } as i32,
            ..Default::default()
        };
        for (lookup, (status, outcome)) in lookups
            .iter()
            .zip(decide::statuses(lookups, items, allowed, now))
        {
            if let Some(outcome) = outcome {
                metrics::record(domain, &lookup.label, outcome);
            }
            response.statuses.push(status);
        }
        let verdict = self.observe(lookups, items, allowed);
        let block_reset = lookups
            .iter()
            .filter_map(|s| s.rule.as_deref())
            .find_map(|rule| match rule.kind {
                RuleKind::Block(window) if !rule.shadow => Some(decide::window_left(window, now)),
                _ => None,
            });
        let rendered = headers::render(&verdict, &self.headers, block_reset);
        response.response_headers_to_add = rendered.headers;
        response.raw_body = rendered.body;
        if config.options().dynamic_metadata {
            response.dynamic_metadata = dynamic_metadata(lookups);
        }
        response
    }

    /// Tells the observer each descriptor's verdict; returns the request's verdict over every
    /// policy decided (each policy once), for the headers.
    fn observe(&self, lookups: &[Lookup], items: &[Item], allowed: bool) -> Verdict {
        let mut all: Vec<PolicyDecision> = Vec::new();
        for lookup in lookups {
            let decisions: Vec<PolicyDecision> = lookup
                .items
                .iter()
                .filter_map(|&i| items[i].decision.clone())
                .collect();
            if decisions.is_empty() {
                continue;
            }
            let verdict = Verdict {
                allowed,
                delay: 0,
                decisions: decisions.into(),
                at: 0,
            };
            self.decider.observe(&lookup.key, &verdict);
            for d in verdict.decisions {
                if !all.iter().any(|o| o.policy.name() == d.policy.name()) {
                    all.push(d);
                }
            }
        }
        Verdict {
            allowed,
            delay: 0,
            decisions: all.into(),
            at: 0,
        }
    }

    /// `is_negative_hits` descriptors give their hits back to their rule's policies.
    async fn refund_negative(&self, domain: &str, lookups: &[Lookup]) {
        for lookup in lookups.iter().filter(|s| s.negative) {
            if let Some(RuleKind::Limit(policies)) = lookup.rule.as_ref().map(|r| &r.kind) {
                let items: Vec<KeyedCheck<'_>> = policies
                    .iter()
                    .map(|p| KeyedCheck::new(p, &lookup.key, lookup.cost).placed(domain))
                    .collect();
                if let Err(error) = self.decider.store().refund_keyed(&items).await {
                    tracing::warn!(%error, "could not apply negative hits");
                }
            }
        }
    }
}

#[tonic::async_trait]
impl RateLimitServiceApi for RateLimitService {
    async fn should_rate_limit(
        &self,
        request: Request<RateLimitRequest>,
    ) -> Result<Response<RateLimitResponse>, Status> {
        self.decide(request.get_ref()).await.map(Response::new)
    }
}

fn store_status(error: &StoreError) -> Status {
    if error.is_bad_request() {
        metrics::record_error("invalid");
        Status::invalid_argument(error.to_string())
    } else if error.is_outage() {
        metrics::record_error("store_error");
        Status::unavailable("the rate-limit store is unavailable")
    } else {
        // An error of the configuration or the code: never an outage (Envoy's
        // failure_mode_deny must not turn it into an admission without the operator knowing).
        metrics::record_error("internal");
        tracing::error!(%error, "store could not decide; answering INTERNAL");
        Status::internal("the rate-limit store could not decide this request")
    }
}

/// The `metadata` of every rule that applied, merged into one struct (a key set by an
/// earlier descriptor wins); `None` when no rule has any.
fn dynamic_metadata(lookups: &[Lookup]) -> Option<Struct> {
    let mut merged = Struct::default();
    for metadata in lookups
        .iter()
        .filter_map(|s| s.rule.as_ref()?.metadata.as_ref())
    {
        for (key, value) in metadata.iter() {
            merged
                .fields
                .entry(key.clone())
                .or_insert_with(|| to_pb(value));
        }
    }
    (!merged.fields.is_empty()).then_some(merged)
}

/// A JSON value as a `google.protobuf.Value`.
fn to_pb(value: &serde_json::Value) -> Value {
    let kind = match value {
        serde_json::Value::Null => Kind::NullValue(0),
        serde_json::Value::Bool(b) => Kind::BoolValue(*b),
        serde_json::Value::Number(n) => Kind::NumberValue(n.as_f64().unwrap_or(0.0)),
        serde_json::Value::String(s) => Kind::StringValue(s.clone()),
        serde_json::Value::Array(list) => Kind::ListValue(ListValue {
            values: list.iter().map(to_pb).collect(),
        }),
        serde_json::Value::Object(map) => Kind::StructValue(Struct {
            fields: map.iter().map(|(k, v)| (k.clone(), to_pb(v))).collect(),
        }),
    };
    Value { kind: Some(kind) }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_becomes_a_protobuf_struct() {
        let json: serde_json::Value =
            serde_json::json!({"name": "svc", "n": 2, "nested": {"ok": true}, "list": [null]});
        let Some(Kind::StructValue(s)) = to_pb(&json).kind else {
            panic!("a struct");
        };
        assert_eq!(s.fields["name"].kind, Some(Kind::StringValue("svc".into())));
        assert_eq!(s.fields["n"].kind, Some(Kind::NumberValue(2.0)));
        assert!(matches!(
            s.fields["nested"].kind,
            Some(Kind::StructValue(_))
        ));
        assert!(matches!(s.fields["list"].kind, Some(Kind::ListValue(_))));
    }
}
