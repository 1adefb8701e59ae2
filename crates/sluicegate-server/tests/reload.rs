//! Hot reload: edits, broken files, rename-onto and symlink swaps (Kubernetes ConfigMaps).

use std::path::Path;

use reqwest::Client;
use serde_json::{Value, json};
use sluicegate_testkit::{Sluicegate, eventually, sluicegate_bin, write};

fn config(limit: u64) -> String {
    format!(
        r#"
[[policies]]
name = "changing"
algorithm = "fixed_window"
limit = {limit}
period = "1h"

[[policies]]
name = "kept"
algorithm = "fixed_window"
limit = 10
period = "1h"
"#
    )
}

async fn limit_of(client: &Client, server: &Sluicegate, policy: &str) -> Option<u64> {
    let v: Value = client
        .get(server.url("/v1/policies"))
        .send()
        .await
        .ok()?
        .json()
        .await
        .ok()?;
    v["policies"]
        .as_array()?
        .iter()
        .find(|p| p["name"] == policy)?["limit"]
        .as_u64()
}

async fn check(client: &Client, server: &Sluicegate, policy: &str, cost: u64) -> Value {
    client
        .post(server.url("/v1/check"))
        .json(&json!({"policy": policy, "key": "client", "cost": cost}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

#[tokio::test]
async fn edits_apply_broken_files_are_ignored_and_renames_are_seen() {
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "sluicegate.toml", &config(2));
    let server = Sluicegate::start(sluicegate_bin!(), &["--config", path.to_str().unwrap()]);
    let client = Client::new();
    assert_eq!(limit_of(&client, &server, "changing").await, Some(2));
    assert_eq!(check(&client, &server, "kept", 3).await["remaining"], 7);

    // An edit in place applies; the unchanged policy keeps its count.
    std::fs::write(&path, config(5)).unwrap();
    eventually("limit 5 applied", || async {
        limit_of(&client, &server, "changing").await == Some(5)
    })
    .await;
    assert_eq!(check(&client, &server, "kept", 0).await["remaining"], 7);
    assert_eq!(check(&client, &server, "changing", 1).await["remaining"], 4);

    // A broken edit is logged; the running configuration stays.
    std::fs::write(&path, config(0)).unwrap();
    let mut log = String::new();
    for _ in 0..200 {
        log = server.log();
        if log.contains("configuration not reloaded") {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert!(log.contains("limit must be at least 1"), "{log}");
    assert!(log.contains("configuration not reloaded"), "{log}");
    assert_eq!(limit_of(&client, &server, "changing").await, Some(5));
    assert_eq!(check(&client, &server, "kept", 0).await["remaining"], 7);

    // A new file renamed onto the path (what editors and config tools do) is seen.
    let tmp = write(dir.path(), ".sluicegate.toml.tmp", &config(7));
    std::fs::rename(&tmp, &path).unwrap();
    eventually("limit 7 applied", || async {
        limit_of(&client, &server, "changing").await == Some(7)
    })
    .await;
    assert_eq!(check(&client, &server, "kept", 0).await["remaining"], 7);
}

#[cfg(unix)]
#[tokio::test]
async fn a_configmap_style_symlink_swap_is_seen() {
    use std::os::unix::fs::symlink;
    // dir/sluicegate.toml -> ..data/sluicegate.toml, ..data -> ..v1; the update swaps ..data.
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("..v1")).unwrap();
    std::fs::create_dir(d.join("..v2")).unwrap();
    write(&d.join("..v1"), "sluicegate.toml", &config(3));
    write(&d.join("..v2"), "sluicegate.toml", &config(9));
    symlink("..v1", d.join("..data")).unwrap();
    symlink("..data/sluicegate.toml", d.join("sluicegate.toml")).unwrap();
    let path = d.join("sluicegate.toml");
    let server = Sluicegate::start(sluicegate_bin!(), &["--config", path.to_str().unwrap()]);
    let client = Client::new();
    assert_eq!(limit_of(&client, &server, "changing").await, Some(3));

    swap(d, "..v2");
    eventually("limit 9 applied", || async {
        limit_of(&client, &server, "changing").await == Some(9)
    })
    .await;
}

/// Atomically points `..data` at `target`, as kubelet does.
#[cfg(unix)]
fn swap(dir: &Path, target: &str) {
    let tmp = dir.join("..data_tmp");
    std::os::unix::fs::symlink(target, &tmp).unwrap();
    std::fs::rename(&tmp, dir.join("..data")).unwrap();
}

/// A file caught half-written is never applied: a slow writer (chunks 15 ms apart) leaves
/// many prefixes that are valid TOML and would drop `kept`; none of them may reach the
/// running configuration, and the finished file does.
#[tokio::test]
async fn a_half_written_file_is_never_applied() {
    use std::io::Write;
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "sluicegate.toml", &config(2));
    let server = Sluicegate::start(sluicegate_bin!(), &["--config", path.to_str().unwrap()]);
    let client = Client::new();
    assert_eq!(limit_of(&client, &server, "kept").await, Some(10));

    let text = config(9).replacen("name = \"kept\"", "name = \"kept\"\n# padding", 1)
        + "\n[[policies]]\nname = \"extra\"\nalgorithm = \"gcra\"\nlimit = 1\nperiod = \"1s\"\n";
    let writer = {
        let path = path.clone();
        std::thread::spawn(move || {
            let mut file = std::fs::File::create(&path).unwrap();
            for chunk in text.as_bytes().chunks(8) {
                file.write_all(chunk).unwrap();
                file.flush().unwrap();
                std::thread::sleep(std::time::Duration::from_millis(15));
            }
        })
    };
    let mut seen_without_kept = false;
    while !writer.is_finished() {
        if limit_of(&client, &server, "kept").await.is_none() {
            seen_without_kept = true;
        }
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
    writer.join().unwrap();
    eventually("the finished file applied", || async {
        limit_of(&client, &server, "extra").await == Some(1)
    })
    .await;
    assert!(!seen_without_kept, "a half-written file was applied");
    assert_eq!(limit_of(&client, &server, "changing").await, Some(9));
    assert_eq!(limit_of(&client, &server, "kept").await, Some(10));
    let log = server.log();
    assert!(!log.contains("configuration not reloaded"), "{log}");
}
