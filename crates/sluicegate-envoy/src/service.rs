//! `envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit` over any [`Store`].
//!
//! One request, every descriptor, one atomic step: each matched descriptor becomes one
//! [`KeyedCheck`] per policy of its rule (key = domain + entries, cost = its hits), and the
//! whole list goes to [`Store::check_keyed`], so a descriptor over its limit leaves every
//! other descriptor's state untouched. Two descriptors that hit the same rule with
//! different values are two states of one policy in the same step; identical ones are
//! merged, their hits added.

use std::collections::HashSet;
use std::sync::Arc;

use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as PbUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::{
    RateLimitService as RateLimitServiceApi, RateLimitServiceServer,
};
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use sluicegate_core::{
    Clock, Decider, KeyedCheck, Outcome, Policy, PolicyDecision, Store, StoreError, SystemClock,
    Verdict, VerdictObserver,
};
use tonic::{Request, Response, Status};

use crate::config::SharedConfig;
use crate::headers::{self, HeaderSet};
use crate::key::descriptor_key;
use crate::metrics::{self, DescriptorOutcome};
use crate::tree::{Rule, RuleKind};
use crate::yaml::Unit;
use sluicegate_middleware::headers::RejectionBody;

/// Most descriptors one request may carry; more is `INVALID_ARGUMENT` (Envoy sends one per
/// `rate_limits` entry of a route, a handful in practice).
pub const MAX_DESCRIPTORS: usize = 1024;

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

/// One request descriptor on its way through a decision.
struct Slot<'a> {
    rule: Option<&'a Arc<Rule>>,
    label: String,
    key: String,
    cost: u64,
    negative: bool,
    /// Indexes into the item list, one per policy of the rule.
    items: Vec<usize>,
}

