//! `rediss://` to a redis-server speaking TLS (self-signed certificate made by openssl, so
//! the URL opts out of verification with `#insecure`), with a password in the URL.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sluicegate_core::{AlgorithmKind, CheckRequest, Store};
use sluicegate_testkit::redis::redis_available;
use sluicegate_testkit::{free_port, redis, shared_policy};

#[tokio::test]
async fn tls_with_auth_in_the_url() {
    if !redis_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = (dir.path().join("redis.crt"), dir.path().join("redis.key"));
    let made = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=localhost",
        ])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status();
    if !matches!(made, Ok(s) if s.success()) {
        assert!(
            std::env::var("CI").as_deref() != Ok("true"),
            "openssl is needed for the TLS test"
        );
        eprintln!("SKIPPED: openssl is not installed");
        return;
    }
    let port = free_port();
    let mut child = Command::new("redis-server")
        .args([
            "--port",
            "0",
            "--tls-port",
            &port.to_string(),
            "--bind",
            "127.0.0.1",
        ])
        .args([
            "--save",
            "",
            "--appendonly",
            "no",
            "--requirepass",
            "s3cret",
        ])
        .arg("--tls-cert-file")
        .arg(&cert)
        .arg("--tls-key-file")
        .arg(&key)
        .arg("--tls-ca-cert-file")
        .arg(&cert)
        .args(["--tls-auth-clients", "no"])
        .stdout(Stdio::null())
        .spawn()
        .unwrap();

    let url = format!("rediss://:s3cret@127.0.0.1:{port}/0#insecure");
    let store = redis::store(&url, "tls").await;
    let started = Instant::now();
    while store.ping().await.is_err() {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no TLS connection to Redis"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let p = [shared_policy(
        "p",
        AlgorithmKind::SlidingWindow,
        2,
        Duration::from_secs(60),
    )];
    let request = CheckRequest::new(&p, "k", 1);
    assert!(store.check(request).await.unwrap().allowed);
    assert!(store.check(request).await.unwrap().allowed);
    assert!(!store.check(request).await.unwrap().allowed);

    // Plain redis:// to the TLS port does not work: the scheme decides.
    let plain = redis::store(&format!("redis://:s3cret@127.0.0.1:{port}/0"), "tls").await;
    assert!(plain.ping().await.is_err());
    let _ = child.kill();
    let _ = child.wait();
}
