//! How fast the simulator runs virtual time: 100,000 Poisson requests (at 1.5 × the limit,
//! so every path is taken) through each algorithm, side by side with the same requests
//! through the in-memory store on a manual clock (what a server does per request, minus
//! the network).
//!
//! Run: `cargo bench -p sluicegate-sim --bench simulate -- --warm-up-time 1 --measurement-time 3`
//! (method and results: docs/benchmarks/sim.md).

use std::sync::Arc;
use std::time::Duration;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
use sluicegate_core::{AlgorithmKind, CheckRequest, ManualClock, MemoryStore, Policy};
use sluicegate_sim::{Pattern, PatternParams, engine};

fn bench(c: &mut Criterion) {
    let params = PatternParams {
        rate: 150.0,
        duration: 666_667_000,
        period: 1_000_000,
        size: 200,
        seed: 1,
    };
    let traffic = Pattern::Poisson.generate(&params).unwrap();
    let n = traffic.arrivals().len() as u64;
    let mut group = c.benchmark_group("simulate");
    group.throughput(Throughput::Elements(n));
    for kind in AlgorithmKind::ALL {
        let policy = Arc::new(
            Policy::builder(kind.name(), kind, 100, Duration::from_secs(1))
                .build()
                .unwrap(),
        );
        group.bench_function(format!("engine/{kind}"), |b| {
            b.iter(|| engine::run(&policy, &traffic, 1_000_000).unwrap().admitted)
        });
        group.bench_function(format!("memory_store/{kind}"), |b| {
            b.iter(|| {
                let clock = ManualClock::new(0);
                let store = MemoryStore::with_clock(1000, clock.clone());
                let policies = [Arc::clone(&policy)];
                let start = engine::start_time(policy.period());
                let mut admitted = 0u64;
                for a in traffic.arrivals() {
                    clock.set(start + a.at);
                    let request = CheckRequest::new(&policies, "client", a.cost);
                    admitted += u64::from(store.check_now(request).unwrap().allowed);
                }
                admitted
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
