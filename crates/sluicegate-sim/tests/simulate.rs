//! The simulator against the core: its numbers must be the store's numbers.

use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use sluicegate_core::{
    AlgorithmKind, CheckRequest, ManualClock, MemoryStore, Mode, Outcome, Policy,
};
use sluicegate_sim::{Pattern, PatternParams, SimError, SimulateArgs, Traffic, engine};

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

fn policy(kind: AlgorithmKind, limit: u64, period: Duration, mode: Mode) -> Arc<Policy> {
    Arc::new(
        Policy::builder(kind.name(), kind, limit, period)
            .burst(limit / 2 + 1)
            .mode(mode)
            .max_delay(period / 2)
            .build()
            .unwrap(),
    )
}

#[test]
fn boundary_burst_doubles_fixed_window_only() {
    let sim = args(&[
        "--algorithm",
        "all",
        "--limit",
        "10",
        "--period",
        "1m",
        "--pattern",
        "boundary",
        "--duration",
        "10m",
    ])
    .simulate()
    .unwrap();
    assert_eq!(sim.runs.len(), 6);
    for run in &sim.runs {
        let kind = run.policy.algorithm();
        match kind {
            AlgorithmKind::FixedWindow => {
                assert_eq!(
                    run.peak_in_period, 20,
                    "fixed_window admits 2 × limit across the edge"
                );
                assert_eq!(run.admitted, 60);
            }
            AlgorithmKind::SlidingLog => {
                assert!(
                    run.peak_in_period <= 10,
                    "sliding_log: {}",
                    run.peak_in_period
                );
                assert_eq!(run.admitted, 30);
            }
            _ => assert!(run.peak_in_period <= 10, "{kind}: {}", run.peak_in_period),
        }
        assert_eq!(run.offered, 60);
        assert_eq!(run.admitted + run.rejected, run.offered);
    }
    let table = sim.table();
    assert!(table.contains("20 (2.00×)"), "{table}");
}

/// Runs the same traffic through a `MemoryStore` on a `ManualClock`, the way a server would
/// decide it, and counts the outcomes.
fn through_store(policy: &Arc<Policy>, traffic: &Traffic) -> (u64, u64, u64) {
    let clock = ManualClock::new(0);
    let store = MemoryStore::with_clock(1_000_000, clock.clone());
    let policies = [Arc::clone(policy)];
    let start = engine::start_time(policy.period());
    let (mut admitted, mut rejected, mut delayed) = (0, 0, 0);
    for a in traffic.arrivals() {
        clock.set(start + a.at);
        let key = &traffic.keys()[a.key as usize];
        let verdict = store
            .check_now(CheckRequest::new(&policies, key, a.cost))
            .unwrap();
        match verdict.decisions[0].outcome {
            Outcome::Delayed => {
                admitted += 1;
                delayed += 1;
            }
            Outcome::Allowed | Outcome::ShadowDenied => admitted += 1,
            _ => rejected += 1,
        }
    }
    (admitted, rejected, delayed)
}

#[test]
fn counts_equal_the_memory_store_for_every_algorithm_and_mode() {
    let period = Duration::from_secs(10);
    let mut params = PatternParams {
        rate: 3.0,
        duration: 600_000_000,
        period: 10_000_000,
        size: 25,
        seed: 42,
    };
    let mut traffics = vec![
        Pattern::Poisson.generate(&params).unwrap(),
        Pattern::Burst.generate(&params).unwrap(),
        Pattern::Boundary.generate(&params).unwrap(),
        Pattern::Ramp.generate(&params).unwrap(),
    ];
    params.rate = 0.9;
    traffics.push(Pattern::Steady.generate(&params).unwrap());
    traffics.push(
        sluicegate_sim::trace::parse(
            "0,a\n10,b,3\n20,a,4\n30,a\n5000,b,2\n5001,a,4\n9999,a\n10000,a,5\n",
        )
        .unwrap(),
    );
    let mut checked = 0;
    for traffic in &traffics {
        for kind in AlgorithmKind::ALL {
            let modes: &[Mode] = if kind.supports_delay() {
                &[Mode::Reject, Mode::Delay, Mode::Shadow]
            } else {
                &[Mode::Reject, Mode::Shadow]
            };
            for &mode in modes {
                let p = policy(kind, 12, period, mode);
                let run = engine::run(&p, traffic, 1_000_000).unwrap();
                let expected = through_store(&p, traffic);
                assert_eq!(
                    (run.admitted, run.rejected, run.delayed),
                    expected,
                    "{kind} {mode:?}"
                );
                assert_eq!(run.offered, traffic.arrivals().len() as u64);
                if mode == Mode::Delay {
                    assert!(run.max_delay <= p.max_delay());
                }
                checked += 1;
            }
        }
    }
    assert_eq!(checked, 6 * 15);
}

