//! Real redis-server processes for the tests: started on free ports with persistence off,
//! killed on drop. Without redis-server the tests skip with a message, except under
//! `CI=true`, where they fail: CI must never pass by skipping.
#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluicegate_core::{AlgorithmKind, Mode, Policy};
use sluicegate_redis::{RedisConfig, RedisStore};

/// Whether redis-server can run here; panics in CI when it cannot.
pub fn redis_available() -> bool {
    let ok = Command::new("redis-server")
        .arg("--version")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .map(|s| s.success())
        .unwrap_or(false);
    if !ok {
        if std::env::var("CI").as_deref() == Ok("true") {
            panic!("redis-server is not installed; scripts/install-test-deps.sh installs it");
        }
        eprintln!("SKIPPED: redis-server is not installed (set CI=true to make this fail)");
    }
    ok
}

/// A port nobody listens on (and, for cluster nodes, whose bus port +10000 is free too).
pub fn free_port(with_bus: bool) -> u16 {
    loop {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        if !with_bus {
            return port;
        }
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// One redis-server process.
pub struct RedisServer {
    pub port: u16,
    dir: tempfile::TempDir,
    extra: Vec<String>,
    child: Option<Child>,
}

impl RedisServer {
    /// A standalone server, or `None` (test skipped) when redis-server is missing outside CI.
    pub fn start() -> Option<RedisServer> {
        Self::start_with(&[])
    }

    /// A server with extra command-line arguments.
    pub fn start_with(extra: &[&str]) -> Option<RedisServer> {
        if !redis_available() {
            return None;
        }
        let mut server = RedisServer {
            port: free_port(false),
            dir: tempfile::tempdir().unwrap(),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
        };
        server.spawn();
        Some(server)
    }

    fn cluster_node() -> RedisServer {
        let port = free_port(true);
        let dir = tempfile::tempdir().unwrap();
        let conf = dir.path().join(format!("nodes-{port}.conf"));
        let mut server = RedisServer {
            port,
            extra: vec![
                "--cluster-enabled".into(),
                "yes".into(),
                "--cluster-config-file".into(),
                conf.display().to_string(),
                "--cluster-node-timeout".into(),
                "5000".into(),
            ],
            dir,
            child: None,
        };
        server.spawn();
        server
    }

    fn spawn(&mut self) {
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .args(["--dir", &self.dir.path().display().to_string()])
            .args(&self.extra)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn redis-server");
        self.child = Some(child);
        wait_for_pong(self.port, self.password());
    }

    fn password(&self) -> Option<&str> {
        let i = self.extra.iter().position(|a| a == "--requirepass")?;
        self.extra.get(i + 1).map(String::as_str)
    }

    /// `redis://127.0.0.1:<port>/0`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/0", self.port)
    }

    /// Kills the process (SIGKILL): connections drop, nothing is saved.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Starts it again on the same port, empty.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Runs redis-cli against this server and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args)
    }

    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// redis-cli output (raw mode, one value a line).
pub fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "--raw"])
        .args(args)
        .output()
        .expect("run redis-cli");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn wait_for_pong(port: u16, password: Option<&str>) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while Instant::now() < deadline {
        if let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) {
            let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
            let hello = match password {
                Some(p) => format!("AUTH {p}\r\nPING\r\n"),
                None => "PING\r\n".to_owned(),
            };
            let mut buf = [0u8; 64];
            if s.write_all(hello.as_bytes()).is_ok() {
                let mut got = String::new();
                while let Ok(n) = s.read(&mut buf) {
                    if n == 0 {
                        break;
                    }
                    got.push_str(&String::from_utf8_lossy(&buf[..n]));
                    if got.contains("PONG") {
                        return;
                    }
                }
            }
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("redis-server on port {port} did not answer PING");
}

/// A 3-master Redis Cluster, no replicas.
pub struct Cluster {
    pub nodes: Vec<RedisServer>,
}

impl Cluster {
    pub fn start() -> Option<Cluster> {
        if !redis_available() {
            return None;
        }
        let nodes: Vec<RedisServer> = (0..3).map(|_| RedisServer::cluster_node()).collect();
        let addrs: Vec<String> = nodes
            .iter()
            .map(|n| format!("127.0.0.1:{}", n.port))
            .collect();
        let out = Command::new("redis-cli")
            .arg("--cluster")
            .arg("create")
            .args(&addrs)
            .args(["--cluster-replicas", "0", "--cluster-yes"])
            .output()
            .expect("run redis-cli --cluster create");
        assert!(
            out.status.success(),
            "cluster create failed: {}",
            String::from_utf8_lossy(&out.stdout)
        );
        let deadline = Instant::now() + Duration::from_secs(20);
        for node in &nodes {
            loop {
                if node.cli(&["cluster", "info"]).contains("cluster_state:ok") {
                    break;
                }
                assert!(Instant::now() < deadline, "cluster did not become ok");
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        Some(Cluster { nodes })
    }

    pub fn seeds(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}", n.port))
            .collect()
    }
}

/// A store on `url` with a fresh prefix per test.
pub async fn store(url: &str, prefix: &str) -> RedisStore {
    let mut config = RedisConfig::standalone(url);
    config.key_prefix = prefix.to_owned();
    // Generous: these tests are about decisions, not latency (the fault tests set their own).
    config.timeout = Duration::from_secs(2);
    RedisStore::connect(config).await.unwrap()
}

pub fn policy(name: &str, kind: AlgorithmKind, limit: u64, period: Duration) -> Arc<Policy> {
    Arc::new(Policy::builder(name, kind, limit, period).build().unwrap())
}

pub fn policy_with(
    name: &str,
    kind: AlgorithmKind,
    limit: u64,
    period: Duration,
    burst: u64,
    mode: Mode,
    max_delay: Duration,
) -> Arc<Policy> {
    Arc::new(
        Policy::builder(name, kind, limit, period)
            .burst(burst)
            .mode(mode)
            .max_delay(max_delay)
            .build()
            .unwrap(),
    )
}

/// `tasks` tasks on each store, each sending `attempts` requests of cost 1 for `key` under
/// `policies`, all at once. Returns how many were admitted.
pub async fn storm(
    stores: &[Arc<RedisStore>],
    policies: &[Arc<Policy>],
    key: &str,
    tasks: usize,
    attempts: usize,
) -> usize {
    use sluicegate_core::{CheckRequest, Store};
    let start = Arc::new(tokio::sync::Barrier::new(stores.len() * tasks));
    let mut handles = Vec::new();
    for store in stores {
        for _ in 0..tasks {
            let (store, policies, key, start) = (
                Arc::clone(store),
                policies.to_vec(),
                key.to_owned(),
                Arc::clone(&start),
            );
            handles.push(tokio::spawn(async move {
                start.wait().await;
                let mut admitted = 0;
                for _ in 0..attempts {
                    let verdict = store
                        .check(CheckRequest::new(&policies, &key, 1))
                        .await
                        .expect("Redis answers");
                    admitted += usize::from(verdict.allowed);
                }
                admitted
            }));
        }
    }
    let mut admitted = 0;
    for handle in handles {
        admitted += handle.await.unwrap();
    }
    admitted
}

/// Keys matching `pattern` on the server at `port`.
pub fn keys(port: u16, pattern: &str) -> Vec<String> {
    cli(port, &["--scan", "--pattern", pattern])
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

impl RedisServer {
    /// Sends a signal (`STOP`, `CONT`) to the process.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id();
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success());
    }
}
