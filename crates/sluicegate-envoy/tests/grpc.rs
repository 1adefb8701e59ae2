//! The service over real gRPC on loopback, with a tonic client.

use std::sync::Arc;
use std::time::Duration;

use sluicegate_core::{
    AlgorithmKind, BoxFuture, CheckRequest, KeyedCheck, MemoryStore, Policy, Store, StoreError,
    Verdict,
};
use sluicegate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use sluicegate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use sluicegate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse,
};
use sluicegate_envoy::envoy_types::pb::google::protobuf::UInt64Value;
use sluicegate_envoy::{EnvoyConfig, EnvoySection, HeaderSet, RateLimitService, SharedConfig};
use tonic::transport::Channel;

const OK: i32 = 1;
const OVER: i32 = 2;

const YAML: &str = "domain: shop
descriptors:
  - key: remote_address
    rate_limit: {unit: minute, requests_per_unit: 5}
  - key: path
    value: /checkout
    rate_limit: {unit: minute, requests_per_unit: 2}
  - key: path
    value: /search
    shadow_mode: true
    rate_limit: {unit: minute, requests_per_unit: 1}
  - key: internal
    rate_limit: {unlimited: true}
  - key: banned
    rate_limit: {unit: hour, requests_per_unit: 0}
";

/// Starts the service on a free port; returns a connected client.
async fn start(store: Arc<dyn Store>, config: EnvoyConfig) -> RateLimitServiceClient<Channel> {
    start_shared(store, SharedConfig::new(config)).await
}

/// [`start`] on a config handle the test keeps, to reload it.
async fn start_shared(
    store: Arc<dyn Store>,
    shared: SharedConfig,
) -> RateLimitServiceClient<Channel> {
    let service =
        RateLimitService::new(store, shared).with_headers(vec![HeaderSet::Draft6, HeaderSet::Ietf]);
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(sluicegate_envoy::serve(
        listener,
        service,
        std::future::pending(),
    ));
    let channel = Channel::from_shared(format!("http://{addr}"))
        .unwrap()
        .connect()
        .await
        .unwrap();
    RateLimitServiceClient::new(channel)
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

fn request(descriptors: Vec<RateLimitDescriptor>) -> RateLimitRequest {
    RateLimitRequest {
        domain: "shop".into(),
        descriptors,
        hits_addend: 0,
    }
}

async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    req: RateLimitRequest,
) -> RateLimitResponse {
    client.should_rate_limit(req).await.unwrap().into_inner()
}

fn header<'a>(response: &'a RateLimitResponse, name: &str) -> Option<&'a str> {
    response
        .response_headers_to_add
        .iter()
        .find(|h| h.key == name)
        .map(|h| h.value.as_str())
}

fn memory() -> Arc<dyn Store> {
    Arc::new(MemoryStore::new(10_000))
}

fn config() -> EnvoyConfig {
    EnvoyConfig::from_yaml_str(YAML, None).unwrap()
}

#[tokio::test]
async fn one_descriptor_over_its_limit_consumes_nothing_from_the_others() {
    let mut client = start(memory(), config()).await;
    let both = || {
        request(vec![
            descriptor(&[("remote_address", "10.0.0.1")]),
            descriptor(&[("path", "/checkout")]),
        ])
    };
    for expected_left in [1, 0] {
        let r = ask(&mut client, both()).await;
        assert_eq!(r.overall_code, OK);
        assert_eq!(r.statuses[1].limit_remaining, expected_left);
    }
    // /checkout is spent: the next three are refused, and the address keeps its budget.
    for _ in 0..3 {
        let r = ask(&mut client, both()).await;
        assert_eq!(r.overall_code, OVER);
        assert_eq!(r.statuses[0].code, OK);
        assert_eq!(r.statuses[1].code, OVER);
    }
    // 5 per minute for the address, 2 taken by the admitted pair: 3 left.
    let alone = ask(
        &mut client,
        request(vec![descriptor(&[("remote_address", "10.0.0.1")])]),
    )
    .await;
    assert_eq!(alone.overall_code, OK);
    assert_eq!(alone.statuses[0].limit_remaining, 2);
}

