//! The request model: durations (leases held and released on the virtual clock, or freed
//! when `lease` passes first) and real costs (reserve then settle). The simulator's counts
//! must be those of the in-memory store driven the same way (acquire at arrival, release
//! and settle at the request's end, on a manual clock).

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use sluicegate_core::{
    AlgorithmKind, CheckRequest, Lease, ManualClock, MemoryStore, Policy, Settled, Settlement,
};
use sluicegate_sim::model::{Dist, RequestModel};
use sluicegate_sim::{Pattern, PatternParams, SimulateArgs, Traffic, engine};

#[derive(Parser)]
struct Cli {
    #[command(flatten)]
    args: SimulateArgs,
}

fn args(flags: &[&str]) -> SimulateArgs {
    Cli::try_parse_from(std::iter::once("simulate").chain(flags.iter().copied()))
        .unwrap()
        .args
}

fn concurrency(limit: u64, lease: Duration) -> Arc<Policy> {
    Arc::new(
        Policy::builder("c", AlgorithmKind::Concurrency, limit, lease)
            .build()
            .unwrap(),
    )
}

/// What happens at a request's end in the store oracle.
type End = Reverse<(u64, u64, usize, Option<(u64, u64, Vec<u64>)>)>;

/// The traffic through a `MemoryStore` on a manual clock: each admitted request releases
/// its lease and settles its real cost at its end (`settle`), in time order with the
/// arrivals. Returns (admitted, rejected, leases released, leases expired first).
fn through_store(policy: &Arc<Policy>, traffic: &Traffic, settle: bool) -> (u64, u64, u64, u64) {
    let clock = ManualClock::new(0);
    let store = MemoryStore::with_clock(1_000_000, clock.clone());
    let policies = [Arc::clone(policy)];
    let start = engine::start_time(policy.period());
    let (mut admitted, mut rejected, mut released, mut expired) = (0, 0, 0, 0);
    let mut ends: BinaryHeap<End> = BinaryHeap::new();
    let mut seq = 0;
    let mut leases: Vec<Vec<Lease>> = Vec::new();
    let mut end_until = |t: u64, ends: &mut BinaryHeap<End>, leases: &Vec<Vec<Lease>>| {
        while let Some(Reverse((at, _, i, reservation))) = ends.peek().cloned() {
            if at > t {
                break;
            }
            ends.pop();
            clock.set(start + at);
            if !leases[i].is_empty() {
                match store.release_now(&leases[i]) {
                    0 => expired += 1,
                    _ => released += 1,
                }
            }
            if let Some((admitted_at, real, remaining)) = reservation {
                let key = leases_key(traffic, i);
                let s = Settlement {
                    policies: &policies,
                    remaining: &remaining,
                    key: &key,
                    estimate: traffic.arrivals()[i].cost,
                    real,
                    admitted_at,
                    expires_at: u64::MAX,
                    id: "",
                };
                assert_eq!(store.settle_now(s), Ok(Settled::Done));
            }
        }
    };
    for (i, a) in traffic.arrivals().iter().enumerate() {
        end_until(a.at, &mut ends, &leases);
        clock.set(start + a.at);
        let key = &traffic.keys()[a.key as usize];
        let v = store
            .check_now(CheckRequest::new(&policies, key, a.cost))
            .unwrap();
        leases.push(v.leases(key, a.cost));
        if !v.allowed {
            rejected += 1;
            continue;
        }
        admitted += 1;
        let reservation = a
            .real
            .filter(|_| settle)
            .map(|real| (v.at, real, vec![v.decisions[0].decision.remaining]));
        seq += 1;
        if let Some(d) = a.duration {
            ends.push(Reverse((a.at + d, seq, i, reservation)));
        } else if reservation.is_some() {
            ends.push(Reverse((a.at, seq, i, reservation)));
        }
    }
    end_until(u64::MAX, &mut ends, &leases);
    (admitted, rejected, released, expired)
}

fn leases_key(traffic: &Traffic, i: usize) -> String {
    traffic.keys()[traffic.arrivals()[i].key as usize].clone()
}

fn poisson(rate: f64, seconds: u64, seed: u64) -> Traffic {
    let params = PatternParams {
        rate,
        duration: seconds * 1_000_000,
        period: 1_000_000,
        size: 1,
        seed,
    };
    Pattern::Poisson.generate(&params).unwrap()
}

