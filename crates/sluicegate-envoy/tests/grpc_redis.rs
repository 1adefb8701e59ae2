//! The service on the Redis store (a real redis-server on a free port): several
//! descriptors in one atomic Redis step, and UNAVAILABLE once Redis is gone.

use std::sync::Arc;

use sluicegate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use sluicegate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use sluicegate_envoy::{EnvoyConfig, RateLimitService, SharedConfig};
use sluicegate_testkit::{RedisServer, redis};

const YAML: &str = "domain: r
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 5}
  - key: path
    value: /pay
    rate_limit: {unit: hour, requests_per_unit: 1}
";

fn request(entries: &[(&str, &str)]) -> RateLimitRequest {
    RateLimitRequest {
        domain: "r".into(),
        descriptors: entries
            .iter()
            .map(|(k, v)| RateLimitDescriptor {
                entries: vec![Entry {
                    key: (*k).into(),
                    value: (*v).into(),
                }],
                ..Default::default()
            })
            .collect(),
        hits_addend: 0,
    }
}

#[tokio::test]
async fn descriptors_are_all_or_nothing_on_redis_and_a_dead_redis_is_unavailable() {
    let Some(mut redis) = RedisServer::start() else {
        return;
    };
    let store = redis::store(&redis.url(), "envoy-test").await;
    let config = EnvoyConfig::from_yaml_str(YAML, None).unwrap();
    let service = RateLimitService::new(Arc::new(store), SharedConfig::new(config));
    let both = request(&[("remote_address", "10.1.1.1"), ("path", "/pay")]);
    assert_eq!(service.decide(&both).await.unwrap().overall_code, 1);
    for _ in 0..3 {
        let r = service.decide(&both).await.unwrap();
        assert_eq!(r.overall_code, 2);
        assert_eq!((r.statuses[0].code, r.statuses[1].code), (1, 2));
    }
    let alone = service
        .decide(&request(&[("remote_address", "10.1.1.1")]))
        .await
        .unwrap();
    assert_eq!(
        alone.statuses[0].limit_remaining, 3,
        "only the admitted pair was counted"
    );

    redis.kill();
    let error = service.decide(&both).await.unwrap_err();
    assert_eq!(error.code(), tonic::Code::Unavailable);
}