#[test]
fn delay_mode_shows_waiting_requests() {
    let sim = args(&[
        "--algorithm",
        "gcra",
        "--limit",
        "10",
        "--period",
        "1m",
        "--pattern",
        "burst",
        "--size",
        "15",
        "--rate",
        "0.2",
        "--mode",
        "delay",
        "--max-delay",
        "20s",
        "--duration",
        "5m",
    ])
    .simulate()
    .unwrap();
    let run = &sim.runs[0];
    assert!(run.delayed > 0);
    assert!(run.max_delay <= 20_000_000);
    assert_eq!(run.series.delayed.iter().sum::<u64>(), run.delayed);
    assert_eq!(run.series.admitted.iter().sum::<u64>(), run.admitted);
    assert!(sim.table().contains("requests waited, the longest"));
    assert!(sim.svg().unwrap().contains("delayed (at arrival)"));
}

#[test]
fn delay_on_a_window_is_an_error_unless_comparing_all() {
    let err = args(&[
        "--algorithm",
        "fixed_window",
        "--limit",
        "5",
        "--period",
        "1s",
        "--pattern",
        "steady",
        "--mode",
        "delay",
    ])
    .simulate()
    .unwrap_err();
    assert!(err.to_string().contains("mode \"delay\" needs"), "{err}");
    let all = args(&[
        "--algorithm",
        "all",
        "--limit",
        "5",
        "--period",
        "1s",
        "--pattern",
        "steady",
        "--mode",
        "delay",
    ])
    .policies()
    .unwrap();
    let modes: Vec<Mode> = all.iter().map(|p| p.mode()).collect();
    assert_eq!(
        modes,
        [
            Mode::Reject,
            Mode::Reject,
            Mode::Reject,
            Mode::Delay,
            Mode::Delay,
            Mode::Delay
        ]
    );
}

#[test]
fn svg_is_well_formed_with_one_panel_per_algorithm() {
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("chart.svg");
    let text = args(&[
        "--algorithm",
        "all",
        "--limit",
        "100",
        "--period",
        "1s",
        "--pattern",
        "poisson",
        "--rate",
        "150",
        "--duration",
        "1m",
        "--out",
        out.to_str().unwrap(),
    ])
    .run()
    .unwrap();
    assert!(text.contains("wrote"), "{text}");
    let svg = std::fs::read_to_string(&out).unwrap();
    let doc = roxmltree::Document::parse(&svg).unwrap();
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    let texts: Vec<&str> = doc
        .descendants()
        .filter(|n| n.has_tag_name("text"))
        .filter_map(|n| n.text())
        .map(str::trim)
        .collect();
    for kind in AlgorithmKind::ALL {
        let caption = format!("{}, 100 per 1s", kind.name());
        assert!(
            texts.iter().any(|t| t.starts_with(&caption)),
            "no panel for {kind}"
        );
    }
    assert!(texts.contains(&"offered") && texts.contains(&"admitted"));
}

