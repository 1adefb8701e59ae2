//! Decisions per second of `RedisStore` from one process, side by side with `redis-benchmark`
//! running the equivalent raw token-bucket script by EVALSHA (pipelined, `-P 16`), against
//! one redis-server this benchmark starts, with the same number of requests in flight and
//! the same key space. Then the batch API. Rounds alternate the three so machine noise hits
//! all alike; the medians and ratios are printed as a Markdown table.
//!
//! `cargo bench -p sluicegate-redis --bench throughput -- [--seconds 3] [--rounds 3] [--slices 5] [--pin]`
//!
//! Each round gives every phase `--seconds` in `--slices` slices, the three alternating
//! (see `slice_round`).
//!
//! `--pin` (2+ CPUs): redis-server runs on CPU 0 and every client, this process and
//! redis-benchmark alike, on CPU 1 (`taskset`), so the server has a core to itself on both
//! sides and neither client takes CPU from it: what a round measures is then the server's
//! work per decision, the resource the store exists to save, not who won the scheduler.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use sluicegate_core::{AlgorithmKind, CheckRequest, Policy, Store};
use sluicegate_redis::{RedisConfig, RedisStore};

#[path = "common/pin.rs"]
mod pin;
use pin::{CLIENT_CPU, SERVER_CPU, command, pin_self};

const KEYSPACE: usize = 10_000;
/// redis-benchmark connections × pipeline depth = requests in flight.
const CLIENTS: usize = 16;
const PIPELINE: usize = 16;
const IN_FLIGHT: usize = CLIENTS * PIPELINE;
const BATCH: usize = 64;

