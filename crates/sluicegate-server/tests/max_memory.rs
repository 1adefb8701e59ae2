//! `store.max_memory` against the real binary: a flood of unique keys, each logging many
//! requests under a sliding_log policy, keeps the store's own count of its bytes
//! (`sluicegate_tracked_bytes`) under the bound and the process's resident set far below
//! what the flood would take unbounded; a client being limited before the flood still is.

use serde_json::{Value, json};
use sluicegate_testkit::{Sluicegate as Server, sluicegate_bin, write};

const BOUND: u64 = 2 << 20;
/// Unique keys in the flood, and requests logged for each (a batch of 1000 per call).
const KEYS: usize = 10_000;
const PER_KEY: usize = 100;

fn rss_bytes(pid: u32) -> u64 {
    let statm = std::fs::read_to_string(format!("/proc/{pid}/statm")).unwrap();
    let pages: u64 = statm.split_whitespace().nth(1).unwrap().parse().unwrap();
    pages * 4096
}

async fn metric(client: &reqwest::Client, server: &Server, name: &str) -> u64 {
    let text = client
        .get(server.url("/metrics"))
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.trim().parse::<f64>().ok())
        .unwrap_or_else(|| panic!("no {name} in {text}")) as u64
}

async fn check(client: &reqwest::Client, server: &Server, body: Value) -> Value {
    let response = client
        .post(server.url("/v1/check"))
        .json(&body)
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    response.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_sliding_logs_stays_within_max_memory() {
    let dir = tempfile::tempdir().unwrap();
    let toml = format!(
        r#"
[server]
listen = "127.0.0.1:0"

[store]
max_memory = {BOUND}

[[policies]]
name = "log"
algorithm = "sliding_log"
limit = 200
period = "1h"
"#
    );
    let path = write(dir.path(), "sluicegate.toml", &toml);
    let server = Server::start_with(
        sluicegate_bin!(),
        &["--config", path.to_str().unwrap()],
        false,
    );
    let client = reqwest::Client::new();
    let victim = json!({"policy": "log", "key": "victim"});
    let spend = json!({"requests": vec![victim.clone(); 200]});
    check(&client, &server, spend).await;
    assert_eq!(
        check(&client, &server, victim.clone()).await["allowed"],
        false
    );
    // Warm: the allocator, the runtime and the exporter have settled.
    let warm = rss_bytes(server.child.id());
    let mut peak_bytes = 0;
    for batch in 0..KEYS * PER_KEY / 1000 {
        // Ten keys a batch, a hundred requests each: every key is new.
        let requests: Vec<Value> = (0..1000)
            .map(|i| json!({"policy": "log", "key": format!("flood-{}", batch * 10 + i / PER_KEY)}))
            .collect();
        check(&client, &server, json!({ "requests": requests })).await;
        if batch % 100 == 0 {
            peak_bytes = peak_bytes.max(metric(&client, &server, "sluicegate_tracked_bytes").await);
        }
    }
    let bytes = metric(&client, &server, "sluicegate_tracked_bytes").await;
    let end = rss_bytes(server.child.id());
    let grown = end.saturating_sub(warm);
    eprintln!(
        "tracked bytes peak {peak_bytes}, end {bytes} (bound {BOUND}); RSS warm {:.1} MiB, end {:.1} MiB",
        warm as f64 / 1048576.0,
        end as f64 / 1048576.0
    );
    assert!(
        peak_bytes.max(bytes) <= BOUND,
        "{peak_bytes} / {bytes} > {BOUND}"
    );
    assert!(
        bytes > BOUND / 2,
        "the flood never came near the bound: {bytes}"
    );
    // Unbounded, the logs alone would be 1,000,000 entries of 16 bytes in buffers of 128:
    // 20 MB.
    assert!(grown < 8 << 20, "RSS grew by {grown} bytes");
    let after = check(&client, &server, victim).await;
    assert_eq!(
        after["allowed"], false,
        "the limited client was reset: {after}"
    );
}
