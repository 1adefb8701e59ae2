//! ShouldRateLimit throughput and latency over real gRPC (tonic client → tonic server on
//! loopback), with concurrent clients, on Sluicegate's in-memory store, on its Redis store
//! (a redis-server started on a free port, when one is installed), and — with
//! `--features peer-bench` — on Limitador's in-memory limiter behind the same tonic
//! service, so only the decision engine differs. Also the engines alone, in process.
//!
//! ```sh
//! cargo bench -p sluicegate-envoy --features peer-bench --bench should_rate_limit
//! BENCH_SECS=3 BENCH_CLIENTS=32 ...   # defaults
//! ```
//!
//! Every request carries two descriptors (client address, path) from 10 000 addresses;
//! limits are high enough that every request is admitted (the common path).

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService as Api;
use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
use sluicegate_core::{MemoryStore, Store};
use sluicegate_envoy::{EnvoyConfig, RateLimitService, SharedConfig};
use tonic::transport::Channel;
use tonic::transport::server::TcpIncoming;

const YAML: &str = "domain: bench
descriptors:
  - key: remote_address
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
  - key: path
    rate_limit: {unit: hour, requests_per_unit: 1000000000}
";
const ADDRESSES: usize = 10_000;
const CHANNELS: usize = 4;

fn request(i: usize) -> RateLimitRequest {
    let entry = |key: &str, value: String| RateLimitDescriptor {
        entries: vec![Entry {
            key: key.into(),
            value,
        }],
        ..Default::default()
    };
    let a = i % ADDRESSES;
    RateLimitRequest {
        domain: "bench".into(),
        descriptors: vec![
            entry(
                "remote_address",
                format!("10.{}.{}.{}", a >> 16, (a >> 8) & 255, a & 255),
            ),
            entry("path", format!("/api/{}", i % 16)),
        ],
        hits_addend: 0,
    }
}

async fn serve<S: Api>(service: S) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitServiceServer::new(service);
    tokio::spawn(
        tonic::transport::Server::builder()
            .add_service(server)
            .serve_with_incoming(TcpIncoming::from(listener).with_nodelay(Some(true))),
    );
    addr
}

struct Figures {
    calls_per_sec: f64,
    p50_us: f64,
    p99_us: f64,
    over_limit: usize,
    errors: usize,
}

async fn load(addr: SocketAddr, clients: usize, secs: f64) -> Figures {
    let mut channels = Vec::new();
    for _ in 0..CHANNELS {
        let channel = Channel::from_shared(format!("http://{addr}"))
            .unwrap()
            .connect()
            .await
            .unwrap();
        channels.push(channel);
    }
    // Warm up: every address once.
    let mut warm = RateLimitServiceClient::new(channels[0].clone());
    for i in 0..ADDRESSES {
        let _ = warm.should_rate_limit(request(i)).await;
    }
    let deadline = Instant::now() + Duration::from_secs_f64(secs);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let mut client = RateLimitServiceClient::new(channels[c % CHANNELS].clone());
        tasks.push(tokio::spawn(async move {
            let mut latencies = Vec::with_capacity(100_000);
            let (mut over, mut errors) = (0, 0);
            let mut i = c * 7919;
            while Instant::now() < deadline {
                let t = Instant::now();
                match client.should_rate_limit(request(i)).await {
                    Ok(r) => {
                        latencies.push(t.elapsed().as_nanos() as u64);
                        let r: RateLimitResponse = r.into_inner();
                        over += usize::from(r.overall_code != 1);
                    }
                    Err(_) => errors += 1,
                }
                i += 1;
            }
            (latencies, over, errors)
        }));
    }
    let mut all = Vec::new();
    let (mut over_limit, mut errors) = (0, 0);
    for t in tasks {
        let (l, o, e) = t.await.unwrap();
        all.extend(l);
        over_limit += o;
        errors += e;
    }
    let elapsed = started.elapsed().as_secs_f64();
    all.sort_unstable();
    let pct = |p: f64| all[((all.len() as f64 * p) as usize).min(all.len() - 1)] as f64 / 1000.0;
    Figures {
        calls_per_sec: all.len() as f64 / elapsed,
        p50_us: pct(0.50),
        p99_us: pct(0.99),
        over_limit,
        errors,
    }
}

fn sluicegate(store: Arc<dyn Store>) -> RateLimitService {
    let config = EnvoyConfig::from_yaml_str(YAML, None).unwrap();
    RateLimitService::new(store, SharedConfig::new(config))
}

