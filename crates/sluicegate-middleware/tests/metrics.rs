//! `MetricsObserver` through a real Prometheus recorder, fed by real HTTP requests.

use std::sync::Arc;
use std::time::Duration;

use metrics_exporter_prometheus::PrometheusBuilder;
use sluicegate_core::{AlgorithmKind, MemoryStore, Mode};
use sluicegate_middleware::{MetricsObserver, RateLimiter, RouteSpec};
use sluicegate_testkit::http::serve_limited;
use sluicegate_testkit::{policy_with, statuses};

#[tokio::test]
async fn decisions_are_counted_by_policy_and_outcome() {
    let handle = PrometheusBuilder::new().install_recorder().unwrap();
    let limiter = RateLimiter::builder(Arc::new(MemoryStore::new(1000)))
        .policy(policy_with(
            "strict",
            AlgorithmKind::TokenBucket,
            2,
            Duration::from_secs(60),
            |b| b.mode(Mode::Reject),
        ))
        .policy(policy_with(
            "dry",
            AlgorithmKind::TokenBucket,
            1,
            Duration::from_secs(60),
            |b| b.mode(Mode::Shadow),
        ))
        .route(RouteSpec::new("/strict", &["strict"]))
        .route(RouteSpec::new("/dry", &["dry"]))
        .observer(Arc::new(MetricsObserver))
        .build()
        .unwrap();
    let base = serve_limited(limiter).await;
    let client = reqwest::Client::new();
    statuses(&client, &format!("{base}/strict"), 5).await;
    statuses(&client, &format!("{base}/dry"), 4).await;

    let text = handle.render();
    for line in [
        r#"sluicegate_decisions_total{policy="strict",outcome="allowed"} 2"#,
        r#"sluicegate_decisions_total{policy="strict",outcome="denied"} 3"#,
        r#"sluicegate_decisions_total{policy="dry",outcome="allowed"} 1"#,
        r#"sluicegate_decisions_total{policy="dry",outcome="shadow_denied"} 3"#,
    ] {
        assert!(text.lines().any(|l| l == line), "missing {line} in\n{text}");
    }
}
