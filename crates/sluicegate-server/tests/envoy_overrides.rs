//! Issue 14 item 2 on the Envoy path: the real `sluicegate` binary with `[envoy]`
//! native rules on a real redis-server, a 3-master Redis Cluster and memory. An override `PUT`
//! over HTTP for a rule's policy and a descriptor's key is what the gRPC `ShouldRateLimit`
//! answers enforce and report (`current_limit`), with the key's usage kept; `DELETE` brings
//! the configured limit back; a `[[overrides]]` entry of an Envoy key holds from the start.

use sluicegate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use sluicegate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use sluicegate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::{
    RateLimitRequest, RateLimitResponse,
};
use sluicegate_envoy::envoy_types::pb::google::protobuf::UInt64Value;
use sluicegate_testkit::{
    RedisCluster, RedisServer, Sluicegate, eventually, free_port, sluicegate_bin, wait_for_port,
    write,
};
use tonic::transport::Channel;

const ADMIN: &str = "Bearer s3cret";
const OK: i32 = 1;
const OVER: i32 = 2;

/// `per_ip`, 5 a day, applied by a native rule of domain `shop` to `remote_address`; the
/// config gives 10.0.0.2 its own limit of 2.
fn config(store: &str) -> String {
    format!(
        r#"
[server]
admin_token = "s3cret"

{store}
[[policies]]
name = "per_ip"
algorithm = "fixed_window"
limit = 5
period = "1d"

[[overrides]]
policy = "per_ip"
key = "shop/remote_address=10.0.0.2"
limit = 2

[envoy]

[[envoy.rules]]
domain = "shop"
entries = [{{ key = "remote_address" }}]
policies = ["per_ip"]
"#
    )
}

/// One `ShouldRateLimit` call for `ip` in `shop` costing `hits` (the descriptor's own
/// `hits_addend`: 0 reads without consuming).
async fn ask(
    client: &mut RateLimitServiceClient<Channel>,
    ip: &str,
    hits: u64,
) -> RateLimitResponse {
    let request = RateLimitRequest {
        domain: "shop".into(),
        descriptors: vec![RateLimitDescriptor {
            entries: vec![Entry {
                key: "remote_address".into(),
                value: ip.into(),
            }],
            hits_addend: Some(UInt64Value { value: hits }),
            ..Default::default()
        }],
        hits_addend: 0,
    };
    client
        .should_rate_limit(request)
        .await
        .unwrap()
        .into_inner()
}

/// (overall code, remaining, the limit Envoy is told) of an answer.
fn seen(r: &RateLimitResponse) -> (i32, u32, u32) {
    let status = &r.statuses[0];
    let limit = status.current_limit.as_ref().expect("a limit applied");
    (
        r.overall_code,
        status.limit_remaining,
        limit.requests_per_unit,
    )
}

/// The override API on `server` for `key` under `per_ip`: `PUT` with `body`, or `DELETE`.
async fn admin(server: &Sluicegate, key: &str, body: Option<&str>) -> u16 {
    let url = server.url(&format!("/v1/overrides/per_ip/{key}"));
    let client = reqwest::Client::new();
    let request = match body {
        Some(body) => client
            .put(url)
            .header("content-type", "application/json")
            .body(body.to_owned()),
        None => client.delete(url),
    };
    let response = request.header("authorization", ADMIN).send().await.unwrap();
    response.status().as_u16()
}

async fn overrides_on_the_envoy_path(store: &str) {
    let dir = tempfile::tempdir().unwrap();
    let toml = write(dir.path(), "sluicegate.toml", &config(store));
    let grpc = format!("127.0.0.1:{}", free_port());
    let server = Sluicegate::start(
        sluicegate_bin!(),
        &["--config", toml.to_str().unwrap(), "--envoy-listen", &grpc],
    );
    wait_for_port(server.envoy.expect("the banner names the Envoy listener"));
    let mut client = RateLimitServiceClient::connect(format!("http://{grpc}"))
        .await
        .unwrap();

    // The config's override is written in the background at start: peek until it shows.
    eventually("the [[overrides]] entry reaches the Envoy path", || {
        let mut client = client.clone();
        async move { seen(&ask(&mut client, "10.0.0.2", 0).await).2 == 2 }
    })
    .await;
    assert_eq!(seen(&ask(&mut client, "10.0.0.2", 1).await), (OK, 1, 2));
    assert_eq!(seen(&ask(&mut client, "10.0.0.2", 1).await), (OK, 0, 2));
    assert_eq!(ask(&mut client, "10.0.0.2", 1).await.overall_code, OVER);

    // 4 of the configured 5 used, then raised to 8: this one leaves 3.
    for left in (1..=4).rev() {
        assert_eq!(seen(&ask(&mut client, "10.0.0.1", 1).await), (OK, left, 5));
    }
    let key = "shop%2Fremote_address%3D10.0.0.1";
    assert_eq!(admin(&server, key, Some(r#"{"limit": 8}"#)).await, 200);
    assert_eq!(
        seen(&ask(&mut client, "10.0.0.1", 1).await),
        (OK, 3, 8),
        "4 used of 8, then this one"
    );
    // Another address keeps the policy's numbers.
    assert_eq!(seen(&ask(&mut client, "10.0.0.3", 1).await), (OK, 4, 5));
    // The API reads back what it set.
    let got = reqwest::Client::new()
        .get(server.url(&format!("/v1/overrides/per_ip/{key}")))
        .header("authorization", ADMIN)
        .send()
        .await
        .unwrap();
    assert_eq!(got.status(), 200);

    // Removed: the configured 5 again, with the 5 used kept, so the next one is over.
    assert_eq!(admin(&server, key, None).await, 204);
    assert_eq!(seen(&ask(&mut client, "10.0.0.1", 1).await), (OVER, 0, 5));
    // Lowered under what is used: refused at once.
    assert_eq!(admin(&server, key, Some(r#"{"limit": 7}"#)).await, 200);
    assert_eq!(seen(&ask(&mut client, "10.0.0.1", 1).await), (OK, 1, 7));
    assert_eq!(admin(&server, key, Some(r#"{"limit": 3}"#)).await, 200);
    assert_eq!(seen(&ask(&mut client, "10.0.0.1", 1).await), (OVER, 0, 3));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_override_is_honoured_by_envoy_decisions_on_redis() {
    let Some(redis) = RedisServer::start() else {
        return;
    };
    let store = format!(
        "[store]\nbackend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n",
        redis.url()
    );
    overrides_on_the_envoy_path(&store).await;
    // Written beside the placed states, in the domain's hash tag (the script reads it in
    // the same call), as well as at the unplaced key.
    assert_eq!(redis.keys("*{shop}*:per_ip:override").len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_override_is_honoured_by_envoy_decisions_on_a_redis_cluster() {
    let Some(cluster) = RedisCluster::start() else {
        return;
    };
    let store = format!(
        "[store]\nbackend = \"redis\"\ncluster = {:?}\ntimeout = \"2s\"\n",
        cluster.seeds()
    );
    overrides_on_the_envoy_path(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_api_override_is_honoured_by_envoy_decisions_on_memory() {
    overrides_on_the_envoy_path("[store]\nbackend = \"memory\"\n").await;
}
