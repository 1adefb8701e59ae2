//! SIGTERM drains requests in flight before the process exits 0.

use sluicegate_testkit::{Sluicegate, eventually, sluicegate_bin, write};

const CONFIG: &str = r#"
[[policies]]
name = "slow"
algorithm = "gcra"
limit = 1
period = "5s"
mode = "delay"
max_delay = "10s"

[[routes]]
path = "/"
policies = ["slow"]
key = "global"
"#;

#[tokio::test]
async fn a_request_waiting_for_its_slot_is_answered_before_exit() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "slow.toml", CONFIG);
    let server = Sluicegate::start(sluicegate_bin!(), &["--config", path.to_str().unwrap()]);
    let client = reqwest::Client::new();
    let url = server.url("/v1/forward-auth");
    let first = client
        .get(&url)
        .header("x-original-uri", "/a")
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), 200);
    // The second request's slot is five seconds away: it waits inside the server.
    let waiting = tokio::spawn({
        let client = client.clone();
        async move { client.get(&url).header("x-original-uri", "/a").send().await }
    });
    let metrics = server.url("/metrics");
    eventually("the second request is delayed", || async {
        let text = reqwest::get(&metrics).await.unwrap().text().await.unwrap();
        text.contains(r#"sluicegate_decisions_total{policy="slow",outcome="delayed"} 1"#)
    })
    .await;
    // SIGTERM comes while it waits (its slot is seconds away), so only draining answers it.
    assert!(
        !waiting.is_finished(),
        "the delayed request should still be waiting"
    );
    let status = tokio::task::spawn_blocking(move || server.terminate())
        .await
        .unwrap();
    assert!(status.success(), "exit status {status}");
    let answer = waiting
        .await
        .unwrap()
        .expect("in-flight request answered, not dropped");
    assert_eq!(answer.status(), 200);
}
