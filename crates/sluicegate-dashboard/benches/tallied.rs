//! What `Tallied` (the settle and release counters the server wraps its store in) adds to
//! every decision: the same checks on an in-memory store, through `Arc<dyn Store>` alone and
//! through `Tallied` around it, in interleaved rounds.
//!
//! Two readings: wall time per check (median of the rounds, each side) and, for a figure a
//! loaded machine does not disturb, instructions per check under callgrind, whose
//! `--toggle-collect` counts each `#[inline(never)]` side alone:
//!
//! ```sh
//! cargo bench -p sluicegate-dashboard --bench tallied --no-run   # prints the binary
//! valgrind --tool=callgrind --callgrind-out-file=/dev/null --collect-atstart=no \
//!   --toggle-collect='*probe_plain*' target/release/deps/tallied-… --callgrind
//! ```
//!
//! (method and results: docs/benchmarks/dashboard.md).

use std::hint::black_box;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluicegate_core::{AlgorithmKind, CheckRequest, MemoryStore, Policy, Store};
use sluicegate_dashboard::{DashboardObserver, Tallied};

/// Checks per round (and per side under callgrind).
const N: usize = 20_000;

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("a runtime")
}

fn checks(
    rt: &tokio::runtime::Runtime,
    store: &dyn Store,
    policies: &[Arc<Policy>],
    keys: &[String],
) {
    for i in 0..N {
        let request = CheckRequest::new(policies, &keys[i % keys.len()], 1);
        black_box(rt.block_on(store.check(request)).ok());
    }
}

#[inline(never)]
fn probe_plain(rt: &tokio::runtime::Runtime, store: &dyn Store, p: &[Arc<Policy>], k: &[String]) {
    checks(rt, store, p, k);
}

#[inline(never)]
fn probe_tallied(rt: &tokio::runtime::Runtime, store: &dyn Store, p: &[Arc<Policy>], k: &[String]) {
    checks(rt, store, p, k);
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    let rt = runtime();
    let keys: Vec<String> = (0..1_000)
        .map(|i| format!("ip:10.0.{}.{}", i / 256, i % 256))
        .collect();
    let policies = [Arc::new(
        Policy::builder(
            "api",
            AlgorithmKind::TokenBucket,
            1_000_000_000,
            Duration::from_secs(60),
        )
        .build()
        .expect("a valid policy"),
    )];
    let plain: Arc<dyn Store> = Arc::new(MemoryStore::new(100_000));
    let inner: Arc<dyn Store> = Arc::new(MemoryStore::new(100_000));
    let tallied = Tallied::new(inner, Arc::new(DashboardObserver::default()));
    if std::env::args().any(|a| a == "--callgrind") {
        probe_plain(&rt, plain.as_ref(), &policies, &keys);
        probe_tallied(&rt, &tallied, &policies, &keys);
        return;
    }
    let (mut a, mut b) = (Vec::new(), Vec::new());
    for _ in 0..41 {
        let started = Instant::now();
        probe_plain(&rt, plain.as_ref(), &policies, &keys);
        a.push(started.elapsed().as_nanos() as f64 / N as f64);
        let started = Instant::now();
        probe_tallied(&rt, &tallied, &policies, &keys);
        b.push(started.elapsed().as_nanos() as f64 / N as f64);
    }
    let (a, b) = (median(a), median(b));
    println!("Arc<dyn Store>:          {a:.1} ns/check (median of 41 rounds)");
    println!(
        "Tallied(Arc<dyn Store>): {b:.1} ns/check ({:+.1}%)",
        (b / a - 1.0) * 100.0
    );
}