/// One `(policy, key)` to check, with the summed cost of every descriptor that names it.
struct Item {
    policy: Arc<Policy>,
    key: String,
    cost: u64,
    decision: Option<PolicyDecision>,
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
    /// descriptor list or more than [`MAX_DESCRIPTORS`], `UNAVAILABLE` when the store fails (Envoy's `failure_mode_deny` decides).
    pub async fn decide(&self, request: &RateLimitRequest) -> Result<RateLimitResponse, Status> {
        if request.domain.is_empty() {
            metrics::record_error("invalid");
            return Err(Status::invalid_argument(
                "rate limit domain must not be empty",
            ));
        }
        if request.descriptors.is_empty() {
            metrics::record_error("invalid");
            return Err(Status::invalid_argument(
                "rate limit descriptor list must not be empty",
            ));
        }
        if request.descriptors.len() > MAX_DESCRIPTORS {
            metrics::record_error("invalid");
            return Err(Status::invalid_argument(format!(
                "at most {MAX_DESCRIPTORS} descriptors per request"
            )));
        }
        let config = self.config.get();
        let domain = request.domain.as_str();
        let default_cost = match request.hits_addend {
            0 => 1,
            n => u64::from(n),
        };

        let mut slots: Vec<Slot<'_>> = request
            .descriptors
            .iter()
            .map(|d| {
                let entries: Vec<(&str, &str)> = d
                    .entries
                    .iter()
                    .map(|e| (e.key.as_str(), e.value.as_str()))
                    .collect();
                let found = if entries.is_empty() {
                    None
                } else {
                    config.find(domain, &entries)
                };
                let cost = d.hits_addend.as_ref().map_or(default_cost, |h| h.value);
                let (rule, label) = match found {
                    Some(m) => (Some(m.rule), m.label.into_owned()),
                    None => (None, String::new()),
                };
                let key = if rule.is_some() {
                    descriptor_key(domain, &entries)
                } else {
                    String::new()
                };
                Slot {
                    rule,
                    label,
                    key,
                    cost,
                    negative: d.is_negative_hits,
                    items: Vec::new(),
                }
            })
            .collect();

        // `replaces`: a matched rule drops every other matched rule it names.
        let replaced: HashSet<&str> = slots
            .iter()
            .filter_map(|s| s.rule)
            .flat_map(|r| r.replaces.iter().map(String::as_str))
            .collect();
        if !replaced.is_empty() {
            for slot in &mut slots {
                if slot
                    .rule
                    .and_then(|r| r.name.as_deref())
                    .is_some_and(|n| replaced.contains(n))
                {
                    slot.rule = None;
                }
            }
        }

        let mut items: Vec<Item> = Vec::new();
        let mut blocked = false;
        for slot in &mut slots {
            let Some(rule) = slot.rule else { continue };
            match &rule.kind {
                RuleKind::Limit(policies) if !slot.negative => {
                    for policy in policies {
                        slot.items
                            .push(add_item(&mut items, policy, &slot.key, slot.cost));
                    }
                }
                RuleKind::Block(_) if !rule.shadow => blocked = true,
                _ => {}
            }
        }
        // A cost no policy can ever admit is over the limit, as upstream answers it.
        let over_capacity: Vec<bool> = items
            .iter()
            .map(|item| item.cost > item.policy.capacity())
            .collect();
        let enforcing_over_capacity = items
            .iter()
            .zip(&over_capacity)
            .any(|(item, over)| *over && item.policy.is_enforcing());
        let read_only = blocked || enforcing_over_capacity;

        let allowed = self.run(&mut items, &over_capacity, read_only).await? && !read_only;

        let now = SystemClock.now();
        let mut response = RateLimitResponse {
            overall_code: if allowed { Code::Ok } else { Code::OverLimit } as i32,
            ..Default::default()
        };
        let mut all_decisions: Vec<PolicyDecision> = Vec::new();
        let mut block_reset: Option<u64> = None;
        for slot in &slots {
            let (status, outcome) = self.slot_status(slot, &items, &over_capacity, allowed, now);
            if let (Some(outcome), Some(_)) = (outcome, slot.rule) {
                metrics::record(domain, &slot.label, outcome);
            }
            if let Some(rule) = slot.rule
                && let RuleKind::Block(unit) = rule.kind
                && !rule.shadow
            {
                block_reset = Some(window_left(unit, now));
            }
            let decisions: Vec<PolicyDecision> = slot
                .items
                .iter()
                .filter_map(|&i| items[i].decision.clone())
                .collect();
            if !decisions.is_empty() {
                let verdict = Verdict {
                    allowed,
                    delay: 0,
                    decisions,
                };
                self.decider.observe(&slot.key, &verdict);
                for d in verdict.decisions {
                    if !all_decisions
                        .iter()
                        .any(|o| o.policy.name() == d.policy.name())
                    {
                        all_decisions.push(d);
                    }
                }
            }
            response.statuses.push(status);
        }

        let verdict = Verdict {
            allowed,
            delay: 0,
            decisions: all_decisions,
        };
        let mut headers = headers::rate_limit_headers(&verdict, &self.headers);
        if !allowed {
            let mut body = RejectionBody::new(&verdict);
            // A `requests_per_unit: 0` rule has no policy: its wait is the window's end.
            if verdict.retry_after().is_none()
                && let Some(left) = block_reset
            {
                body.retry_after_seconds = left.div_ceil(1_000_000).max(1);
                body.message = format!(
                    "Too many requests; retry in {} s.",
                    body.retry_after_seconds
                );
                headers.insert(
                    http::header::RETRY_AFTER,
                    http::HeaderValue::from(body.retry_after_seconds),
                );
            }
            response.raw_body = serde_json::to_vec(&body).unwrap_or_default();
            headers.insert(
                http::header::CONTENT_TYPE,
                http::HeaderValue::from_static("application/json"),
            );
        }
        response.response_headers_to_add = headers::to_envoy(&headers);

        self.refund_negative(&slots).await;
        Ok(response)
    }