/// Starts a redis-server on a free port; `None` when it is not installed.
fn start_redis() -> Option<(std::process::Child, u16)> {
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .ok()?
        .local_addr()
        .ok()?
        .port();
    let child = std::process::Command::new("redis-server")
        .args([
            "--port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
            "--save",
            "",
            "--appendonly",
            "no",
        ])
        .stdout(std::process::Stdio::null())
        .spawn()
        .ok()?;
    for _ in 0..100 {
        if std::net::TcpStream::connect(("127.0.0.1", port)).is_ok() {
            return Some((child, port));
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    None
}

/// A free port whose cluster bus port (+10000) is free too.
fn cluster_port() -> Option<u16> {
    for _ in 0..50 {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .ok()?
            .local_addr()
            .ok()?
            .port();
        if port < 55_000 && std::net::TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return Some(port);
        }
    }
    None
}

/// Starts a 3-master Redis Cluster (no replicas) in `dir`; `None` when redis-server or
/// redis-cli is missing.
fn start_cluster(dir: &std::path::Path) -> Option<(Vec<std::process::Child>, Vec<u16>)> {
    let mut children = Vec::new();
    let mut ports = Vec::new();
    for i in 0..3 {
        let port = cluster_port()?;
        let node_dir = dir.join(format!("node{i}"));
        std::fs::create_dir_all(&node_dir).ok()?;
        let child = std::process::Command::new("redis-server")
            .args([
                "--port",
                &port.to_string(),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
            ])
            .args(["--appendonly", "no", "--cluster-enabled", "yes"])
            .args(["--cluster-config-file", "nodes.conf", "--dir"])
            .arg(&node_dir)
            .stdout(std::process::Stdio::null())
            .spawn()
            .ok()?;
        children.push(child);
        ports.push(port);
    }
    for &port in &ports {
        let up = (0..100).any(|_| {
            std::thread::sleep(Duration::from_millis(50));
            std::net::TcpStream::connect(("127.0.0.1", port)).is_ok()
        });
        if !up {
            return None;
        }
    }
    let addrs: Vec<String> = ports.iter().map(|p| format!("127.0.0.1:{p}")).collect();
    let created = std::process::Command::new("redis-cli")
        .args(["--cluster", "create"])
        .args(&addrs)
        .args(["--cluster-replicas", "0", "--cluster-yes"])
        .output()
        .ok()?;
    if !created.status.success() {
        return None;
    }
    for &port in &ports {
        let ok = (0..200).any(|_| {
            std::thread::sleep(Duration::from_millis(50));
            std::process::Command::new("redis-cli")
                .args(["-p", &port.to_string(), "cluster", "info"])
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).contains("cluster_state:ok"))
        });
        if !ok {
            return None;
        }
    }
    Some((children, ports))
}

#[cfg(feature = "peer-bench")]
mod peer {
    //! Limitador's in-memory limiter behind the same tonic RLS service, with the same two
    //! limits, descriptors bound the way limitador-server binds them.
    use std::collections::HashMap;

    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_response::{
        Code, DescriptorStatus,
    };
    use envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_server::RateLimitService as Api;
    use envoy_types::pb::envoy::service::ratelimit::v3::{RateLimitRequest, RateLimitResponse};
    use limitador::RateLimiter;
    use limitador::limit::{Context, Expression, Limit, Namespace, Predicate};
    use tonic::{Request, Response, Status};

    pub struct LimitadorRls(pub RateLimiter);

    pub fn limiter() -> RateLimiter {
        let limiter = RateLimiter::new(100_000);
        for (i, key) in ["remote_address", "path"].into_iter().enumerate() {
            let condition = Predicate::parse(format!("descriptors[{i}]['{key}'] != ''")).unwrap();
            let variable = Expression::parse(format!("descriptors[{i}]['{key}']")).unwrap();
            limiter.add_limit(Limit::new(
                "bench",
                1_000_000_000,
                3600,
                [condition],
                [variable],
            ));
        }
        limiter
    }

    pub fn decide(limiter: &RateLimiter, request: &RateLimitRequest) -> bool {
        let descriptors: Vec<HashMap<String, String>> = request
            .descriptors
            .iter()
            .map(|d| {
                d.entries
                    .iter()
                    .map(|e| (e.key.clone(), e.value.clone()))
                    .collect()
            })
            .collect();
        let mut ctx = Context::default();
        ctx.list_binding("descriptors".to_string(), descriptors);
        let namespace = Namespace::from(request.domain.as_str());
        let hits = u64::from(request.hits_addend.max(1));
        match limiter.check_rate_limited_and_update(&namespace, &ctx, hits) {
            Ok(result) => !result.limited,
            Err(_) => false,
        }
    }

    #[tonic::async_trait]
    impl Api for LimitadorRls {
        async fn should_rate_limit(
            &self,
            request: Request<RateLimitRequest>,
        ) -> Result<Response<RateLimitResponse>, Status> {
            let request = request.into_inner();
            let code = if decide(&self.0, &request) {
                Code::Ok
            } else {
                Code::OverLimit
            } as i32;
            Ok(Response::new(RateLimitResponse {
                overall_code: code,
                statuses: request
                    .descriptors
                    .iter()
                    .map(|_| DescriptorStatus {
                        code,
                        ..Default::default()
                    })
                    .collect(),
                ..Default::default()
            }))
        }
    }
}

