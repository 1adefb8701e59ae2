//! The adaptive pool on the virtual clock: latency triples, then recovers.
//! `UPDATE_DOCS_IMAGES=1` also writes the chart to docs/img/adaptive-concurrency.svg.

use sluicegate_sim::pool::{AdaptiveScenario, render_adaptive, run_adaptive};

fn mean(values: &[u32]) -> f64 {
    values.iter().map(|v| f64::from(*v)).sum::<f64>() / values.len().max(1) as f64
}

#[test]
fn the_limit_follows_the_upstreams_latency() {
    let scenario = AdaptiveScenario {
        clients: 200,
        min: 2,
        max: 100,
        capacity: 40,
        phases: vec![
            (20_000_000, 20_000),
            (40_000_000, 60_000),
            (60_000_000, 20_000),
        ],
        bucket: 100_000,
    };
    let run = run_adaptive(&scenario).unwrap();
    // Last 5 s of each phase (buckets of 100 ms).
    let healthy = mean(&run.limit[150..200]);
    let slow = mean(&run.limit[350..400]);
    let recovered = mean(&run.limit[550..600]);
    assert!(
        healthy >= 30.0,
        "climbs to about the upstream's capacity: {healthy}"
    );
    assert!(
        slow <= healthy / 3.0,
        "drops when latency triples: {healthy} → {slow}"
    );
    assert!(
        recovered >= healthy * 0.8,
        "climbs back: {slow} → {recovered}"
    );
    let in_flight_slow = run.in_flight[350..400].iter().sum::<f64>() / 50.0;
    let in_flight_healthy = run.in_flight[150..200].iter().sum::<f64>() / 50.0;
    assert!(in_flight_slow < in_flight_healthy / 2.0);
    assert!(run.limit.iter().all(|l| (2..=100).contains(l)));

    let svg = render_adaptive(
        "concurrency = \"adaptive\": latency triples at 20 s, recovers at 40 s",
        &run,
    )
    .unwrap();
    roxmltree::Document::parse(&svg).expect("the chart is well-formed XML");
    if std::env::var_os("UPDATE_DOCS_IMAGES").is_some() {
        let path = concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/../../docs/img/adaptive-concurrency.svg"
        );
        std::fs::write(path, svg).unwrap();
    }
}