    /// Runs the one atomic store step over every item. Returns whether it admitted.
    /// `read_only` checks at cost 0, to report numbers when the request is already refused.
    async fn run(
        &self,
        items: &mut [Item],
        over_capacity: &[bool],
        read_only: bool,
    ) -> Result<bool, Status> {
        // No descriptor matched a limited rule: nothing to ask the store.
        if items.is_empty() {
            return Ok(true);
        }
        let checks: Vec<KeyedCheck<'_>> = items
            .iter()
            .zip(over_capacity)
            .map(|(item, &over)| {
                let cost = if read_only || over { 0 } else { item.cost };
                KeyedCheck::new(&item.policy, &item.key, cost)
            })
            .collect();
        let decided = self
            .decider
            .check_keyed(&checks)
            .await
            .map_err(|error| store_status(&error))?;
        drop(checks);
        // Envoy's own `failure_mode_deny` decides a failed store, as upstream leaves it.
        if let Some(error) = &decided.failure {
            return Err(store_status(error));
        }
        let verdict = decided.verdict;
        let allowed = verdict.allowed;
        // On a denial, `remaining` already has the untaken cost back (Verdict::combine).
        for ((item, mut decision), &over) in
            items.iter_mut().zip(verdict.decisions).zip(over_capacity)
        {
            if over {
                decision.decision.allowed = false;
                decision.outcome = Outcome::of(&decision.policy, &decision.decision);
            }
            item.decision = Some(decision);
        }
        Ok(allowed)
    }

