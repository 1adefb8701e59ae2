//! `store.sync` against exact mode: decisions per second of one process (one instance) on a
//! `SyncedStore` (local decisions, counts exchanged with Redis every 100 ms) and on a
//! `RedisStore` (one script call per decision, coalesced), side by side in alternating
//! rounds against one redis-server this benchmark starts, with the same tasks, policy
//! (fixed_window) and key space. Also the CPU per decision of this process and of
//! redis-server (`INFO cpu`). Prints a Markdown table of medians and ratios.
//!
//! `cargo bench -p sluicegate-redis --bench sync -- [--seconds 3] [--rounds 5] [--keys 10000] [--pin]`
//! (`--pin`: redis-server on CPU 0, this process on CPU 1; see common/pin.rs).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sluicegate_core::{AlgorithmKind, CheckRequest, Policy, Store};
use sluicegate_redis::{RedisConfig, RedisStore, SyncOptions, SyncedStore};

#[path = "common/pin.rs"]
mod pin;
#[path = "common/server.rs"]
mod server;

use server::{server_cpu, start_server};

/// Concurrent tasks deciding in this process (as many as exact mode needs in flight).
const TASKS: usize = 256;
const SYNC: Duration = Duration::from_millis(100);

fn policy() -> Arc<Policy> {
    // A per-minute limit generous enough that every decision admits (and so counts).
    let p = Policy::builder(
        "fw",
        AlgorithmKind::FixedWindow,
        1_000_000_000,
        Duration::from_secs(60),
    );
    Arc::new(p.build().unwrap())
}

async fn rate(store: Arc<dyn Store>, keys: Arc<Vec<String>>, seconds: f64) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let handles: Vec<_> = (0..TASKS)
        .map(|t| {
            let (store, keys, done) = (Arc::clone(&store), Arc::clone(&keys), Arc::clone(&done));
            tokio::spawn(async move {
                let policies = [policy()];
                // Uniformly random keys (xorshift64*, a seed per task).
                let mut x = (t as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15);
                let mut n = 0u64;
                while Instant::now() < deadline {
                    // 64 decisions between clock reads: the loop, not the store, would
                    // otherwise dominate a local decision.
                    for _ in 0..64 {
                        x ^= x >> 12;
                        x ^= x << 25;
                        x ^= x >> 27;
                        let i = (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 32) as usize % keys.len();
                        store
                            .check(CheckRequest::new(&policies, &keys[i], 1))
                            .await
                            .unwrap();
                    }
                    n += 64;
                    tokio::task::yield_now().await;
                }
                done.fetch_add(n, Ordering::Relaxed);
            })
        })
        .collect();
    for handle in handles {
        handle.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// CPU seconds (user + system) of this process, from /proc/self/stat.
pub fn process_cpu() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<f64> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0.0))
        .collect();
    let get = |i: usize| fields.get(i).copied().unwrap_or(0.0) / 100.0;
    get(11) + get(12)
}

struct Phase {
    rate: f64,
    server_us: f64,
    client_us: f64,
}

