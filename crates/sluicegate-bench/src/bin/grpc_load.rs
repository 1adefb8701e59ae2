//! A gRPC load generator for Envoy's rate limit API
//! (`envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit`), for
//! `crates/sluicegate-bench/envoy_bench.sh`: `ghz` is not available here, so this drives
//! a running `sluicegate serve` (or any rate limit service) the way Envoy does.
//!
//! ```sh
//! grpc_load --target 127.0.0.1:8081 --concurrency 16 --connections 4 --seconds 5 \
//!           --warmup 1 --pid <server pid> --label redis
//! ```
//!
//! `concurrency` tasks share `connections` HTTP/2 connections, each sending its next call
//! as soon as the previous answer arrives. Every call carries two descriptors of domain
//! `bench` (`remote_address` from 10 000 addresses, `path` from 16 paths). With `--pid` the
//! server's CPU time (user + system, from `/proc/<pid>/stat`) over the measured run is read
//! and divided by the calls; `--store-pids a,b,c` does the same for the store's processes
//! (redis-server). Prints one line of `key=value` fields: `label`, `calls`, `calls_per_sec`,
//! `p50_us`, `p90_us`, `p99_us`, `over_limit`, `errors`, `server_cpu_ms`, `cpu_us_per_call`,
//! `store_cpu_us_per_call`.

use std::time::{Duration, Instant};

use sluicegate_envoy::envoy_types::pb::envoy::extensions::common::ratelimit::v3::{
    RateLimitDescriptor, rate_limit_descriptor::Entry,
};
use sluicegate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::RateLimitRequest;
use sluicegate_envoy::envoy_types::pb::envoy::service::ratelimit::v3::rate_limit_service_client::RateLimitServiceClient;
use tonic::transport::{Channel, Endpoint};

const ADDRESSES: usize = 10_000;

/// The command line.
struct Args {
    target: String,
    concurrency: usize,
    connections: usize,
    seconds: f64,
    warmup: f64,
    pid: Option<u32>,
    store_pids: Vec<u32>,
    label: String,
}

fn parse_args() -> Result<Args, String> {
    let mut args = Args {
        target: String::new(),
        concurrency: 16,
        connections: 4,
        seconds: 5.0,
        warmup: 1.0,
        pid: None,
        store_pids: Vec::new(),
        label: "run".into(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let value = it.next().ok_or(format!("{flag} needs a value"))?;
        let bad = |e: &dyn std::fmt::Display| format!("{flag} {value}: {e}");
        match flag.as_str() {
            "--target" => args.target = value,
            "--concurrency" => args.concurrency = value.parse().map_err(|e| bad(&e))?,
            "--connections" => args.connections = value.parse().map_err(|e| bad(&e))?,
            "--seconds" => args.seconds = value.parse().map_err(|e| bad(&e))?,
            "--warmup" => args.warmup = value.parse().map_err(|e| bad(&e))?,
            "--pid" => args.pid = Some(value.parse().map_err(|e| bad(&e))?),
            "--store-pids" => {
                args.store_pids = value
                    .split(',')
                    .map(|p| p.parse().map_err(|e| bad(&e)))
                    .collect::<Result<_, _>>()?;
            }
            "--label" => args.label = value,
            _ => return Err(format!("unknown flag {flag}")),
        }
    }
    if args.target.is_empty() || args.concurrency == 0 || args.connections == 0 {
        return Err("usage: grpc_load --target HOST:PORT [--concurrency N] [--connections C] [--seconds S] [--warmup S] [--pid PID] [--label NAME]".into());
    }
    Ok(args)
}

/// Call `i`: two descriptors, like a route with `remote_address` and a path action.
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

/// What one task saw.
#[derive(Default)]
struct Tally {
    latencies_us: Vec<u32>,
    over_limit: usize,
    errors: usize,
}

/// Calls as fast as answers come until `until`; latencies are kept only after `measure_from`.
async fn drive(
    mut client: RateLimitServiceClient<Channel>,
    first: usize,
    stride: usize,
    measure_from: Instant,
    until: Instant,
) -> Tally {
    let mut tally = Tally::default();
    let mut i = first;
    loop {
        let started = Instant::now();
        if started >= until {
            return tally;
        }
        let answer = client.should_rate_limit(request(i)).await;
        i += stride;
        if started < measure_from {
            continue;
        }
        let micros = started.elapsed().as_micros();
        tally
            .latencies_us
            .push(u32::try_from(micros).unwrap_or(u32::MAX));
        match answer {
            Ok(r) if r.get_ref().overall_code == 2 => tally.over_limit += 1,
            Ok(_) => {}
            Err(_) => tally.errors += 1,
        }
    }
}

/// User + system CPU time of `pid` in milliseconds, from `/proc/<pid>/stat`.
fn cpu_ms(pid: u32) -> Result<f64, String> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).map_err(|e| e.to_string())?;
    // The command name may hold spaces: fields are counted after its closing parenthesis.
    let rest = stat.rsplit_once(')').ok_or("no ) in /proc/<pid>/stat")?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After ")": state is field 3 of the man page, so utime (14) and stime (15) are 11 and 12.
    let ticks = |i: usize| -> Result<f64, String> {
        fields
            .get(i)
            .ok_or("short /proc/<pid>/stat")?
            .parse::<f64>()
            .map_err(|e| e.to_string())
    };
    // SAFETY: sysconf only reads a system constant.
    let per_sec = unsafe { libc::sysconf(libc::_SC_CLK_TCK) } as f64;
    Ok((ticks(11)? + ticks(12)?) * 1000.0 / per_sec)
}

