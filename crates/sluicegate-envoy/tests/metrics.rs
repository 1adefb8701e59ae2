//! The per-domain, per-descriptor counters, read back from a Prometheus recorder.

use std::sync::Arc;

use metrics_exporter_prometheus::PrometheusBuilder;
use sluicegate_core::MemoryStore;
use sluicegate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use sluicegate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use sluicegate_envoy::{EnvoyConfig, RateLimitService, SharedConfig};

const YAML: &str = "domain: m
descriptors:
  - key: user
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: trial
    shadow_mode: true
    rate_limit: {unit: hour, requests_per_unit: 1}
  - key: tenant
    detailed_metric: true
    rate_limit: {unit: hour, requests_per_unit: 100}
";

fn request(key: &str, value: &str) -> RateLimitRequest {
    RateLimitRequest {
        domain: "m".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: key.into(),
                value: value.into(),
            }],
            ..Default::default()
        }],
        hits_addend: 0,
    }
}

/// The value of the counter line starting with `prefix`; panics when there is none, so a
/// metric that is never emitted fails the test.
fn counter(text: &str, prefix: &str) -> u64 {
    let line = text
        .lines()
        .find(|l| l.starts_with(prefix))
        .unwrap_or_else(|| panic!("no metric {prefix} in:\n{text}"));
    line.rsplit(' ').next().unwrap().parse().unwrap()
}

#[test]
fn hits_near_over_and_shadow_are_counted_per_rule_path() {
    let recorder = PrometheusBuilder::new().build_recorder();
    let handle = recorder.handle();
    let config = EnvoyConfig::from_yaml_str(YAML, None).unwrap();
    let service =
        RateLimitService::new(Arc::new(MemoryStore::new(1000)), SharedConfig::new(config));
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        for i in 0..7 {
            // Different users share one label: the rule's path, not the value.
            let user = if i < 6 { "alice" } else { "bob" };
            runtime
                .block_on(service.decide(&request("user", user)))
                .unwrap();
        }
        for _ in 0..3 {
            let r = runtime
                .block_on(service.decide(&request("trial", "t1")))
                .unwrap();
            assert_eq!(r.overall_code, 1, "shadow mode answers OK");
        }
        runtime
            .block_on(service.decide(&request("tenant", "acme")))
            .unwrap();
        runtime
            .block_on(service.decide(&request("nothing", "matches")))
            .unwrap();
    });
    let text = handle.render();
    let user = r#"{domain="m",descriptor="user"}"#;
    assert_eq!(
        counter(&text, &format!("sluicegate_envoy_hits_total{user}")),
        7,
        "{text}"
    );
    assert_eq!(
        counter(&text, &format!("sluicegate_envoy_over_limit_total{user}")),
        1
    );
    // alice's 4th and 5th requests used 80 % or more of 5.
    assert_eq!(
        counter(&text, &format!("sluicegate_envoy_near_limit_total{user}")),
        2
    );
    let trial = r#"{domain="m",descriptor="trial"}"#;
    assert_eq!(
        counter(&text, &format!("sluicegate_envoy_shadow_mode_total{trial}")),
        2
    );
    // Never over the limit: the counter is absent or 0, never more.
    let over = format!("sluicegate_envoy_over_limit_total{trial}");
    assert!(
        text.lines()
            .filter(|l| l.starts_with(&over))
            .all(|l| l.ends_with(" 0")),
        "{text}"
    );
    // detailed_metric puts the value in the label; nothing else ever does.
    assert!(text.contains(r#"descriptor="tenant_acme""#), "{text}");
    assert!(
        !text.contains("alice") && !text.contains("nothing"),
        "{text}"
    );
}
