//! The dashboard's routes over real HTTP on loopback.

use std::sync::Arc;
use std::time::Duration;

use sluicegate_core::{AlgorithmKind, CheckRequest, MemoryStore, Policy, Store, VerdictObserver};
use sluicegate_dashboard::{Dashboard, DashboardObserver};
use sluicegate_testkit::http::serve;

#[tokio::test]
async fn page_and_data_over_http() {
    let store = Arc::new(MemoryStore::new(1000));
    let observer = Arc::new(DashboardObserver::default());
    let dyn_store: Arc<dyn Store> = store.clone();
    let base = serve(sluicegate_dashboard::router(
        Dashboard::new(observer.clone()).with_probe(dyn_store),
    ))
    .await;

    let policies = [Arc::new(
        Policy::builder(
            "login",
            AlgorithmKind::SlidingLog,
            3,
            Duration::from_secs(60),
        )
        .build()
        .unwrap(),
    )];
    for _ in 0..10 {
        let verdict = store
            .check_now(CheckRequest::new(
                &policies,
                "<img src=x onerror=alert(1)>",
                1,
            ))
            .unwrap();
        observer.observe("<img src=x onerror=alert(1)>", &verdict);
    }

    let client = reqwest::Client::new();
    let page = client
        .get(format!("{base}/dashboard"))
        .send()
        .await
        .unwrap();
    assert_eq!(page.status(), 200);
    assert_eq!(page.headers()["content-type"], "text/html; charset=utf-8");
    let csp = page.headers()["content-security-policy"]
        .to_str()
        .unwrap()
        .to_owned();
    assert!(csp.contains("connect-src 'self'"));
    let html = page.text().await.unwrap();
    assert!(html.contains("<script>") && html.contains("textContent"));
    for external in ["src=\"http", "href=\"http", "<link", "@import", "//cdn"] {
        assert!(
            !html.contains(external),
            "the page loads nothing from elsewhere: {external}"
        );
    }

    let data: serde_json::Value = client
        .get(format!("{base}/dashboard/data"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(data["policies"][0]["policy"], "login");
    assert_eq!(data["policies"][0]["last_window"]["allowed"], 3);
    assert_eq!(data["policies"][0]["last_window"]["denied"], 7);
    assert_eq!(
        data["policies"][0]["series"]["denied"]
            .as_array()
            .unwrap()
            .len(),
        60
    );
    assert_eq!(data["top_keys"][0]["key"], "<img src=x onerror=alert(1)>");
    assert_eq!(data["top_keys"][0]["limited"], 7);
    assert_eq!(data["store"]["kind"], "memory");
    assert_eq!(data["store"]["reachable"], true);
    assert_eq!(data["store"]["tracked_keys"], 1);

    let missing = client
        .get(format!("{base}/dashboard/nope"))
        .send()
        .await
        .unwrap();
    assert_eq!(missing.status(), 404);
}
