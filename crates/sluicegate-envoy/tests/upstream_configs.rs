//! Parity with envoyproxy/ratelimit's configuration format, on our own fixtures shaped like
//! the files upstream's test suite loads (tests/fixtures/upstream): the valid ones load, the
//! invalid ones are refused at the offending descriptor's file:line:column, and the fields
//! of upstream's README mean what they mean there (share_threshold, wildcards anywhere,
//! quota_mode, metadata, unit_multiplier, the per-descriptor `limit` override, the global
//! switches).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use sluicegate_core::MemoryStore;
use sluicegate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::rate_limit_descriptor::RateLimitOverride;
use sluicegate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use sluicegate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse,
};
use sluicegate_envoy::envoy_types::pb::google::protobuf::value::Kind;
use sluicegate_envoy::{EnvoyConfig, EnvoySection, RateLimitService, SharedConfig};

const OK: i32 = 1;
const OVER: i32 = 2;

fn fixtures(dir: &str) -> Vec<PathBuf> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream");
    let mut files: Vec<PathBuf> = std::fs::read_dir(root.join(dir))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    assert!(!files.is_empty());
    files
}

fn section(config: &Path) -> EnvoySection {
    EnvoySection {
        config: Some(config.to_owned()),
        ..Default::default()
    }
}

#[test]
fn every_valid_shape_loads() {
    for file in fixtures("valid") {
        if let Err(e) = EnvoyConfig::load(&section(&file), &[], Path::new("")) {
            panic!("{} refused: {e}", file.display());
        }
    }
}

#[test]
fn every_invalid_shape_is_refused_at_its_line_and_column() {
    let mut wrong = Vec::new();
    for file in fixtures("invalid") {
        let text = std::fs::read_to_string(&file).unwrap();
        // The first line says where and what: `# error at L:C: fragment`.
        let spec = text
            .lines()
            .next()
            .unwrap()
            .strip_prefix("# error at ")
            .unwrap();
        let (at, fragment) = spec.split_once(": ").unwrap();
        let error = EnvoyConfig::load(&section(&file), &[], Path::new(""))
            .expect_err(&file.display().to_string())
            .to_string();
        let expected = format!("{}:{at}: ", file.display());
        if !error.starts_with(&expected) || !error.contains(fragment) {
            wrong.push(format!("{error}\n  expected {expected}…{fragment}"));
        }
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));
}

#[test]
fn files_of_one_domain_merge_only_with_merge_domains() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/upstream/merge");
    let error = EnvoyConfig::load(&section(&dir), &[], Path::new("")).unwrap_err();
    assert!(
        error
            .to_string()
            .contains("part2.yaml:1:1: duplicate domain"),
        "{error}"
    );
    let merged = EnvoySection {
        merge_domains: true,
        ..section(&dir)
    };
    let config = EnvoyConfig::load(&merged, &[], Path::new("")).unwrap();
    assert!(config.find("merged", &[("first", "x")]).is_some());
    assert!(config.find("merged", &[("second", "x")]).is_some());
}

fn service(yaml: &str, tweak: impl FnOnce(&mut EnvoySection)) -> RateLimitService {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rl.yaml");
    std::fs::write(&file, yaml).unwrap();
    let mut envoy = section(&file);
    tweak(&mut envoy);
    let config = EnvoyConfig::load(&envoy, &[], Path::new("")).unwrap();
    RateLimitService::new(
        Arc::new(MemoryStore::new(10_000)),
        SharedConfig::new(config),
    )
}

fn descriptor(entries: &[(&str, &str)]) -> RateLimitDescriptor {
    RateLimitDescriptor {
        entries: entries
            .iter()
            .map(|(k, v)| Entry {
                key: (*k).into(),
                value: (*v).into(),
            })
            .collect(),
        ..Default::default()
    }
}

async fn ask(
    service: &RateLimitService,
    domain: &str,
    descriptors: Vec<RateLimitDescriptor>,
) -> RateLimitResponse {
    service
        .decide(&RateLimitRequest {
            domain: domain.into(),
            descriptors,
            hits_addend: 0,
        })
        .await
        .unwrap()
}

async fn codes(
    service: &RateLimitService,
    domain: &str,
    entries: &[(&str, &str)],
    n: usize,
) -> Vec<i32> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(
            ask(service, domain, vec![descriptor(entries)])
                .await
                .overall_code,
        );
    }
    out
}

