//! The steps of one `ShouldRateLimit` decision that need no store, each a function of its
//! inputs: [`check_request`] → [`match_descriptors`] → [`drop_replaced`] → [`plan`] → (the
//! store call, in [`crate::service`]) → [`statuses`]. The service chains them.

use std::collections::HashSet;
use std::sync::Arc;

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::RateLimitDescriptor;
use envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::rate_limit::Unit as PbUnit;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
    Code, DescriptorStatus, RateLimit,
};
use envoy_types::pb::google::protobuf::Duration as PbDuration;
use sluicegate_core::{Outcome, Policy, PolicyDecision};

use crate::config::{EnvoyConfig, SharedConfig};
use crate::key::counter_key;
use crate::metrics::{self, DescriptorOutcome};
use crate::tree::{Rule, RuleKind};
use crate::yaml::{Unit, Window};

/// Most descriptors one request may carry; more is `INVALID_ARGUMENT` (Envoy sends one per
/// `rate_limits` entry of a route, a handful in practice).
pub const MAX_DESCRIPTORS: usize = 1024;

/// Why a request cannot be decided at all (answered `INVALID_ARGUMENT`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// No domain.
    #[error("rate limit domain must not be empty")]
    EmptyDomain,
    /// No descriptor.
    #[error("rate limit descriptor list must not be empty")]
    NoDescriptor,
    /// More than [`MAX_DESCRIPTORS`].
    #[error("at most {MAX_DESCRIPTORS} descriptors per request")]
    TooManyDescriptors,
}

/// Step 1: what makes a request undecidable.
pub fn check_request(request: &RateLimitRequest) -> Result<(), RequestError> {
    if request.domain.is_empty() {
        return Err(RequestError::EmptyDomain);
    }
    match request.descriptors.len() {
        0 => Err(RequestError::NoDescriptor),
        n if n > MAX_DESCRIPTORS => Err(RequestError::TooManyDescriptors),
        _ => Ok(()),
    }
}

/// One request descriptor on its way through a decision.
#[derive(Debug, Clone)]
pub struct Lookup {
    /// The rule that applies; `None` when none matched or it was replaced.
    pub rule: Option<Arc<Rule>>,
    /// The metric label of the match.
    pub label: String,
    /// The store key of its counter.
    pub key: String,
    /// Its hits.
    pub cost: u64,
    /// `is_negative_hits`: give the hits back instead of taking them.
    pub negative: bool,
    /// Indexes into [`Plan::items`], one per policy of the rule.
    pub items: Vec<usize>,
}

/// Step 2: the rule, key and cost of every descriptor. A descriptor's own `limit` (Envoy's
/// override) wins over the configuration in a known domain, as upstream does.
pub fn match_descriptors(
    config: &EnvoyConfig,
    shared: &SharedConfig,
    request: &RateLimitRequest,
) -> Vec<Lookup> {
    let domain = request.domain.as_str();
    let default_cost = match request.hits_addend {
        0 => 1,
        n => u64::from(n),
    };
    request
        .descriptors
        .iter()
        .map(|d| {
            let cost = d.hits_addend.as_ref().map_or(default_cost, |h| h.value);
            let mut lookup = Lookup {
                rule: None,
                label: String::new(),
                key: String::new(),
                cost,
                negative: d.is_negative_hits,
                items: Vec::new(),
            };
            if config.has_domain(domain) {
                match_one(config, shared, domain, d, &mut lookup);
            }
            lookup
        })
        .collect()
}