/// The engines alone, in process: calls per second on one thread.
fn in_process(name: &str, mut decide: impl FnMut(usize) -> bool) -> f64 {
    for i in 0..ADDRESSES {
        assert!(decide(i), "{name} refused during warm-up");
    }
    let n = 200_000;
    let started = Instant::now();
    let mut ok = 0usize;
    for i in 0..n {
        ok += usize::from(decide(i));
    }
    assert_eq!(ok, n, "{name} refused requests");
    n as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let secs: f64 = std::env::var("BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    let clients_list: Vec<usize> = std::env::var("BENCH_CLIENTS")
        .ok()
        .map(|s| s.split(',').filter_map(|c| c.parse().ok()).collect())
        .unwrap_or_else(|| vec![8, 64]);
    // `cargo bench` passes --bench; nothing else is read.
    let server_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();
    let client_rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(1)
        .enable_all()
        .build()
        .unwrap();

    println!("| engine (gRPC, 2 descriptors) | clients | calls/s | p50 µs | p99 µs | errors |");
    println!("| --- | ---: | ---: | ---: | ---: | ---: |");
    let report = |name: &str, clients: usize, f: Figures| {
        assert_eq!(f.over_limit, 0, "{name}: unexpected OVER_LIMIT answers");
        println!(
            "| {name} | {clients} | {:.0} | {:.0} | {:.0} | {} |",
            f.calls_per_sec, f.p50_us, f.p99_us, f.errors
        );
        f.calls_per_sec
    };

    let memory_addr = server_rt
        .block_on(async { serve(sluicegate(Arc::new(MemoryStore::new(1_000_000)))).await });
    let mut memory = Vec::new();
    for &c in &clients_list {
        memory.push(report(
            "sluicegate memory",
            c,
            client_rt.block_on(load(memory_addr, c, secs)),
        ));
    }

    let redis = start_redis();
    if let Some((_, port)) = &redis {
        let url = format!("redis://127.0.0.1:{port}/0");
        let addr = server_rt.block_on(async {
            let mut config = sluicegate_redis::RedisConfig::standalone(url);
            // Measure throughput, not the fail-fast timeout: the machine is shared.
            config.timeout = Duration::from_secs(2);
            let store = sluicegate_redis::RedisStore::connect(config).await.unwrap();
            serve(sluicegate(Arc::new(store))).await
        });
        for &c in &clients_list {
            report(
                "sluicegate redis",
                c,
                client_rt.block_on(load(addr, c, secs)),
            );
        }
    } else {
        println!("(redis-server not installed: Redis rows skipped)");
    }

    // The same two descriptors on a 3-master cluster: one slot per domain, one script call.
    let cluster_dir = std::env::temp_dir().join(format!("sg-bench-cluster-{}", std::process::id()));
    let cluster = start_cluster(&cluster_dir);
    if let Some((_, ports)) = &cluster {
        let seeds: Vec<String> = ports
            .iter()
            .map(|p| format!("redis://127.0.0.1:{p}"))
            .collect();
        let addr = server_rt.block_on(async {
            let mut config = sluicegate_redis::RedisConfig::cluster(seeds);
            config.timeout = Duration::from_secs(2);
            let store = sluicegate_redis::RedisStore::connect(config).await.unwrap();
            serve(sluicegate(Arc::new(store))).await
        });
        for &c in &clients_list {
            report(
                "sluicegate redis-cluster (3 masters)",
                c,
                client_rt.block_on(load(addr, c, secs)),
            );
        }
    } else {
        println!("(no Redis Cluster could be started: cluster rows skipped)");
    }

    #[cfg(feature = "peer-bench")]
    {
        let addr = server_rt.block_on(async { serve(peer::LimitadorRls(peer::limiter())).await });
        for (i, &c) in clients_list.iter().enumerate() {
            let peer = report(
                "limitador memory",
                c,
                client_rt.block_on(load(addr, c, secs)),
            );
            println!(
                "| ratio sluicegate/limitador | {c} | {:.2}× | | | |",
                memory[i] / peer
            );
        }
    }

    println!();
    println!("| engine alone (in process, 1 thread) | decisions/s |");
    println!("| --- | ---: |");
    let service = sluicegate(Arc::new(MemoryStore::new(1_000_000)));
    let rt = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let ours = in_process("sluicegate", |i| {
        rt.block_on(service.decide(&request(i)))
            .unwrap()
            .overall_code
            == 1
    });
    println!("| sluicegate RateLimitService::decide (memory) | {ours:.0} |");
    #[cfg(feature = "peer-bench")]
    {
        let limiter = peer::limiter();
        let theirs = in_process("limitador", |i| peer::decide(&limiter, &request(i)));
        println!("| limitador RateLimiter::check_rate_limited_and_update | {theirs:.0} |");
        println!("| ratio | {:.2}× |", ours / theirs);
    }
    if let Some((mut child, _)) = redis {
        let _ = child.kill();
        let _ = child.wait();
    }
    for mut child in cluster.map(|(children, _)| children).unwrap_or_default() {
        let _ = child.kill();
        let _ = child.wait();
    }
    let _ = std::fs::remove_dir_all(&cluster_dir);
}