#[tokio::test]
async fn share_threshold_makes_every_matching_value_share_one_counter() {
    let yaml = "domain: s
descriptors:
  - key: bucket
    value: uploads/*
    share_threshold: true
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: bucket
    value: logs/*
    rate_limit: {unit: minute, requests_per_unit: 2}
";
    let s = service(yaml, |_| {});
    // Shared: two different values use up one counter of 2.
    assert_eq!(codes(&s, "s", &[("bucket", "uploads/a")], 1).await, [OK]);
    assert_eq!(
        codes(&s, "s", &[("bucket", "uploads/b")], 2).await,
        [OK, OVER]
    );
    // Not shared: each value has its own counter of 2.
    assert_eq!(
        codes(&s, "s", &[("bucket", "logs/a")], 3).await,
        [OK, OK, OVER]
    );
    assert_eq!(codes(&s, "s", &[("bucket", "logs/b")], 1).await, [OK]);
}

#[tokio::test]
async fn wildcards_match_anywhere_in_the_value() {
    let yaml = "domain: w
descriptors:
  - key: action
    value: /api/*/delete
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: rpc
    value: svc*ep*rpc
    rate_limit: {unit: minute, requests_per_unit: 1}
";
    let s = service(yaml, |_| {});
    assert_eq!(
        codes(&s, "w", &[("action", "/api/v1/delete")], 2).await,
        [OK, OVER]
    );
    // No rule matches: OK without limit.
    assert_eq!(
        codes(&s, "w", &[("action", "/api/v1/read")], 3).await,
        [OK, OK, OK]
    );
    assert_eq!(
        codes(&s, "w", &[("rpc", "svc-a-ep-b-rpc")], 2).await,
        [OK, OVER]
    );
    assert!(
        s.config()
            .get()
            .find("w", &[("rpc", "svc-a-rpc")])
            .is_none()
    );
}

const QUOTA: &str = "domain: q
descriptors:
  - key: minute
    quota_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: day
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 3}
  - key: normal
    rate_limit: {unit: day, requests_per_unit: 100}
";

#[tokio::test]
async fn quota_mode_is_over_only_when_every_quota_descriptor_is() {
    let s = service(QUOTA, |_| {});
    let all = || {
        vec![
            descriptor(&[("minute", "u")]),
            descriptor(&[("day", "u")]),
            descriptor(&[("normal", "u")]),
        ]
    };
    // 1st: both quotas have room. 2nd and 3rd: the minute quota is over, the day one is not.
    for round in 0..3 {
        let r = ask(&s, "q", all()).await;
        assert_eq!(r.overall_code, OK, "round {round}");
        if round > 0 {
            assert_eq!(r.statuses[0].code, OVER, "the minute quota shows over");
        }
    }
    // 4th: both quotas over: the request is over, and nothing was taken anywhere.
    let r = ask(&s, "q", all()).await;
    assert_eq!(r.overall_code, OVER);
    let normal = ask(&s, "q", vec![descriptor(&[("normal", "u")])]).await;
    assert_eq!(normal.statuses[0].limit_remaining, 100 - 3 - 1);
}

#[tokio::test]
async fn a_normal_descriptor_over_its_limit_refuses_a_quota_request() {
    let yaml = "domain: q
descriptors:
  - key: soft
    quota_mode: true
    rate_limit: {unit: day, requests_per_unit: 100}
  - key: hard
    rate_limit: {unit: day, requests_per_unit: 1}
";
    let s = service(yaml, |_| {});
    let both = || vec![descriptor(&[("soft", "u")]), descriptor(&[("hard", "u")])];
    assert_eq!(ask(&s, "q", both()).await.overall_code, OK);
    assert_eq!(ask(&s, "q", both()).await.overall_code, OVER);
    let soft = ask(&s, "q", vec![descriptor(&[("soft", "u")])]).await;
    assert_eq!(soft.statuses[0].limit_remaining, 100 - 1 - 1);
}