#[test]
fn trace_files_run_with_keys_and_costs_and_bad_lines_are_errors() {
    let dir = tempfile::tempdir().unwrap();
    let good = dir.path().join("good.csv");
    std::fs::write(
        &good,
        "timestamp_ms,key,cost\n0,alice,2\n100,bob\n200,alice,2\n300,alice,2\n",
    )
    .unwrap();
    let sim = args(&[
        "--algorithm",
        "sliding_log",
        "--limit",
        "4",
        "--period",
        "1s",
        "--pattern",
        &format!("trace:{}", good.display()),
    ])
    .simulate()
    .unwrap();
    let run = &sim.runs[0];
    assert_eq!((run.admitted, run.rejected), (3, 1));
    assert_eq!(run.peak_in_period, 4);

    let bad = dir.path().join("bad.csv");
    std::fs::write(&bad, "0,alice\n12,bob,-1\n").unwrap();
    let err = args(&[
        "--algorithm",
        "gcra",
        "--limit",
        "4",
        "--period",
        "1s",
        "--pattern",
        &format!("trace:{}", bad.display()),
    ])
    .run()
    .unwrap_err();
    assert!(matches!(err, SimError::Trace { line: 2, .. }), "{err}");
    assert!(err.to_string().contains("bad.csv:2: cost \"-1\""), "{err}");

    let heavy = dir.path().join("heavy.csv");
    std::fs::write(&heavy, "0,alice,9\n").unwrap();
    let err = args(&[
        "--algorithm",
        "token_bucket",
        "--limit",
        "4",
        "--period",
        "1s",
        "--pattern",
        &format!("trace:{}", heavy.display()),
    ])
    .run()
    .unwrap_err();
    assert!(
        matches!(
            err,
            SimError::CostOverCapacity {
                cost: 9,
                capacity: 4,
                ..
            }
        ),
        "{err}"
    );
}

#[test]
fn config_files_need_the_binarys_reader() {
    // The file is read by the server's configuration reader (`sluicegate simulate`; see
    // sluicegate-server's tests/validate.rs); the library alone has none.
    let err = args(&["--config", "any.toml", "--pattern", "steady"])
        .policies()
        .unwrap_err();
    assert!(
        err.to_string().contains("needs a configuration reader"),
        "{err}"
    );
}

#[test]
fn missing_or_bad_flags_are_clear_errors() {
    let err = args(&["--algorithm", "gcra", "--pattern", "steady"])
        .simulate()
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "missing --limit, --period (or give --config FILE)"
    );
    let err = args(&[
        "--algorithm",
        "bogus",
        "--limit",
        "1",
        "--period",
        "1s",
        "--pattern",
        "steady",
    ])
    .simulate()
    .unwrap_err();
    assert!(err.to_string().contains("unknown algorithm"), "{err}");
    let err = args(&[
        "--algorithm",
        "gcra",
        "--limit",
        "1",
        "--period",
        "1s",
        "--pattern",
        "steady",
        "--rate=-3",
    ])
    .simulate()
    .unwrap_err();
    assert!(
        err.to_string().contains("--rate must be a positive"),
        "{err}"
    );
    assert!(Cli::try_parse_from(["simulate", "--pattern", "zigzag"]).is_err());
    assert!(Cli::try_parse_from(["simulate", "--pattern", "steady", "--period", "soon"]).is_err());
}

#[test]
fn a_huge_max_delay_does_not_grow_the_chart_without_bound() {
    // One request a year for ten years against 1 a year, each waiting up to ten years (the longest max_delay).
    let sim = args(&[
        "--algorithm",
        "gcra",
        "--limit",
        "1",
        "--period",
        "365d",
        "--burst",
        "1",
        "--mode",
        "delay",
        "--max-delay",
        "3660d",
        "--pattern",
        "steady",
        "--rate",
        "0.0001",
        "--duration",
        "3650d",
    ])
    .simulate()
    .unwrap();
    let run = &sim.runs[0];
    assert!(run.delayed > 0);
    assert!(run.series.admitted.len() <= engine::MAX_BUCKETS);
    assert_eq!(run.series.admitted.iter().sum::<u64>(), run.admitted);
    roxmltree::Document::parse(&sim.svg().unwrap()).unwrap();
}