fn match_one(
    config: &EnvoyConfig,
    shared: &SharedConfig,
    domain: &str,
    descriptor: &RateLimitDescriptor,
    lookup: &mut Lookup,
) {
    let entries: Vec<(&str, &str)> = descriptor
        .entries
        .iter()
        .map(|e| (e.key.as_str(), e.value.as_str()))
        .collect();
    if entries.is_empty() {
        return;
    }
    if let Some(rule) = descriptor
        .limit
        .as_ref()
        .and_then(|l| override_rule(shared, domain, &entries, l.requests_per_unit, l.unit))
    {
        lookup.label = rule.path.clone();
        lookup.key = crate::key::descriptor_key(domain, &entries);
        lookup.rule = Some(rule);
        return;
    }
    if let Some(found) = config.find(domain, &entries) {
        let parts: Vec<_> = entries
            .iter()
            .zip(&found.counter)
            .map(|(&(key, _), &part)| (key, part))
            .collect();
        lookup.key = counter_key(domain, &parts);
        lookup.label = found.label;
        lookup.rule = Some(Arc::clone(found.rule));
    }
}

/// The rule of a descriptor's `limit` override; `None` for a unit Envoy left unknown.
fn override_rule(
    shared: &SharedConfig,
    domain: &str,
    entries: &[(&str, &str)],
    requests_per_unit: u32,
    unit: i32,
) -> Option<Arc<Rule>> {
    let unit = from_pb_unit(PbUnit::try_from(unit).ok()?)?;
    let window = Window::of(unit);
    let kind = if requests_per_unit == 0 {
        RuleKind::Block(window)
    } else {
        RuleKind::Limit(vec![shared.override_policy(
            domain,
            requests_per_unit,
            window,
        )?])
    };
    // The label is upstream's stat key of an override: the entries as `key_value`.
    let path = entries
        .iter()
        .map(|(k, v)| {
            if v.is_empty() {
                (*k).to_owned()
            } else {
                format!("{k}_{v}")
            }
        })
        .collect::<Vec<_>>()
        .join(".");
    Some(Arc::new(Rule {
        path,
        kind,
        name: None,
        replaces: Vec::new(),
        shadow: false,
        quota: false,
        detailed_metric: false,
        metadata: None,
    }))
}

/// Step 3: `replaces`: a matched rule drops every other matched rule it names.
pub fn drop_replaced(lookups: &mut [Lookup]) {
    let replaced: HashSet<String> = lookups
        .iter()
        .filter_map(|s| s.rule.as_ref())
        .flat_map(|r| r.replaces.iter().cloned())
        .collect();
    if replaced.is_empty() {
        return;
    }
    for lookup in lookups {
        let named = lookup.rule.as_ref().and_then(|r| r.name.as_deref());
        if named.is_some_and(|n| replaced.contains(n)) {
            lookup.rule = None;
        }
    }
}

/// One `(policy, key)` to check, with the summed cost of every descriptor that names it.
#[derive(Debug, Clone)]
pub struct Item {
    /// The policy.
    pub policy: Arc<Policy>,
    /// The key of its state.
    pub key: String,
    /// The hits to take.
    pub cost: u64,
    /// Of a quota-mode rule: over it, the request may still go ahead.
    pub quota: bool,
    /// Over it already: excluded from consuming (a cost above capacity, or a quota item a
    /// previous store call found over).
    pub over: bool,
    /// What the store said.
    pub decision: Option<PolicyDecision>,
}

impl Item {
    /// Whether a denial of this item refuses the request.
    pub fn enforcing(&self) -> bool {
        self.policy.is_enforcing()
    }
}

/// What the store is asked: every item, and whether the request is refused before asking.
#[derive(Debug, Clone, Default)]
pub struct Plan {
    /// The `(policy, key)` pairs, identical ones merged.
    pub items: Vec<Item>,
    /// A non-shadow `requests_per_unit: 0` rule matched: refused whatever the store says.
    pub blocked: bool,
}

impl Plan {
    /// Whether the request is refused before the store is asked: blocked, or a normal
    /// enforcing item over its capacity (a quota item over capacity only counts as over).
    pub fn refused_up_front(&self) -> bool {
        self.blocked
            || self
                .items
                .iter()
                .any(|i| i.over && i.enforcing() && !i.quota)
    }
}