/// The CPU time of all of `pids` together, in milliseconds.
fn cpus_ms(pids: &[u32]) -> Result<f64, String> {
    pids.iter().map(|&p| cpu_ms(p)).sum()
}

fn percentile(sorted: &[u32], p: f64) -> u32 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = ((sorted.len() - 1) as f64 * p).round() as usize;
    sorted[rank]
}

async fn run(args: Args) -> Result<(), Box<dyn std::error::Error>> {
    let endpoint = Endpoint::from_shared(format!("http://{}", args.target))?.tcp_nodelay(true);
    let mut channels = Vec::with_capacity(args.connections);
    for _ in 0..args.connections {
        channels.push(endpoint.connect().await?);
    }
    let start = Instant::now();
    let measure_from = start + Duration::from_secs_f64(args.warmup);
    let until = measure_from + Duration::from_secs_f64(args.seconds);
    let mut tasks = tokio::task::JoinSet::new();
    for t in 0..args.concurrency {
        let client = RateLimitServiceClient::new(channels[t % channels.len()].clone());
        tasks.spawn(drive(client, t, args.concurrency, measure_from, until));
    }
    tokio::time::sleep_until(measure_from.into()).await;
    let cpu_before = args.pid.map(cpu_ms).transpose()?;
    let store_before = cpus_ms(&args.store_pids)?;
    let measured = Instant::now();
    let mut all = Tally::default();
    while let Some(joined) = tasks.join_next().await {
        let tally = joined?;
        all.latencies_us.extend(tally.latencies_us);
        all.over_limit += tally.over_limit;
        all.errors += tally.errors;
    }
    let elapsed = measured.elapsed().as_secs_f64();
    let cpu = match (args.pid, cpu_before) {
        (Some(pid), Some(before)) => Some(cpu_ms(pid)? - before),
        _ => None,
    };
    let store_cpu =
        (!args.store_pids.is_empty()).then_some(cpus_ms(&args.store_pids)? - store_before);
    all.latencies_us.sort_unstable();
    let calls = all.latencies_us.len();
    let shown = |ms: Option<f64>, per_call: bool| {
        ms.map_or("-".to_owned(), |ms| {
            let value = if per_call {
                ms * 1000.0 / calls.max(1) as f64
            } else {
                ms
            };
            format!("{value:.1}")
        })
    };
    println!(
        "label={} calls={calls} calls_per_sec={:.0} p50_us={} p90_us={} p99_us={} over_limit={} errors={} server_cpu_ms={} cpu_us_per_call={} store_cpu_us_per_call={}",
        args.label,
        calls as f64 / elapsed,
        percentile(&all.latencies_us, 0.50),
        percentile(&all.latencies_us, 0.90),
        percentile(&all.latencies_us, 0.99),
        all.over_limit,
        all.errors,
        shown(cpu, false),
        shown(cpu, true),
        shown(store_cpu, true),
    );
    Ok(())
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args = parse_args()?;
    // One thread: the load generator takes as little of the 2 cores as it can.
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?
        .block_on(run(args))
}