#[tokio::test]
async fn global_quota_makes_every_rule_soft() {
    let yaml = "domain: q
descriptors:
  - key: a
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: b
    rate_limit: {unit: day, requests_per_unit: 2}
";
    let s = service(yaml, |e| e.quota = true);
    let both = || vec![descriptor(&[("a", "u")]), descriptor(&[("b", "u")])];
    assert_eq!(ask(&s, "q", both()).await.overall_code, OK);
    assert_eq!(
        ask(&s, "q", both()).await.overall_code,
        OK,
        "b still has room"
    );
    assert_eq!(ask(&s, "q", both()).await.overall_code, OVER);
}

#[tokio::test]
async fn global_shadow_answers_ok_but_still_counts() {
    let yaml = "domain: g
descriptors:
  - key: a
    rate_limit: {unit: day, requests_per_unit: 1}
  - key: banned
    rate_limit: {unit: day, requests_per_unit: 0}
";
    let s = service(yaml, |e| e.shadow = true);
    let r = ask(&s, "g", vec![descriptor(&[("a", "u")])]).await;
    assert_eq!((r.overall_code, r.statuses[0].limit_remaining), (OK, 0));
    assert_eq!(codes(&s, "g", &[("a", "u")], 2).await, [OK, OK]);
    assert_eq!(codes(&s, "g", &[("banned", "u")], 1).await, [OK]);
}

#[tokio::test]
async fn metadata_is_returned_only_when_dynamic_metadata_is_on() {
    let yaml = "domain: m
descriptors:
  - key: plan
    rate_limit: {unit: minute, requests_per_unit: 10}
    metadata:
      billing: {account: standard, weight: 2}
";
    let off = service(yaml, |_| {});
    let r = ask(&off, "m", vec![descriptor(&[("plan", "p")])]).await;
    assert!(r.dynamic_metadata.is_none());
    let on = service(yaml, |e| e.dynamic_metadata = true);
    let r = ask(&on, "m", vec![descriptor(&[("plan", "p")])]).await;
    let metadata = r.dynamic_metadata.expect("metadata");
    let Some(Kind::StructValue(billing)) = &metadata.fields["billing"].kind else {
        panic!("billing is a struct: {metadata:?}");
    };
    assert_eq!(
        billing.fields["account"].kind,
        Some(Kind::StringValue("standard".into()))
    );
    assert_eq!(billing.fields["weight"].kind, Some(Kind::NumberValue(2.0)));
}

#[tokio::test]
async fn unit_multiplier_makes_a_longer_window() {
    let yaml = "domain: u
descriptors:
  - key: k
    rate_limit: {unit: minute, requests_per_unit: 2, unit_multiplier: 5}
";
    let s = service(yaml, |_| {});
    let r = ask(&s, "u", vec![descriptor(&[("k", "v")])]).await;
    let reset = r.statuses[0].duration_until_reset.unwrap().seconds;
    assert!(reset <= 300, "a window of 5 minutes: {reset}");
    assert_eq!(
        s.config().get().policies()[0].period_duration().as_secs(),
        300
    );
}

#[tokio::test]
async fn a_descriptor_limit_overrides_the_configuration_with_its_own_counter() {
    let yaml = "domain: o
descriptors:
  - key: user
    rate_limit: {unit: minute, requests_per_unit: 100}
";
    let s = service(yaml, |_| {});
    let with_limit = |rpu: u32| RateLimitDescriptor {
        limit: Some(RateLimitOverride {
            requests_per_unit: rpu,
            unit: 2, // MINUTE
        }),
        ..descriptor(&[("user", "alice")])
    };
    let first = ask(&s, "o", vec![with_limit(2)]).await;
    assert_eq!(first.overall_code, OK);
    let limit = first.statuses[0].current_limit.clone().unwrap();
    assert_eq!((limit.requests_per_unit, limit.unit), (2, 2));
    assert_eq!(ask(&s, "o", vec![with_limit(2)]).await.overall_code, OK);
    assert_eq!(ask(&s, "o", vec![with_limit(2)]).await.overall_code, OVER);
    // The configured limit has its own counter, untouched by the override's hits.
    let plain = ask(&s, "o", vec![descriptor(&[("user", "alice")])]).await;
    assert_eq!(plain.statuses[0].limit_remaining, 99);
    // In a domain the configuration does not know, an override does not apply (as upstream).
    assert_eq!(
        ask(&s, "unknown", vec![with_limit(0)]).await.overall_code,
        OK
    );
    // requests_per_unit 0 refuses.
    assert_eq!(ask(&s, "o", vec![with_limit(0)]).await.overall_code, OVER);
}