    /// `is_negative_hits` descriptors give their hits back to their rule's policies.
    async fn refund_negative(&self, slots: &[Slot<'_>]) {
        for slot in slots.iter().filter(|s| s.negative) {
            if let Some(RuleKind::Limit(policies)) = slot.rule.map(|r| &r.kind)
                && let Err(error) = self
                    .decider
                    .store()
                    .refund(policies, &slot.key, slot.cost)
                    .await
            {
                tracing::warn!(%error, "could not apply negative hits");
            }
        }
    }

    fn slot_status(
        &self,
        slot: &Slot<'_>,
        items: &[Item],
        over_capacity: &[bool],
        allowed: bool,
        now: u64,
    ) -> (DescriptorStatus, Option<DescriptorOutcome>) {
        let ok = |remaining: u32| DescriptorStatus {
            code: Code::Ok as i32,
            limit_remaining: remaining,
            ..Default::default()
        };
        let Some(rule) = slot.rule else {
            return (ok(0), None);
        };
        let hits = slot.cost;
        let mut outcome = DescriptorOutcome {
            hits,
            over_limit: false,
            near_limit: false,
            shadow_denied: false,
        };
        if slot.negative {
            return (ok(0), None);
        }
        match &rule.kind {
            RuleKind::Unlimited => (ok(u32::MAX), Some(outcome)),
            RuleKind::Block(unit) => {
                outcome.over_limit = !rule.shadow;
                outcome.shadow_denied = rule.shadow;
                let status = DescriptorStatus {
                    code: if rule.shadow {
                        Code::Ok
                    } else {
                        Code::OverLimit
                    } as i32,
                    current_limit: Some(RateLimit {
                        name: rule.name.clone().unwrap_or_else(|| rule.path.clone()),
                        requests_per_unit: 0,
                        unit: pb_unit(*unit) as i32,
                    }),
                    limit_remaining: 0,
                    duration_until_reset: Some(pb_duration(window_left(*unit, now))),
                    ..Default::default()
                };
                (status, Some(outcome))
            }
            RuleKind::Limit(_) => {
                let decided: Vec<&PolicyDecision> = slot
                    .items
                    .iter()
                    .filter_map(|&i| items[i].decision.as_ref())
                    .collect();
                let enforcing_denied = decided.iter().any(|d| d.is_enforced_denial());
                let shadow_denied = decided.iter().any(|d| d.outcome == Outcome::ShadowDenied);
                let over = enforcing_denied
                    || slot
                        .items
                        .iter()
                        .any(|&i| over_capacity[i] && items[i].policy.is_enforcing());
                let deciding = sluicegate_core::verdict::deciding(decided.iter().copied(), !over);
                outcome.over_limit = over;
                outcome.shadow_denied = shadow_denied && !over;
                outcome.near_limit = allowed
                    && !over
                    && decided.iter().any(|d| {
                        metrics::is_near(
                            d.decision.limit.saturating_sub(d.decision.remaining),
                            d.decision.limit,
                        )
                    });
                let status = match deciding {
                    Some(d) => DescriptorStatus {
                        code: if over { Code::OverLimit } else { Code::Ok } as i32,
                        current_limit: Some(current_limit(rule, &d.policy)),
                        limit_remaining: u32::try_from(d.decision.remaining).unwrap_or(u32::MAX),
                        duration_until_reset: Some(pb_duration(d.decision.reset_after)),
                        ..Default::default()
                    },
                    // Not reached: an earlier step denied first.
                    None => DescriptorStatus {
                        code: if over { Code::OverLimit } else { Code::Ok } as i32,
                        ..Default::default()
                    },
                };
                (status, Some(outcome))
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

/// Adds `(policy, key)` with `cost`, merging with an identical one; returns its index.
/// The same policy under another key is another state, decided in the same store call.
fn add_item(items: &mut Vec<Item>, policy: &Arc<Policy>, key: &str, cost: u64) -> usize {
    if let Some(i) = items
        .iter()
        .position(|it| it.policy.name() == policy.name() && it.key == key)
    {
        items[i].cost = items[i].cost.saturating_add(cost);
        return i;
    }
    items.push(Item {
        policy: Arc::clone(policy),
        key: key.to_owned(),
        cost,
        decision: None,
    });
    items.len() - 1
}

fn store_status(error: &StoreError) -> Status {
    if error.is_bad_request() {
        metrics::record_error("invalid");
        Status::invalid_argument(error.to_string())
    } else {
        metrics::record_error("store_error");
        tracing::warn!(%error, "store failed; answering UNAVAILABLE");
        Status::unavailable(error.to_string())
    }
}

/// `current_limit` for a policy: its own numbers in the unit equal to its period, or
/// scaled to the smallest unit at least as long (a YAML limit comes back exactly).
fn current_limit(rule: &Rule, policy: &Policy) -> RateLimit {
    let period = policy.period();
    let unit = Unit::ALL
        .into_iter()
        .find(|u| u.seconds() * 1_000_000 >= period)
        .unwrap_or(Unit::Year);
    let unit_micros = u128::from(unit.seconds()) * 1_000_000;
    let per_unit = u128::from(policy.limit()) * unit_micros / u128::from(period.max(1));
    RateLimit {
        name: rule
            .name
            .clone()
            .unwrap_or_else(|| policy.name().to_owned()),
        requests_per_unit: u32::try_from(per_unit).unwrap_or(u32::MAX),
        unit: pb_unit(unit) as i32,
    }
}

fn pb_unit(unit: Unit) -> PbUnit {
    match unit {
        Unit::Second => PbUnit::Second,
        Unit::Minute => PbUnit::Minute,
        Unit::Hour => PbUnit::Hour,
        Unit::Day => PbUnit::Day,
        Unit::Week => PbUnit::Week,
        Unit::Month => PbUnit::Month,
        Unit::Year => PbUnit::Year,
    }
}

fn pb_duration(micros: u64) -> PbDuration {
    PbDuration {
        seconds: i64::try_from(micros / 1_000_000).unwrap_or(i64::MAX),
        nanos: i32::try_from((micros % 1_000_000) * 1_000).unwrap_or(0),
    }
}

/// Until the end of the current epoch-aligned window of `unit`, µs.
fn window_left(unit: Unit, now: u64) -> u64 {
    let length = unit.seconds() * 1_000_000;
    length - now % length
}