#[test]
fn leases_are_held_for_the_request_and_released_when_it_ends() {
    // One request every 100 ms, each running 1 s, at most 5 in flight: 5 a second go.
    let traffic = Pattern::Steady
        .generate(&PatternParams {
            rate: 10.0,
            duration: 10_000_000,
            period: 1_000_000,
            size: 1,
            seed: 1,
        })
        .unwrap();
    let model = RequestModel {
        duration: Some(Dist::duration("1s").unwrap()),
        ..RequestModel::default()
    };
    let traffic = model.apply(traffic).unwrap();
    let policy = concurrency(5, Duration::from_secs(60));
    let run = engine::run(&policy, &traffic, 500_000).unwrap();
    assert_eq!((run.admitted, run.rejected), (50, 50));
    let leases = run.leases.unwrap();
    assert_eq!((leases.peak_held, leases.peak_running), (5, 5));
    assert_eq!((leases.released, leases.expired), (50, 0));
    assert_eq!(through_store(&policy, &traffic, true), (50, 50, 50, 0));
    // The chart: the busiest key holds 5 slots from the first half second on, then none
    // once the last request ended.
    let s = &run.series;
    assert_eq!(s.held[1..20], [5; 19]);
    assert_eq!(s.in_flight[1..20], [5; 19]);
    assert_eq!(s.in_period, s.held);
}

#[test]
fn a_request_longer_than_its_lease_loses_its_slot() {
    // Requests of 2 s under a lease of 500 ms: slots come back before the requests end, so
    // the upstream sees more than the limit at once (the lease is what the limiter holds).
    let traffic = RequestModel {
        duration: Some(Dist::duration("2s").unwrap()),
        ..RequestModel::default()
    }
    .apply(poisson(8.0, 60, 3))
    .unwrap();
    let policy = concurrency(4, Duration::from_millis(500));
    let run = engine::run(&policy, &traffic, 1_000_000).unwrap();
    let leases = run.leases.unwrap();
    assert!(leases.peak_held <= 4);
    assert!(leases.peak_running > 4, "{leases:?}");
    assert_eq!(leases.released, 0, "every lease expired first");
    assert_eq!(leases.expired, run.admitted);
    let (admitted, rejected, released, expired) = through_store(&policy, &traffic, true);
    assert_eq!((admitted, rejected), (run.admitted, run.rejected));
    assert_eq!((released, expired), (leases.released, leases.expired));
}

#[test]
fn random_durations_and_keys_decide_like_the_store() {
    for (seed, dist) in [
        (1, "exp:1500ms"),
        (2, "uniform:200ms..3s"),
        (3, "exp:300ms"),
    ] {
        let mut traffic = poisson(6.0, 120, seed);
        // Three keys, the first busiest.
        let arrivals = traffic
            .into_arrivals()
            .into_iter()
            .enumerate()
            .map(|(i, mut a)| {
                a.key = [0, 0, 0, 1, 2][i % 5];
                a.cost = 1 + (i % 4 == 0) as u64;
                a
            })
            .collect();
        traffic = Traffic::new(arrivals, vec!["a".into(), "b".into(), "c".into()], 0);
        let traffic = RequestModel {
            duration: Some(Dist::duration(dist).unwrap()),
            seed,
            ..RequestModel::default()
        }
        .apply(traffic)
        .unwrap();
        let policy = concurrency(5, Duration::from_secs(4));
        let run = engine::run(&policy, &traffic, 1_000_000).unwrap();
        let leases = run.leases.unwrap();
        assert!(leases.peak_held <= 5, "{dist}: {leases:?}");
        assert!(run.rejected > 0 || seed == 3, "{dist}: nothing limited");
        assert!(run.series.held.iter().all(|h| *h <= 5));
        assert_eq!(
            through_store(&policy, &traffic, true),
            (run.admitted, run.rejected, leases.released, leases.expired),
            "{dist}"
        );
    }
}

#[test]
fn settling_real_costs_decides_like_the_store_and_admits_more() {
    let minute = Duration::from_secs(60);
    for kind in [
        AlgorithmKind::TokenBucket,
        AlgorithmKind::Gcra,
        AlgorithmKind::FixedWindow,
        AlgorithmKind::SlidingWindow,
        AlgorithmKind::SlidingLog,
        AlgorithmKind::LeakyBucket,
    ] {
        let policy = Arc::new(Policy::builder("t", kind, 10_000, minute).build().unwrap());
        let traffic = RequestModel {
            duration: Some(Dist::duration("exp:3s").unwrap()),
            estimate: Some(1_000),
            real: Some(Dist::cost("uniform:50..900").unwrap()),
            seed: 9,
        }
        .apply(poisson(1.0, 600, 5))
        .unwrap();
        let on = engine::run_with(&policy, &traffic, 10_000_000, true).unwrap();
        let off = engine::run_with(&policy, &traffic, 10_000_000, false).unwrap();
        let (admitted, rejected, ..) = through_store(&policy, &traffic, true);
        assert_eq!((on.admitted, on.rejected), (admitted, rejected), "{kind}");
        let (admitted, rejected, ..) = through_store(&policy, &traffic, false);
        assert_eq!((off.admitted, off.rejected), (admitted, rejected), "{kind}");
        // The estimate (1000) overstates every real cost: settling gives back and admits
        // more, without letting more real cost through in a period than the limit allows
        // (plus one estimate a settle can be late by).
        assert!(
            on.admitted > off.admitted,
            "{kind}: {} vs {}",
            on.admitted,
            off.admitted
        );
        let s = on.settle.unwrap();
        assert!(
            s.settled && s.refunded == on.admitted && s.charged == 0,
            "{kind}: {s:?}"
        );
        assert!(!off.settle.unwrap().settled);
        assert!(
            on.peak_in_period <= 2 * 10_000,
            "{kind}: {}",
            on.peak_in_period
        );
    }
}