struct Server(Child, u16);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn start_server(cpu: Option<&str>) -> Server {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // Owned by `Server` at once, so it is killed and reaped on every path.
    let server = Server(
        command("redis-server", cpu)
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
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/install-test-deps.sh)"),
        port,
    );
    for _ in 0..200 {
        if cli(port, &["ping"]).contains("PONG") {
            return server;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("redis-server did not start");
}

fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

fn policy() -> Arc<Policy> {
    // Generous enough that most decisions admit and write, like steady traffic.
    Arc::new(
        Policy::builder(
            "tb",
            AlgorithmKind::TokenBucket,
            1_000,
            Duration::from_secs(1),
        )
        .build()
        .unwrap(),
    )
}

/// redis-benchmark's rate running `n` raw script calls.
fn raw_rate(port: u16, sha: &str, n: usize, cpu: Option<&str>) -> f64 {
    // limit 1000 per 1 s reduced by gcd(1000, 1_000_000) = 1000: limit 1, period 1000.
    let out = command("redis-benchmark", cpu)
        .args([
            "-p",
            &port.to_string(),
            "-c",
            &CLIENTS.to_string(),
            "-P",
            &PIPELINE.to_string(),
        ])
        .args(["-n", &n.to_string(), "-r", &KEYSPACE.to_string(), "-q"])
        .args([
            "evalsha",
            sha,
            "1",
            "raw:{key-__rand_int__}:tb",
            "1",
            "1000",
            "1000",
            "1",
        ])
        .output()
        .expect("redis-benchmark");
    let text = String::from_utf8_lossy(&out.stdout);
    // "evalsha ...: 123456.79 requests per second, p50=..."
    let rate = text.rsplit(": ").find_map(|part| {
        part.split(" requests per second")
            .next()?
            .trim()
            .parse::<f64>()
            .ok()
    });
    rate.unwrap_or_else(|| panic!("could not read redis-benchmark output: {text}"))
}

async fn store_rate(
    store: Arc<RedisStore>,
    keys: Arc<Vec<String>>,
    seconds: f64,
    batch: usize,
) -> f64 {
    let tasks = if batch == 1 {
        IN_FLIGHT
    } else {
        (IN_FLIGHT / batch).max(4)
    };
    let done = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs_f64(seconds);
    let started = Instant::now();
    let handles: Vec<_> = (0..tasks)
        .map(|t| {
            let (store, keys, done) = (Arc::clone(&store), Arc::clone(&keys), Arc::clone(&done));
            tokio::spawn(async move {
                let policies = [policy()];
                let mut i = t.wrapping_mul(7919);
                while Instant::now() < deadline {
                    if batch == 1 {
                        i = (i + 104_729) % KEYSPACE;
                        store
                            .check(CheckRequest::new(&policies, &keys[i], 1))
                            .await
                            .unwrap();
                        done.fetch_add(1, Ordering::Relaxed);
                    } else {
                        let requests: Vec<CheckRequest<'_>> = (0..batch)
                            .map(|_| {
                                i = (i + 104_729) % KEYSPACE;
                                CheckRequest::new(&policies, &keys[i], 1)
                            })
                            .collect();
                        for verdict in store.check_batch(&requests).await {
                            verdict.unwrap();
                        }
                        done.fetch_add(batch as u64, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    for handle in handles {
        handle.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

/// CPU seconds (user + system) of this process and of its waited-for children
/// (redis-benchmark), from /proc/self/stat.
fn process_cpu() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let fields: Vec<f64> = stat
        .rsplit(')')
        .next()
        .unwrap_or("")
        .split_whitespace()
        .map(|f| f.parse().unwrap_or(0.0))
        .collect();
    // After the command name: utime, stime, cutime, cstime are fields 12..16 (0-based 11..14).
    let tick = 100.0;
    let get = |i: usize| fields.get(i).copied().unwrap_or(0.0) / tick;
    (get(11) + get(12), get(13) + get(14))
}

/// CPU seconds redis-server has used, from INFO cpu.
fn server_cpu(port: u16) -> f64 {
    cli(port, &["info", "cpu"])
        .lines()
        .filter(|l| l.starts_with("used_cpu_sys:") || l.starts_with("used_cpu_user:"))
        .filter_map(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
        .sum()
}

/// One measured phase: decisions per second, and CPU µs per decision on the server and on
/// the client side (this process, or redis-benchmark).
struct Phase {
    rate: f64,
    server_us: f64,
    client_us: f64,
    decisions: f64,
    seconds: f64,
}

impl Phase {
    /// The slices of one phase of a round as one phase: decisions over time, CPU over
    /// decisions.
    fn total(slices: &[Phase]) -> Phase {
        let decisions: f64 = slices.iter().map(|p| p.decisions).sum();
        let seconds: f64 = slices.iter().map(|p| p.seconds).sum();
        let weighted = |f: fn(&Phase) -> f64| {
            slices.iter().map(|p| f(p) * p.decisions).sum::<f64>() / decisions
        };
        Phase {
            rate: decisions / seconds,
            server_us: weighted(|p| p.server_us),
            client_us: weighted(|p| p.client_us),
            decisions,
            seconds,
        }
    }
}

fn measure(port: u16, child_client: bool, run: impl FnOnce() -> (f64, f64)) -> Phase {
    let (own0, children0) = process_cpu();
    let server0 = server_cpu(port);
    let (rate, seconds) = run();
    let (own1, children1) = process_cpu();
    let server1 = server_cpu(port);
    let decisions = rate * seconds;
    let client = if child_client {
        children1 - children0
    } else {
        own1 - own0
    };
    Phase {
        rate,
        server_us: (server1 - server0) * 1e6 / decisions,
        client_us: client * 1e6 / decisions,
        decisions,
        seconds,
    }
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// Command-line options.
struct Options {
    seconds: f64,
    rounds: usize,
    /// Each phase of a round runs in this many slices, the three kinds alternating.
    slices: usize,
    pin: bool,
}

fn options() -> Options {
    let mut o = Options {
        seconds: 3.0,
        rounds: 3,
        slices: 5,
        pin: false,
    };
    let args: Vec<String> = std::env::args().collect();
    o.pin = args.iter().any(|a| a == "--pin");
    for pair in args.windows(2) {
        match pair[0].as_str() {
            "--seconds" => o.seconds = pair[1].parse().expect("--seconds N"),
            "--rounds" => o.rounds = pair[1].parse().expect("--rounds N"),
            "--slices" => o.slices = pair[1].parse().expect("--slices N"),
            _ => {}
        }
    }
    o
}

/// What every phase runs against.
struct Rig<'a> {
    runtime: &'a tokio::runtime::Runtime,
    store: &'a Arc<RedisStore>,
    keys: &'a Arc<Vec<String>>,
    sha: &'a str,
    port: u16,
    client_cpu: Option<&'a str>,
}

/// One slice of each phase, `seconds` long: raw, then the batch (the ratio with the
/// tightest target compares the two closest in time), then single checks. A round is
/// several slices of each, alternating, so a burst of the machine's other work that lasts
/// a few seconds falls on all three alike instead of on one phase (with one phase of 5 s
/// each, a round's ratio was the luck of which phase the burst hit).
///
/// redis-benchmark runs a number of requests, not a time: `raw_rate` (its last rate) sizes
/// it to last about `seconds` like the store's slices (a fixed 140,000 a second made the
/// raw phase last 30–50 s on a loaded machine against the store's 5 s).
fn slice_round(rig: &Rig<'_>, raw_rate_last: &mut f64, seconds: f64) -> [Phase; 3] {
    let Rig {
        runtime,
        store,
        keys,
        sha,
        port,
        client_cpu,
    } = *rig;
    let raw = measure(port, true, || {
        let n = (*raw_rate_last * seconds).clamp(2_000.0, 140_000.0 * seconds) as usize;
        let rate = raw_rate(port, sha, n, client_cpu);
        (rate, n as f64 / rate)
    });
    *raw_rate_last = raw.rate;
    let [batch, single] = [BATCH, 1].map(|batch| {
        measure(port, false, || {
            let rate = runtime.block_on(store_rate(
                Arc::clone(store),
                Arc::clone(keys),
                seconds,
                batch,
            ));
            (rate, seconds)
        })
    });
    [raw, single, batch]
}

fn main() {
    let o = options();
    let (server_cpu, client_cpu) = if o.pin {
        pin_self(CLIENT_CPU);
        (Some(SERVER_CPU), Some(CLIENT_CPU))
    } else {
        (None, None)
    };
    let server = start_server(server_cpu);
    let port = server.1;
    let raw_script = include_str!("raw_token_bucket.lua");
    let sha = cli(port, &["script", "load", raw_script]);
    assert_eq!(sha.len(), 40, "SCRIPT LOAD failed: {sha}");

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let store = runtime.block_on(async {
        let mut config = RedisConfig::standalone(format!("redis://127.0.0.1:{port}/0"));
        config.key_prefix = "bench".into();
        config.timeout = Duration::from_secs(2);
        Arc::new(RedisStore::connect(config).await.unwrap())
    });
    let keys = Arc::new(
        (0..KEYSPACE)
            .map(|i| format!("key-{i}"))
            .collect::<Vec<_>>(),
    );

    let rig = Rig {
        runtime: &runtime,
        store: &store,
        keys: &keys,
        sha: &sha,
        port,
        client_cpu,
    };
    let mut raw_n = raw_rate(port, &sha, 20_000, client_cpu);
    let mut phases: [Vec<Phase>; 3] = [Vec::new(), Vec::new(), Vec::new()];
    let slice = o.seconds / o.slices.max(1) as f64;
    for round in 0..o.rounds {
        let mut slices: [Vec<Phase>; 3] = [Vec::new(), Vec::new(), Vec::new()];
        for _ in 0..o.slices.max(1) {
            let [raw, single, batch] = slice_round(&rig, &mut raw_n, slice);
            slices[0].push(raw);
            slices[1].push(single);
            slices[2].push(batch);
        }
        let [raw, single, batch] = slices.map(|s| Phase::total(&s));
        eprintln!(
            "round {round}: raw {:.0}/s, store {:.0}/s ({:.2}x), batch {:.0}/s ({:.2}x); redis-server µs/decision raw {:.2}, store {:.2}, batch {:.2} (raw/batch {:.2}x)",
            raw.rate,
            single.rate,
            single.rate / raw.rate,
            batch.rate,
            batch.rate / raw.rate,
            raw.server_us,
            single.server_us,
            batch.server_us,
            raw.server_us / batch.server_us,
        );
        for (all, phase) in phases.iter_mut().zip([raw, single, batch]) {
            all.push(phase);
        }
    }
    report(&phases, &o);
}

/// The Markdown table: medians, and per-round ratios to raw with their range.
fn report(phases: &[Vec<Phase>; 3], o: &Options) {
    let [raw, single, batched] = phases;
    let range = |v: Vec<f64>| {
        let (lo, hi) = v
            .iter()
            .fold((f64::MAX, f64::MIN), |(lo, hi), &x| (lo.min(x), hi.max(x)));
        format!("{:.2} ({lo:.2}–{hi:.2})", median(v))
    };
    let rate_ratio =
        |of: &[Phase]| range(of.iter().zip(raw).map(|(p, r)| p.rate / r.rate).collect());
    let cpu_ratio = |of: &[Phase]| {
        range(
            of.iter()
                .zip(raw)
                .map(|(p, r)| r.server_us / p.server_us)
                .collect(),
        )
    };
    let column = |of: &[Phase], f: fn(&Phase) -> f64| median(of.iter().map(f).collect());
    let pinned = if o.pin {
        ", redis-server on CPU 0, clients on CPU 1"
    } else {
        ""
    };
    println!(
        "| what ({} rounds × {} s{pinned}) | decisions/s (median) | × raw, decisions/s (median of rounds; range) | redis-server CPU µs/decision | raw / this, redis-server CPU per decision (median; range) | client CPU µs/decision |",
        o.rounds, o.seconds
    );
    println!("|---|---:|---:|---:|---:|---:|");
    let rows: [(String, &[Phase]); 3] = [
        (
            format!("redis-benchmark EVALSHA raw token bucket, -c {CLIENTS} -P {PIPELINE}"),
            raw,
        ),
        (
            format!("RedisStore::check, {IN_FLIGHT} concurrent tasks"),
            single,
        ),
        (
            format!(
                "RedisStore::check_batch ({BATCH} a call), {} concurrent tasks",
                (IN_FLIGHT / BATCH).max(4)
            ),
            batched,
        ),
    ];
    for (name, of) in rows {
        println!(
            "| {name} | {:.0} | {} | {:.2} | {} | {:.2} |",
            column(of, |p| p.rate),
            rate_ratio(of),
            column(of, |p| p.server_us),
            cpu_ratio(of),
            column(of, |p| p.client_us)
        );
    }
}