/// Step 4: one item per `(policy, key)` of the matched rules.
pub fn plan(lookups: &mut [Lookup]) -> Plan {
    let mut plan = Plan::default();
    for lookup in lookups {
        let Some(rule) = lookup.rule.clone() else {
            continue;
        };
        match &rule.kind {
            RuleKind::Limit(policies) if !lookup.negative => {
                for policy in policies {
                    let index = add_item(
                        &mut plan.items,
                        policy,
                        &lookup.key,
                        lookup.cost,
                        rule.quota,
                    );
                    lookup.items.push(index);
                }
            }
            RuleKind::Block(_) if !rule.shadow => plan.blocked = true,
            _ => {}
        }
    }
    // A cost no policy can ever admit is over the limit, as upstream answers it.
    for item in &mut plan.items {
        item.over = item.cost > item.policy.capacity();
    }
    plan
}

/// Adds `(policy, key)` with `cost`, merging with an identical one; returns its index.
/// The same policy under another key is another state, decided in the same store call.
fn add_item(
    items: &mut Vec<Item>,
    policy: &Arc<Policy>,
    key: &str,
    cost: u64,
    quota: bool,
) -> usize {
    if let Some(i) = items
        .iter()
        .position(|it| it.policy.name() == policy.name() && it.key == key)
    {
        items[i].cost = items[i].cost.saturating_add(cost);
        items[i].quota &= quota;
        return i;
    }
    items.push(Item {
        policy: Arc::clone(policy),
        key: key.to_owned(),
        cost,
        quota,
        over: false,
        decision: None,
    });
    items.len() - 1
}

/// After a store call that did not admit: whether the request is over for good (a normal
/// item denied, or every quota item over), else which quota items to leave out next time.
pub fn after_denial(items: &mut [Item]) -> bool {
    let denied =
        |i: &Item| i.enforcing() && i.decision.as_ref().is_some_and(|d| !d.decision.allowed);
    if items.iter().any(|i| !i.quota && denied(i)) {
        return true;
    }
    for item in items.iter_mut() {
        if item.quota && denied(item) {
            item.over = true;
        }
    }
    let quota: Vec<&Item> = items.iter().filter(|i| i.quota && i.enforcing()).collect();
    quota.is_empty() || quota.iter().all(|i| i.over)
}

/// The decision of each item, with those found over marked denied.
pub fn settle(items: &mut [Item]) {
    for item in items.iter_mut().filter(|i| i.over) {
        if let Some(d) = &mut item.decision {
            d.decision.allowed = false;
            d.outcome = Outcome::of(&d.policy, &d.decision);
        }
    }
}

/// Whether a shadow limit would have refused the request: a shadow item the store denied,
/// or a shadow `requests_per_unit: 0` rule matched.
pub fn shadow_refused(lookups: &[Lookup], items: &[Item]) -> bool {
    let denied =
        |i: &Item| !i.enforcing() && i.decision.as_ref().is_some_and(|d| !d.decision.allowed);
    items.iter().any(denied)
        || lookups
            .iter()
            .filter_map(|s| s.rule.as_deref())
            .any(|r| r.shadow && matches!(r.kind, RuleKind::Block(_)))
}

/// Step 6: each descriptor's status and what its metrics count (`None`: nothing matched).
pub fn statuses(
    lookups: &[Lookup],
    items: &[Item],
    allowed: bool,
    now: u64,
) -> Vec<(DescriptorStatus, Option<DescriptorOutcome>)> {
    lookups
        .iter()
        .map(|lookup| status(lookup, items, allowed, now))
        .collect()
}

fn status(
    lookup: &Lookup,
    items: &[Item],
    allowed: bool,
    now: u64,
) -> (DescriptorStatus, Option<DescriptorOutcome>) {
    let ok = |remaining: u32| DescriptorStatus {
        code: Code::Ok as i32,
        limit_remaining: remaining,
        ..Default::default()
    };
    let Some(rule) = lookup.rule.as_deref() else {
        return (ok(0), None);
    };
    if lookup.negative {
        return (ok(0), None);
    }
    let outcome = DescriptorOutcome {
        hits: lookup.cost,
        over_limit: false,
        near_limit: false,
        shadow_denied: false,
    };
    match &rule.kind {
        RuleKind::Unlimited => (ok(u32::MAX), Some(outcome)),
        RuleKind::Block(window) => block_status(rule, *window, now, outcome),
        RuleKind::Limit(_) => limit_status(rule, lookup, items, allowed, outcome),
    }
}