#[tokio::test]
async fn statuses_follow_request_order_with_limits_and_reset() {
    let mut client = start(memory(), config()).await;
    let r = ask(
        &mut client,
        request(vec![
            descriptor(&[("nothing", "matches")]),
            descriptor(&[("internal", "cron")]),
            descriptor(&[("remote_address", "10.0.0.2")]),
        ]),
    )
    .await;
    assert_eq!(r.overall_code, OK);
    assert_eq!(r.statuses.len(), 3);
    assert_eq!(r.statuses[0].code, OK);
    assert!(r.statuses[0].current_limit.is_none());
    assert_eq!(r.statuses[1].limit_remaining, u32::MAX);
    let limit = r.statuses[2].current_limit.as_ref().unwrap();
    assert_eq!((limit.requests_per_unit, limit.unit), (5, 2)); // 5 per MINUTE
    assert_eq!(r.statuses[2].limit_remaining, 4);
    let reset = r.statuses[2].duration_until_reset.unwrap();
    assert!(reset.seconds <= 60 && (reset.seconds > 0 || reset.nanos > 0));
    assert_eq!(header(&r, "ratelimit-limit"), Some("5"));
    assert_eq!(header(&r, "ratelimit-remaining"), Some("4"));
    assert!(header(&r, "ratelimit").unwrap().contains(";r=4;t="));
    assert!(
        header(&r, "ratelimit-policy")
            .unwrap()
            .contains(";q=5;w=60")
    );
}

#[tokio::test]
async fn hits_addend_counts_zero_as_one_and_descriptors_may_override_it() {
    let mut client = start(memory(), config()).await;
    let ip = |addr: &str| descriptor(&[("remote_address", addr)]);
    let mut req = request(vec![ip("10.0.0.3")]);
    req.hits_addend = 0;
    assert_eq!(
        ask(&mut client, req.clone()).await.statuses[0].limit_remaining,
        4
    );
    req.hits_addend = 3;
    assert_eq!(
        ask(&mut client, req.clone()).await.statuses[0].limit_remaining,
        1
    );
    // 2 more would be over: refused, and nothing taken.
    req.hits_addend = 2;
    assert_eq!(ask(&mut client, req.clone()).await.overall_code, OVER);
    // A descriptor's own hits_addend wins over the request's: 0 reads without consuming.
    let mut peek = ip("10.0.0.3");
    peek.hits_addend = Some(UInt64Value { value: 0 });
    let mut other = ip("10.0.0.4");
    other.hits_addend = Some(UInt64Value { value: 4 });
    let mut req = request(vec![peek, other]);
    req.hits_addend = 2;
    let r = ask(&mut client, req).await;
    assert_eq!(r.overall_code, OK);
    assert_eq!(r.statuses[0].limit_remaining, 1);
    assert_eq!(r.statuses[1].limit_remaining, 1);
    // More than the limit can ever admit is over the limit, not an error.
    let mut req = request(vec![ip("10.0.0.5")]);
    req.hits_addend = 6;
    assert_eq!(ask(&mut client, req).await.overall_code, OVER);
    let r = ask(&mut client, request(vec![ip("10.0.0.5")])).await;
    assert_eq!(r.statuses[0].limit_remaining, 4);
}

