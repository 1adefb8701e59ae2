//! Redis Cluster (a real 3-master cluster): a request whose descriptors would live in
//! different hash slots is decided in one atomic step, because the Envoy service places every
//! key of a domain in the domain's slot. No UNAVAILABLE, no over-admission, and a denial
//! consumes nothing, with two Sluicegate instances racing on the same keys, directly over gRPC
//! and through a real Envoy (which fails closed here, so an UNAVAILABLE would show as a 500).

use std::sync::Arc;
use std::time::Duration;

use redis::cluster_routing::Slot;
use sluicegate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use sluicegate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use sluicegate_envoy::key::descriptor_key;
use sluicegate_envoy::{EnvoyConfig, RateLimitService, SharedConfig};
use sluicegate_redis::{RedisConfig, RedisStore};
use sluicegate_testkit::envoy::bootstrap_many;
use sluicegate_testkit::{Envoy, RedisCluster, envoy_binary, free_port, start_upstream};

const YAML: &str = "domain: cl
descriptors:
  - key: user
    rate_limit: {unit: day, requests_per_unit: 5}
  - key: remote_address
    rate_limit: {unit: day, requests_per_unit: 1000}
";

fn request(entries: &[(&str, &str)]) -> RateLimitRequest {
    RateLimitRequest {
        domain: "cl".into(),
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

async fn instance(seeds: &[String], prefix: &str) -> RateLimitService {
    let mut config = RedisConfig::cluster(seeds.iter().cloned());
    config.key_prefix = prefix.to_owned();
    config.timeout = Duration::from_secs(2);
    let store = RedisStore::connect(config).await.unwrap();
    let rules = EnvoyConfig::from_yaml_str(YAML, None).unwrap();
    RateLimitService::new(Arc::new(store), SharedConfig::new(rules))
}

/// The slot a descriptor's key would have on its own (unplaced, as before).
fn own_slot(entries: &[(&str, &str)]) -> Slot {
    Slot::for_key(format!("{{{}}}", descriptor_key("cl", entries)))
}

async fn serve(service: RateLimitService) -> std::net::SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(sluicegate_envoy::serve(
        listener,
        service,
        std::future::pending(),
    ));
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_slot_requests_are_exact_on_a_cluster_with_two_instances_racing() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let seeds = cluster.seeds();
    let prefix = "envoy-cluster";
    // The test means something only if the two descriptors would sit in different slots.
    assert_ne!(
        own_slot(&[("user", "race")]),
        own_slot(&[("remote_address", "10.9.9.9")])
    );
    assert_ne!(
        own_slot(&[("user", "via-envoy")]),
        own_slot(&[("remote_address", "127.0.0.1")])
    );
    let a = Arc::new(instance(&seeds, prefix).await);
    let b = Arc::new(instance(&seeds, prefix).await);

    // Directly over the service API: 40 requests, half on each instance, all at once.
    let both = request(&[("user", "race"), ("remote_address", "10.9.9.9")]);
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..40 {
        let service = Arc::clone(if i % 2 == 0 { &a } else { &b });
        let both = both.clone();
        tasks.spawn(async move { service.decide(&both).await });
    }
    let (mut ok, mut over) = (0, 0);
    while let Some(joined) = tasks.join_next().await {
        match joined.unwrap() {
            Ok(response) if response.overall_code == 1 => ok += 1,
            Ok(response) if response.overall_code == 2 => over += 1,
            other => panic!("neither OK nor OVER_LIMIT: {other:?}"),
        }
    }
    assert_eq!((ok, over), (5, 35), "exactly the user's limit is admitted");
    let alone = b
        .decide(&request(&[("remote_address", "10.9.9.9")]))
        .await
        .unwrap();
    assert_eq!(
        alone.statuses[0].limit_remaining,
        1000 - 5 - 1,
        "the 35 denials took nothing from the other descriptor"
    );

    // Through a real Envoy balancing over both instances, failing closed.
    let Some(binary) = envoy_binary() else {
        return;
    };
    let upstream = start_upstream().await;
    let services = [serve((*a).clone()).await, serve((*b).clone()).await];
    let (admin, open, closed) = (free_port(), free_port(), free_port());
    let bootstrap = bootstrap_many(admin, open, closed, upstream, &services, "cl");
    let envoy = Envoy::start(&binary, &bootstrap, admin).await;
    let client = reqwest::Client::new();
    let mut requests = tokio::task::JoinSet::new();
    for _ in 0..12 {
        let get = client
            .get(format!("http://127.0.0.1:{closed}/x"))
            .header("x-user", "via-envoy")
            .timeout(Duration::from_secs(10))
            .send();
        requests.spawn(get);
    }
    let mut statuses = Vec::new();
    while let Some(joined) = requests.join_next().await {
        statuses.push(joined.unwrap().unwrap().status().as_u16());
    }
    statuses.sort_unstable();
    let mut expected = vec![200; 5];
    expected.extend([429; 7]);
    assert_eq!(statuses, expected, "log:\n{}", envoy.log_text());
    let address = a
        .decide(&request(&[("remote_address", "127.0.0.1")]))
        .await
        .unwrap();
    assert_eq!(address.statuses[0].limit_remaining, 1000 - 5 - 1);
    drop(cluster);
}
