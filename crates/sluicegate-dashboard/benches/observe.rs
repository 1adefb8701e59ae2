//! What the dashboard costs per decided request, side by side with the Prometheus counter
//! every server already pays for (`sluicegate_decisions_total` through `metrics` and
//! metrics-exporter-prometheus), and with an unbounded per-key map (what a naive "top keys"
//! would keep).
//!
//! Run: `cargo bench -p sluicegate-dashboard --bench observe -- --warm-up-time 1 --measurement-time 3`
//! (method and results: docs/benchmarks/dashboard.md).

use std::alloc::{GlobalAlloc, Layout, System};
use std::collections::HashMap;
use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use criterion::{Criterion, criterion_group, criterion_main};
use parking_lot::Mutex;
use sluicegate_core::{AlgorithmKind, CheckRequest, MemoryStore, Policy, Verdict, VerdictObserver};
use sluicegate_dashboard::DashboardObserver;

/// Counts live heap bytes, to compare the observers' memory after a flood of keys.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOC: Counting = Counting;

/// The server's metrics observer, as in `sluicegate-server` and `sluicegate-middleware`.
struct Prometheus;

impl VerdictObserver for Prometheus {
    fn observe(&self, _key: &str, verdict: &sluicegate_core::VerdictOf<'_>) {
        for d in &verdict.decisions {
            metrics::counter!(
                "sluicegate_decisions_total",
                "policy" => d.policy.name().to_owned(),
                "outcome" => d.outcome.label(),
            )
            .increment(1);
        }
    }
}

/// Counts every limited key in a map: exact, and as large as the key space.
#[derive(Default)]
struct EveryKey(Mutex<HashMap<String, u64>>);

impl VerdictObserver for EveryKey {
    fn observe(&self, key: &str, verdict: &sluicegate_core::VerdictOf<'_>) {
        if !verdict.allowed {
            *self.0.lock().entry(key.to_owned()).or_default() += 1;
        }
    }
}

type MakeObserver = Box<dyn Fn() -> Box<dyn VerdictObserver>>;

fn verdicts() -> (Verdict, Verdict) {
    let store = MemoryStore::new(10);
    let policies = [Arc::new(
        Policy::builder(
            "api",
            AlgorithmKind::FixedWindow,
            1,
            Duration::from_secs(3600),
        )
        .build()
        .unwrap(),
    )];
    let allowed = store
        .check_now(CheckRequest::new(&policies, "k", 1))
        .unwrap();
    let denied = store
        .check_now(CheckRequest::new(&policies, "k", 1))
        .unwrap();
    assert!(allowed.allowed && !denied.allowed);
    (allowed, denied)
}

fn bench(c: &mut Criterion) {
    let _ = metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder();
    let (allowed, denied) = verdicts();
    // 1M distinct keys, precomputed so the loop measures the observers only.
    let keys: Vec<String> = (0..1_000_000u32)
        .map(|i| format!("198.51.{}.{}", i >> 8, i & 255))
        .collect();

    let observers: Vec<(&str, MakeObserver)> = vec![
        (
            "dashboard",
            Box::new(|| Box::new(DashboardObserver::default())),
        ),
        ("prometheus", Box::new(|| Box::new(Prometheus))),
        ("every_key_map", Box::new(|| Box::new(EveryKey::default()))),
    ];
    for (name, make) in &observers {
        let before = LIVE.load(Ordering::Relaxed);
        let observer = make();
        for key in &keys {
            observer.observe(key, &denied);
        }
        let bytes = LIVE.load(Ordering::Relaxed) - before;
        println!("memory after 1M distinct limited keys: {name}: {bytes} bytes");
        drop(observer);
    }
    let mut group = c.benchmark_group("observe");
    for (name, make) in &observers {
        let observer = make();
        group.bench_function(format!("{name}/allowed"), |b| {
            b.iter(|| observer.observe(black_box("203.0.113.7"), black_box(&allowed)))
        });
        let observer = make();
        let mut i = 0usize;
        group.bench_function(format!("{name}/denied_unique_keys"), |b| {
            b.iter(|| {
                i = (i + 1) % keys.len();
                observer.observe(black_box(&keys[i]), black_box(&denied))
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