fn block_status(
    rule: &Rule,
    window: Window,
    now: u64,
    mut outcome: DescriptorOutcome,
) -> (DescriptorStatus, Option<DescriptorOutcome>) {
    outcome.over_limit = !rule.shadow;
    outcome.shadow_denied = rule.shadow;
    let code = if rule.shadow {
        Code::Ok
    } else {
        Code::OverLimit
    };
    let status = DescriptorStatus {
        code: code as i32,
        current_limit: Some(RateLimit {
            name: rule.name.clone().unwrap_or_else(|| rule.path.clone()),
            requests_per_unit: 0,
            unit: pb_unit(window.unit) as i32,
        }),
        limit_remaining: 0,
        duration_until_reset: Some(pb_duration(window_left(window, now))),
        ..Default::default()
    };
    (status, Some(outcome))
}

fn limit_status(
    rule: &Rule,
    lookup: &Lookup,
    items: &[Item],
    allowed: bool,
    mut outcome: DescriptorOutcome,
) -> (DescriptorStatus, Option<DescriptorOutcome>) {
    let mine: Vec<&Item> = lookup.items.iter().map(|&i| &items[i]).collect();
    let decided: Vec<&PolicyDecision> = mine.iter().filter_map(|i| i.decision.as_ref()).collect();
    let denied = |d: &&PolicyDecision| !d.decision.allowed;
    let over = mine.iter().any(|i| i.enforcing() && i.over)
        || decided.iter().any(|d| d.is_enforced_denial());
    let deciding = sluicegate_core::verdict::deciding(decided.iter().copied(), !over);
    outcome.over_limit = over;
    outcome.shadow_denied = !over && decided.iter().any(denied);
    outcome.near_limit = allowed
        && !over
        && decided.iter().any(|d| {
            metrics::is_near(
                d.decision.limit.saturating_sub(d.decision.remaining),
                d.decision.limit,
            )
        });
    let code = if over { Code::OverLimit } else { Code::Ok } as i32;
    let status = match deciding {
        Some(d) => DescriptorStatus {
            code,
            current_limit: Some(current_limit(rule, &d.policy, d.decision.limit)),
            limit_remaining: u32::try_from(d.decision.remaining).unwrap_or(u32::MAX),
            duration_until_reset: Some(pb_duration(d.decision.reset_after)),
            ..Default::default()
        },
        // No decision: the store was not asked (the request was refused up front).
        None => DescriptorStatus {
            code,
            ..Default::default()
        },
    };
    (status, Some(outcome))
}