#[tokio::test]
async fn shadow_mode_answers_ok_and_blocked_values_are_refused() {
    let mut client = start(memory(), config()).await;
    for _ in 0..3 {
        let r = ask(
            &mut client,
            request(vec![descriptor(&[("path", "/search")])]),
        )
        .await;
        assert_eq!(r.overall_code, OK);
        assert_eq!(r.statuses[0].code, OK);
    }
    let r = ask(
        &mut client,
        request(vec![
            descriptor(&[("remote_address", "10.0.0.6")]),
            descriptor(&[("banned", "yes")]),
        ]),
    )
    .await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!(r.statuses[1].code, OVER);
    assert_eq!(
        r.statuses[1]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        0
    );
    let retry: u64 = header(&r, "retry-after").unwrap().parse().unwrap();
    assert!((1..=3600).contains(&retry));
    let body = String::from_utf8(r.raw_body.clone()).unwrap();
    assert!(body.contains("\"error\":\"rate_limit_exceeded\""), "{body}");
    // The refused request took nothing from the address.
    let r = ask(
        &mut client,
        request(vec![descriptor(&[("remote_address", "10.0.0.6")])]),
    )
    .await;
    assert_eq!(r.statuses[0].limit_remaining, 4);
}

#[tokio::test]
async fn replaces_drops_the_replaced_limit() {
    let yaml = "domain: shop
descriptors:
  - key: user
    value: bob
    rate_limit: {name: bob_default, unit: minute, requests_per_unit: 1}
  - key: promo
    value: spring
    descriptors:
      - key: user
        value: bob
        rate_limit:
          unit: minute
          requests_per_unit: 3
          replaces: [{name: bob_default}]
";
    let mut client = start(memory(), EnvoyConfig::from_yaml_str(yaml, None).unwrap()).await;
    let both = || {
        request(vec![
            descriptor(&[("user", "bob")]),
            descriptor(&[("promo", "spring"), ("user", "bob")]),
        ])
    };
    for _ in 0..3 {
        assert_eq!(ask(&mut client, both()).await.overall_code, OK);
    }
    assert_eq!(ask(&mut client, both()).await.overall_code, OVER);
    // bob_default was never counted while replaced.
    let alone = ask(&mut client, request(vec![descriptor(&[("user", "bob")])])).await;
    assert_eq!(alone.overall_code, OK);
}

#[tokio::test]
async fn one_rule_twice_with_different_values_is_still_all_or_nothing() {
    let mut client = start(memory(), config()).await;
    // Spend 10.0.0.8 completely.
    let mut spend = request(vec![descriptor(&[("remote_address", "10.0.0.8")])]);
    spend.hits_addend = 5;
    assert_eq!(ask(&mut client, spend).await.overall_code, OK);
    let pair = request(vec![
        descriptor(&[("remote_address", "10.0.0.7")]),
        descriptor(&[("remote_address", "10.0.0.8")]),
    ]);
    let r = ask(&mut client, pair).await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!((r.statuses[0].code, r.statuses[1].code), (OK, OVER));
    let r = ask(
        &mut client,
        request(vec![descriptor(&[("remote_address", "10.0.0.7")])]),
    )
    .await;
    assert_eq!(
        r.statuses[0].limit_remaining, 4,
        "the first address was given back its hit"
    );
}

/// A store whose backend is down: every call fails as Redis does when unreachable.
struct DownStore;

impl Store for DownStore {
    fn check<'a>(&'a self, _: CheckRequest<'a>) -> BoxFuture<'a, Result<Verdict, StoreError>> {
        Box::pin(async { Err(StoreError::Unavailable("connection refused".into())) })
    }
    fn check_keyed<'a>(
        &'a self,
        _: &'a [KeyedCheck<'a>],
    ) -> BoxFuture<'a, Result<Verdict, StoreError>> {
        Box::pin(async { Err(StoreError::Timeout) })
    }
    fn refund<'a>(
        &'a self,
        _: &'a [Arc<Policy>],
        _: &'a str,
        _: u64,
    ) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Err(StoreError::Timeout) })
    }
    fn reset<'a>(&'a self, _: &'a Policy, _: &'a str) -> BoxFuture<'a, Result<(), StoreError>> {
        Box::pin(async { Err(StoreError::Timeout) })
    }
    fn ping(&self) -> BoxFuture<'_, Result<(), StoreError>> {
        Box::pin(async { Err(StoreError::Timeout) })
    }
    fn kind(&self) -> &'static str {
        "down"
    }
}

