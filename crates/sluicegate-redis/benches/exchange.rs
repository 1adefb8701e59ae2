//! The fixed cost of `store.sync`, one exchange at a time: this process's CPU per window
//! count sent to Redis and read back, apart from the decisions. In the `sync` benchmark
//! this cost is paid every interval for every key used in the last intervals, whatever
//! the decision rate, so on a process given a fraction of a core it sets how much is left
//! for deciding (docs/benchmarks/redis.md, "store.sync").
//!
//! One `SyncedStore` on a current-thread runtime (every part of an exchange, the
//! connection's reader included, runs on this thread), the interval so long that its timer
//! never fires during the rounds: each round decides every key once (each then has a count
//! to add) and calls `sync_now`; then the same rounds without decisions (every key still
//! recent, so read back with nothing to add). CPU time from /proc/thread-self/schedstat
//! (nanoseconds of this thread on a CPU), redis-server's from `INFO cpu`.
//!
//! `cargo bench -p sluicegate-redis --bench exchange -- [--keys 10000] [--rounds 40] [--pin]`
//! (`--pin`: redis-server on CPU 0, this process on CPU 1; see common/pin.rs).

use std::sync::Arc;
use std::time::Duration;

use sluicegate_core::{AlgorithmKind, CheckRequest, Policy, Store};
use sluicegate_redis::{RedisConfig, SyncOptions, SyncedStore};

#[path = "common/pin.rs"]
mod pin;
#[path = "common/server.rs"]
mod server;

use server::{server_cpu, start_server};

/// Nanoseconds this thread has run on a CPU.
fn thread_ns() -> u64 {
    let stat = std::fs::read_to_string("/proc/thread-self/schedstat").unwrap_or_default();
    stat.split_whitespace()
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

/// CPU of one kind of round: this thread's deciding and exchanging, redis-server's.
#[derive(Default)]
struct Cost {
    decide_ns: u64,
    exchange_ns: u64,
    server_s: f64,
}

async fn rounds(
    store: &SyncedStore,
    keys: &[String],
    rounds: usize,
    decide: bool,
    port: u16,
) -> Cost {
    let policies = [Arc::new(
        Policy::builder(
            "fw",
            AlgorithmKind::FixedWindow,
            1_000_000_000,
            Duration::from_secs(60),
        )
        .build()
        .unwrap(),
    )];
    let mut cost = Cost::default();
    let server0 = server_cpu(port);
    for _ in 0..rounds {
        let t0 = thread_ns();
        if decide {
            for key in keys {
                store
                    .check(CheckRequest::new(&policies, key, 1))
                    .await
                    .unwrap();
            }
        }
        let t1 = thread_ns();
        store.sync_now().await.unwrap();
        let t2 = thread_ns();
        cost.decide_ns += t1 - t0;
        cost.exchange_ns += t2 - t1;
    }
    cost.server_s = server_cpu(port) - server0;
    cost
}

fn main() {
    let (mut keyspace, mut count) = (10_000usize, 40usize);
    let args: Vec<String> = std::env::args().collect();
    for pair in args.windows(2) {
        match pair[0].as_str() {
            "--keys" => keyspace = pair[1].parse().expect("--keys N"),
            "--rounds" => count = pair[1].parse().expect("--rounds N"),
            _ => {}
        }
    }
    let pin = args.iter().any(|a| a == "--pin");
    if pin {
        pin::pin_self(pin::CLIENT_CPU);
    }
    let server = start_server(pin.then_some(pin::SERVER_CPU));
    let port = server.1;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let keys: Vec<String> = (0..keyspace).map(|i| format!("key-{i}")).collect();
    let [written, read] = runtime.block_on(async {
        let mut config = RedisConfig::standalone(format!("redis://127.0.0.1:{port}/0"));
        config.timeout = Duration::from_secs(5);
        let options = SyncOptions::new(Duration::from_secs(3600), 1_000_000);
        let store = SyncedStore::connect(config, options).await.unwrap();
        // Warm-up: every key read once and known to Redis.
        rounds(&store, &keys, 2, true, port).await;
        [
            rounds(&store, &keys, count, true, port).await,
            rounds(&store, &keys, count, false, port).await,
        ]
    });
    let updates = (keyspace * count) as f64;
    println!(
        "| {keyspace} keys, {count} exchanges | client ns / decision | client ns / exchanged key | redis-server ns / exchanged key |"
    );
    println!("|---|---:|---:|---:|");
    for (name, cost) in [
        ("each key with a count to add", &written),
        ("each key read only", &read),
    ] {
        println!(
            "| {name} | {:.0} | {:.0} | {:.0} |",
            cost.decide_ns as f64 / updates,
            cost.exchange_ns as f64 / updates,
            cost.server_s * 1e9 / updates,
        );
    }
}