/// `current_limit` for a policy: its numbers (`limit` as decided: a key's override may
/// give it another than the policy's) in the unit equal to its period, or scaled to the
/// smallest unit at least as long (a YAML limit comes back exactly).
fn current_limit(rule: &Rule, policy: &Policy, limit: u64) -> RateLimit {
    let period = policy.period();
    let unit = Unit::ALL
        .into_iter()
        .find(|u| u.seconds() * 1_000_000 >= period)
        .unwrap_or(Unit::Year);
    let unit_micros = u128::from(unit.seconds()) * 1_000_000;
    let per_unit = u128::from(limit) * unit_micros / u128::from(period.max(1));
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

fn from_pb_unit(unit: PbUnit) -> Option<Unit> {
    Some(match unit {
        PbUnit::Unknown => return None,
        PbUnit::Second => Unit::Second,
        PbUnit::Minute => Unit::Minute,
        PbUnit::Hour => Unit::Hour,
        PbUnit::Day => Unit::Day,
        PbUnit::Week => Unit::Week,
        PbUnit::Month => Unit::Month,
        PbUnit::Year => Unit::Year,
    })
}

fn pb_duration(micros: u64) -> PbDuration {
    PbDuration {
        seconds: i64::try_from(micros / 1_000_000).unwrap_or(i64::MAX),
        nanos: i32::try_from((micros % 1_000_000) * 1_000).unwrap_or(0),
    }
}

/// Until the end of the current epoch-aligned window, µs.
pub fn window_left(window: Window, now: u64) -> u64 {
    let length = window.seconds() * 1_000_000;
    length - now % length
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use sluicegate_core::{AlgorithmKind, Decision};

    use super::*;

    fn item(name: &str, quota: bool) -> Item {
        let policy = Policy::builder(name, AlgorithmKind::FixedWindow, 2, Duration::from_secs(60))
            .build()
            .unwrap();
        Item {
            policy: Arc::new(policy),
            key: "k".into(),
            cost: 1,
            quota,
            over: false,
            decision: None,
        }
    }

    fn decide(item: &mut Item, allowed: bool) {
        let decision = if allowed {
            Decision::allow(2, 1, 1)
        } else {
            Decision::deny(2, 0, 1, 1)
        };
        item.decision = Some(PolicyDecision {
            policy: Arc::clone(&item.policy).into(),
            decision,
            outcome: if allowed {
                Outcome::Allowed
            } else {
                Outcome::Denied
            },
        });
    }

    #[test]
    fn a_request_is_over_when_a_normal_item_or_every_quota_item_is() {
        // A normal item denied: over at once.
        let mut items = vec![item("n", false), item("q", true)];
        decide(&mut items[0], false);
        decide(&mut items[1], true);
        assert!(after_denial(&mut items));

        // One of two quota items over: not over; that one is left out next time.
        let mut items = vec![item("n", false), item("q1", true), item("q2", true)];
        decide(&mut items[0], true);
        decide(&mut items[1], false);
        decide(&mut items[2], true);
        assert!(!after_denial(&mut items));
        assert!(items[1].over && !items[2].over);

        // Both quota items over: over.
        decide(&mut items[2], false);
        assert!(after_denial(&mut items));
    }

    #[test]
    fn requests_without_domain_or_descriptors_are_refused() {
        let mut request = RateLimitRequest::default();
        assert_eq!(check_request(&request), Err(RequestError::EmptyDomain));
        request.domain = "d".into();
        assert_eq!(check_request(&request), Err(RequestError::NoDescriptor));
        request.descriptors = vec![RateLimitDescriptor::default(); MAX_DESCRIPTORS + 1];
        assert_eq!(
            check_request(&request),
            Err(RequestError::TooManyDescriptors)
        );
        request.descriptors.truncate(1);
        assert_eq!(check_request(&request), Ok(()));
    }

    #[test]
    fn a_rule_that_replaces_another_drops_it() {
        let config = EnvoyConfig::from_yaml_str(
            "domain: d
descriptors:
  - key: a
    rate_limit: {unit: second, requests_per_unit: 5, name: general}
  - key: b
    rate_limit: {unit: second, requests_per_unit: 9, replaces: [{name: general}]}
",
            None,
        )
        .unwrap();
        let shared = SharedConfig::new(config.clone());
        let request = RateLimitRequest {
            domain: "d".into(),
            descriptors: ["a", "b"]
                .iter()
                .map(|k| RateLimitDescriptor {
                    entries: vec![envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::Entry {
                        key: (*k).into(),
                        value: "x".into(),
                    }],
                    ..Default::default()
                })
                .collect(),
            hits_addend: 0,
        };
        let mut lookups = match_descriptors(&config, &shared, &request);
        drop_replaced(&mut lookups);
        assert!(lookups[0].rule.is_none());
        assert!(lookups[1].rule.is_some());
        let plan = plan(&mut lookups);
        assert_eq!(plan.items.len(), 1);
        assert_eq!(plan.items[0].policy.limit(), 9);
    }
}