fn measure(port: u16, seconds: f64, run: impl FnOnce() -> f64) -> Phase {
    let (own0, server0) = (process_cpu(), server_cpu(port));
    let rate = run();
    let (own1, server1) = (process_cpu(), server_cpu(port));
    let decisions = rate * seconds;
    Phase {
        rate,
        server_us: (server1 - server0) * 1e6 / decisions,
        client_us: (own1 - own0) * 1e6 / decisions,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let (mut seconds, mut rounds, mut keyspace) = (3.0, 5, 10_000usize);
    let args: Vec<String> = std::env::args().collect();
    for pair in args.windows(2) {
        match pair[0].as_str() {
            "--seconds" => seconds = pair[1].parse().expect("--seconds N"),
            "--rounds" => rounds = pair[1].parse().expect("--rounds N"),
            "--keys" => keyspace = pair[1].parse().expect("--keys N"),
            _ => {}
        }
    }
    let pin = args.iter().any(|a| a == "--pin");
    if pin {
        pin::pin_self(pin::CLIENT_CPU);
    }
    let server = start_server(pin.then_some(pin::SERVER_CPU));
    let port = server.1;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (exact, synced) = runtime.block_on(async {
        let mut config = RedisConfig::standalone(format!("redis://127.0.0.1:{port}/0"));
        config.timeout = Duration::from_secs(2);
        config.key_prefix = "exact".into();
        let exact: Arc<dyn Store> = Arc::new(RedisStore::connect(config.clone()).await.unwrap());
        config.key_prefix = "sync".into();
        let options = SyncOptions::new(SYNC, 1_000_000);
        let synced: Arc<dyn Store> = Arc::new(SyncedStore::connect(config, options).await.unwrap());
        (exact, synced)
    });
    let keys = Arc::new(
        (0..keyspace)
            .map(|i| format!("key-{i}"))
            .collect::<Vec<_>>(),
    );
    // Warm-up, untimed: every key decided once on each store (a synced instance reads a key
    // it has not seen from Redis first; the steady state is what is measured).
    runtime.block_on(async {
        let policies = [policy()];
        for store in [&exact, &synced] {
            for key in keys.iter() {
                store
                    .check(CheckRequest::new(&policies, key, 1))
                    .await
                    .unwrap();
            }
        }
    });
    let mut phases: [Vec<Phase>; 2] = [Vec::new(), Vec::new()];
    for round in 0..rounds {
        let e = measure(port, seconds, || {
            runtime.block_on(rate(Arc::clone(&exact), Arc::clone(&keys), seconds))
        });
        let s = measure(port, seconds, || {
            runtime.block_on(rate(Arc::clone(&synced), Arc::clone(&keys), seconds))
        });
        // This process's CPU share (cores busy) tells a round it was descheduled in (the
        // machine) from one where each decision cost more (the code).
        eprintln!(
            "round {round}: exact {:.0}/s, sync {:.0}/s ({:.1}x); redis µs/decision {:.2} vs {:.3}; client µs/decision {:.2} vs {:.2}, cores busy {:.2} vs {:.2}",
            e.rate,
            s.rate,
            s.rate / e.rate,
            e.server_us,
            s.server_us,
            e.client_us,
            s.client_us,
            e.client_us * e.rate / 1e6,
            s.client_us * s.rate / 1e6,
        );
        phases[0].push(e);
        phases[1].push(s);
    }
    let [exact, synced] = phases;
    let ratios: Vec<f64> = synced
        .iter()
        .zip(&exact)
        .map(|(s, e)| s.rate / e.rate)
        .collect();
    let (lo, hi) = ratios
        .iter()
        .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
    let ratio = median(ratios);
    let cpu_ratio = median(
        synced
            .iter()
            .zip(&exact)
            .map(|(s, e)| e.server_us / s.server_us)
            .collect(),
    );
    let column = |of: &[Phase], f: fn(&Phase) -> f64| median(of.iter().map(f).collect());
    println!(
        "| what ({keyspace} keys, {TASKS} tasks, median of {rounds} rounds × {seconds} s{}) | decisions/s | redis-server CPU µs/decision | client CPU µs/decision |",
        if pin { ", pinned" } else { "" }
    );
    println!("|---|---:|---:|---:|");
    for (name, of) in [
        ("exact (RedisStore)", &exact),
        ("store.sync = 100ms (SyncedStore)", &synced),
    ] {
        println!(
            "| {name} | {:.0} | {:.3} | {:.2} |",
            column(of, |p| p.rate),
            column(of, |p| p.server_us),
            column(of, |p| p.client_us)
        );
    }
    println!(
        "\nsync / exact decisions/s: median of per-round ratios {ratio:.1}x (rounds {lo:.1}–{hi:.1}x); redis-server CPU per decision exact / sync: {cpu_ratio:.0}x"
    );
}