#[tokio::test]
async fn a_failing_store_answers_unavailable() {
    let mut client = start(Arc::new(DownStore), config()).await;
    let status = client
        .should_rate_limit(request(vec![descriptor(&[("remote_address", "10.0.0.9")])]))
        .await
        .unwrap_err();
    assert_eq!(status.code(), tonic::Code::Unavailable);
    // Requests that touch no store are still answered.
    let r = ask(&mut client, request(vec![descriptor(&[("internal", "x")])])).await;
    assert_eq!(r.overall_code, OK);
}

#[tokio::test]
async fn bad_requests_are_invalid_argument() {
    let mut client = start(memory(), config()).await;
    let mut no_domain = request(vec![descriptor(&[("remote_address", "10.0.0.1")])]);
    no_domain.domain.clear();
    let e = client.should_rate_limit(no_domain).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    let e = client.should_rate_limit(request(vec![])).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    let flood = (0..2000)
        .map(|i| descriptor(&[("remote_address", &i.to_string())]))
        .collect();
    let e = client.should_rate_limit(request(flood)).await.unwrap_err();
    assert_eq!(e.code(), tonic::Code::InvalidArgument);
    // An unknown domain limits nothing.
    let mut unknown = request(vec![descriptor(&[("remote_address", "10.0.0.1")])]);
    unknown.domain = "elsewhere".into();
    assert_eq!(ask(&mut client, unknown).await.overall_code, OK);
}

#[tokio::test]
async fn native_rules_use_any_algorithm_and_several_policies_at_once() {
    let burst = Arc::new(
        Policy::builder(
            "burst",
            AlgorithmKind::TokenBucket,
            10,
            Duration::from_secs(60),
        )
        .burst(2)
        .build()
        .unwrap(),
    );
    let daily = Arc::new(
        Policy::builder(
            "daily",
            AlgorithmKind::SlidingWindow,
            100,
            Duration::from_secs(86_400),
        )
        .build()
        .unwrap(),
    );
    let section: EnvoySection = toml::from_str(
        r#"
[[rules]]
domain = "shop"
entries = [{ key = "api_key" }]
policies = ["burst", "daily"]
"#,
    )
    .unwrap();
    let config = EnvoyConfig::load(&section, &[burst, daily], std::path::Path::new(".")).unwrap();
    let mut client = start(memory(), config).await;
    let req = || request(vec![descriptor(&[("api_key", "k1")])]);
    assert_eq!(ask(&mut client, req()).await.overall_code, OK);
    let r = ask(&mut client, req()).await;
    assert_eq!(r.overall_code, OK);
    assert_eq!(header(&r, "ratelimit-remaining"), Some("0"));
    let r = ask(&mut client, req()).await;
    assert_eq!(r.overall_code, OVER);
    assert_eq!(r.statuses[0].current_limit.as_ref().unwrap().name, "burst");
    // The daily policy saw two admitted requests, not three.
    let ietf = header(&r, "ratelimit").unwrap();
    assert!(ietf.contains("\"daily\";r=98"), "{ietf}");
}

#[tokio::test]
async fn negative_hits_give_back_what_was_taken() {
    let mut client = start(memory(), config()).await;
    let mut spend = request(vec![descriptor(&[("remote_address", "10.0.0.10")])]);
    spend.hits_addend = 4;
    assert_eq!(ask(&mut client, spend).await.statuses[0].limit_remaining, 1);
    let mut give_back = descriptor(&[("remote_address", "10.0.0.10")]);
    give_back.hits_addend = Some(UInt64Value { value: 3 });
    give_back.is_negative_hits = true;
    let r = ask(&mut client, request(vec![give_back])).await;
    assert_eq!(r.overall_code, OK);
    let r = ask(
        &mut client,
        request(vec![descriptor(&[("remote_address", "10.0.0.10")])]),
    )
    .await;
    assert_eq!(
        r.statuses[0].limit_remaining, 3,
        "4 taken, 3 given back, 1 taken"
    );
}

