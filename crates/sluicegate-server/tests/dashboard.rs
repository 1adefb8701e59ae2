//! The live dashboard in a real browser: start `sluicegate serve`, drive decisions at it over
//! HTTP, load `/dashboard` in headless Chromium, and check that the page shows the counts.
//! A screenshot is saved as `target/test-artifacts/dashboard.png`.
//!
//! Needs Debian's `chromium` (`scripts/install-test-deps.sh` installs it). Without it the
//! test says so and passes, except under `CI=true`, where it fails.

use std::path::Path;
use std::process::{Command, Stdio};

use sluicegate_testkit::{Sluicegate, program, sluicegate_bin};
use std::time::{Duration, Instant};

/// Runs headless Chromium with `args` and the given URL; returns its stdout.
fn chromium_run(chromium: &Path, profile: &Path, args: &[&str], url: &str) -> String {
    let mut child = Command::new(chromium)
        .args([
            "--headless",
            "--no-sandbox",
            "--disable-gpu",
            "--disable-quic",
            "--no-first-run",
            "--disable-background-networking",
            "--disable-component-update",
            "--disable-sync",
            "--window-size=1280,720",
            // Virtual time runs the page's first polls without the test waiting for them.
            "--virtual-time-budget=5000",
        ])
        .arg(format!("--user-data-dir={}", profile.display()))
        .args(args)
        .arg(url)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut stdout = child.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        let mut out = String::new();
        std::io::Read::read_to_string(&mut stdout, &mut out).unwrap();
        out
    });
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            assert!(status.success(), "chromium failed: {status}");
            break;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("chromium did not finish within 90 s");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    reader.join().unwrap()
}

async fn check(client: &reqwest::Client, base: &str, policy: &str, key: &str) -> bool {
    let response = client
        .post(format!("{base}/v1/check"))
        .json(&serde_json::json!({"policy": policy, "key": key}))
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    body["allowed"].as_bool().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dashboard_shows_live_counts_in_a_browser() {
    let Some(chromium) = program("chromium") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("sluicegate.toml");
    std::fs::write(
        &config,
        r#"
[[policies]]
name = "api"
algorithm = "fixed_window"
limit = 3
period = "1h"

[[policies]]
name = "search"
algorithm = "gcra"
limit = 100
period = "1m"

[[routes]]
path = "/"
policies = ["api"]
key = "ip"
"#,
    )
    .unwrap();
    let server = Sluicegate::start(sluicegate_bin!(), &["--config", config.to_str().unwrap()]);
    let base = server.url("");

    let client = reqwest::Client::new();
    let mut allowed = 0;
    for _ in 0..10 {
        allowed += u32::from(check(&client, &base, "api", "alice").await);
    }
    for _ in 0..2 {
        allowed += u32::from(check(&client, &base, "api", "bob").await);
    }
    for _ in 0..4 {
        assert!(check(&client, &base, "search", "carol").await);
    }
    assert_eq!(allowed, 5, "3 for alice, 2 for bob");

    let profile = dir.path().join("chromium-profile");
    let url = format!("{base}/dashboard");
    let dom = chromium_run(&chromium, &profile, &["--dump-dom"], &url);
    for expected in [
        r#"data-policy="api" data-outcome="allowed" data-total="5""#,
        r#"data-policy="api" data-outcome="denied" data-total="7""#,
        r#"data-policy="search" data-outcome="allowed" data-total="4""#,
        r#"data-policy="search" data-outcome="denied" data-total="0""#,
        r#"<tr data-key="alice" data-policy="api" data-limited="7">"#,
        "store: memory · reachable",
    ] {
        assert!(
            dom.contains(expected),
            "the page lacks {expected:?}:\n{dom}"
        );
    }
    assert!(!dom.contains(r#"data-key="bob""#), "bob was never limited");
    assert!(
        dom.contains(r#"<footer id="status" class="">Polling /dashboard/data every 2 s.</footer>"#),
        "the page's poll failed:\n{dom}"
    );

    let target = Path::new(sluicegate_bin!())
        .ancestors()
        .nth(2)
        .unwrap()
        .to_owned();
    let artifacts = target.join("test-artifacts");
    std::fs::create_dir_all(&artifacts).unwrap();
    let shot = artifacts.join("dashboard.png");
    let _ = std::fs::remove_file(&shot);
    chromium_run(
        &chromium,
        &profile,
        &[&format!("--screenshot={}", shot.display())],
        &url,
    );
    let png = std::fs::read(&shot).unwrap();
    assert!(png.starts_with(b"\x89PNG\r\n\x1a\n"), "not a PNG");
    assert!(png.len() > 10_000, "a blank page? {} bytes", png.len());
}