#[test]
fn the_cli_simulates_leases_and_settles_with_tables_and_charts() {
    let sim = args(&[
        "--algorithm",
        "concurrency",
        "--limit",
        "5",
        "--lease",
        "30s",
        "--request-duration",
        "exp:2s",
        "--pattern",
        "poisson",
        "--duration",
        "2m",
    ]);
    let simulation = sim.simulate().unwrap();
    let run = &simulation.runs[0];
    // Default rate: twice the limit per mean duration, 5 a second.
    assert!((500..700).contains(&run.offered), "{}", run.offered);
    let table = simulation.table();
    assert!(table.contains("5 in flight, lease 30s"), "{table}");
    assert!(table.contains(" held (1.00×)"), "{table}");
    assert!(
        table.contains("leases released when their request ended"),
        "{table}"
    );
    assert!(
        simulation.description.contains("requests last exp:2s"),
        "{table}"
    );
    let svg = simulation.svg().unwrap();
    roxmltree::Document::parse(&svg).unwrap();
    assert!(svg.contains("slots held (right axis)") && svg.contains("requests running"));

    let sim = args(&[
        "--algorithm",
        "token_bucket",
        "--limit",
        "20000",
        "--period",
        "1m",
        "--pattern",
        "poisson",
        "--rate",
        "1",
        "--duration",
        "10m",
        "--request-duration",
        "5s",
        "--cost-estimate",
        "2000",
        "--cost-real",
        "exp:600",
        "--settle",
        "both",
    ]);
    let simulation = sim.simulate().unwrap();
    let labels: Vec<String> = simulation
        .runs
        .iter()
        .map(sluicegate_sim::report::label)
        .collect();
    assert_eq!(
        labels,
        ["token_bucket (settled)", "token_bucket (estimate only)"]
    );
    assert!(simulation.runs[0].admitted > simulation.runs[1].admitted);
    let table = simulation.table();
    assert!(
        table.contains("not settled: the estimate stayed charged"),
        "{table}"
    );
    let svg = simulation.svg().unwrap();
    roxmltree::Document::parse(&svg).unwrap();
    assert!(svg.contains("real cost admitted in the last 1m"));
}

#[test]
fn bad_model_flags_are_clear_errors() {
    let parse = |flags: &[&str]| {
        Cli::try_parse_from(std::iter::once("simulate").chain(flags.iter().copied()))
            .map(|c| c.args)
    };
    let base = [
        "--algorithm",
        "token_bucket",
        "--limit",
        "10",
        "--period",
        "1s",
        "--pattern",
        "steady",
    ];
    fn with<'a>(base: &[&'a str], extra: &[&'a str]) -> Vec<&'a str> {
        [base, extra].concat()
    }
    for bad in [
        &["--request-duration", "uniform:3s..1s"][..],
        &["--request-duration", "soon"],
        &["--cost-real", "-4"],
        &["--settle", "sometimes"],
    ] {
        assert!(parse(&with(&base, bad)).is_err(), "{bad:?}");
    }
    let err = parse(&with(&base, &["--cost-estimate", "0"]))
        .unwrap()
        .simulate()
        .unwrap_err()
        .to_string();
    assert!(err.contains("--cost-estimate must be at least 1"), "{err}");
    let err = parse(&with(&base, &["--cost-estimate", "11"]))
        .unwrap()
        .simulate()
        .unwrap_err()
        .to_string();
    assert!(err.contains("can never be admitted"), "{err}");
    // Concurrency takes a lease, not a period.
    let err = args(&[
        "--algorithm",
        "concurrency",
        "--limit",
        "3",
        "--pattern",
        "steady",
        "--rate",
        "1",
    ])
    .simulate()
    .map(|s| s.runs[0].policy.period());
    assert_eq!(err.unwrap(), 60_000_000, "the default lease");
}