/// Per-key overrides (issue 14) hold on the Envoy path too: the key's own limit is what the
/// service enforces and reports in `current_limit` and the headers, with its usage kept.
#[tokio::test]
async fn a_key_override_is_enforced_and_reported() {
    let store = Arc::new(MemoryStore::new(10_000));
    // A day's window, so the test never straddles one.
    let yaml = "domain: shop\ndescriptors:\n  - key: remote_address\n    rate_limit: {unit: day, requests_per_unit: 5}\n";
    let config = EnvoyConfig::from_yaml_str(yaml, None).unwrap();
    let policy = config
        .policies()
        .iter()
        .find(|p| p.limit() == 5)
        .cloned()
        .unwrap();
    let mut client = start(Arc::clone(&store) as Arc<dyn Store>, config).await;
    let one = || request(vec![descriptor(&[("remote_address", "10.0.0.9")])]);
    for _ in 0..4 {
        assert_eq!(ask(&mut client, one()).await.overall_code, OK);
    }
    let key = sluicegate_envoy::key::descriptor_key("shop", &[("remote_address", "10.0.0.9")]);
    let raised = sluicegate_core::Override {
        limit: 8,
        burst: None,
        period: None,
    };
    store
        .set_override(&policy, &key, Some(raised))
        .await
        .unwrap();
    let r = ask(&mut client, one()).await;
    assert_eq!(r.overall_code, OK);
    assert_eq!(
        r.statuses[0].limit_remaining, 3,
        "4 used of 8, then this one"
    );
    assert_eq!(
        r.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        8
    );
    assert_eq!(header(&r, "ratelimit-limit"), Some("8"));
    for _ in 0..3 {
        assert_eq!(ask(&mut client, one()).await.overall_code, OK);
    }
    assert_eq!(ask(&mut client, one()).await.overall_code, OVER);
    // Another address keeps the rule's own 5.
    let other = ask(
        &mut client,
        request(vec![descriptor(&[("remote_address", "10.0.0.8")])]),
    )
    .await;
    assert_eq!(
        other.statuses[0]
            .current_limit
            .as_ref()
            .unwrap()
            .requests_per_unit,
        5
    );
}

/// A YAML reload that raises a rule's `requests_per_unit` keeps what each descriptor used
/// (issue 14, item 6), as the server's reload does it: retain the new rules' policies in
/// the memory store, then swap the rules.
#[tokio::test]
async fn a_yaml_reload_that_raises_a_limit_keeps_the_usage() {
    let store = Arc::new(MemoryStore::new(10_000));
    let yaml = |n: u32| {
        format!(
            "domain: shop\ndescriptors:\n  - key: remote_address\n    rate_limit: {{unit: day, requests_per_unit: {n}}}\n"
        )
    };
    let shared = SharedConfig::new(EnvoyConfig::from_yaml_str(&yaml(5), None).unwrap());
    let mut client = start_shared(Arc::clone(&store) as Arc<dyn Store>, shared.clone()).await;
    let one = || request(vec![descriptor(&[("remote_address", "10.0.0.7")])]);
    for _ in 0..4 {
        assert_eq!(ask(&mut client, one()).await.overall_code, OK);
    }
    let raised = EnvoyConfig::from_yaml_str(&yaml(10), None).unwrap();
    store.retain_policies(raised.policies());
    shared.replace(raised);
    let r = ask(&mut client, one()).await;
    assert_eq!(r.overall_code, OK);
    assert_eq!(
        r.statuses[0].limit_remaining, 5,
        "4 used of 10, then this one"
    );
}
