//! Real redis-server processes: standalone, replica, or a 3-master Cluster, on free ports with
//! persistence off, killed on drop.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use crate::net::{free_port, free_port_with_bus, wait_until};
use crate::program::{find_program, require};

/// Whether redis-server (and redis-cli) can run here; under `CI=true` a missing one panics.
pub fn redis_available() -> bool {
    let ok = find_program("redis-server").is_some() && find_program("redis-cli").is_some();
    if !ok {
        require("redis-server and redis-cli");
    }
    ok
}

/// One redis-server process; killed (SIGKILL) on drop.
pub struct RedisServer {
    /// The port it listens on (127.0.0.1).
    pub port: u16,
    dir: tempfile::TempDir,
    extra: Vec<String>,
    child: Option<Child>,
}

impl RedisServer {
    /// A standalone server, or `None` (the test skips) when redis-server is missing outside CI.
    pub fn start() -> Option<RedisServer> {
        Self::start_with(&[])
    }

    /// A standalone server with extra command-line arguments (`["--requirepass", "pw"]`).
    pub fn start_with(extra: &[&str]) -> Option<RedisServer> {
        if !redis_available() {
            return None;
        }
        Some(Self::spawn_new(free_port(), extra))
    }

    fn spawn_new(port: u16, extra: &[&str]) -> RedisServer {
        let mut server = RedisServer {
            port,
            dir: tempfile::tempdir().expect("temp dir"),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
        };
        server.spawn();
        server
    }

    fn cluster_node() -> RedisServer {
        let port = free_port_with_bus();
        let conf = format!("nodes-{port}.conf");
        Self::spawn_new(
            port,
            &[
                "--cluster-enabled",
                "yes",
                "--cluster-config-file",
                &conf,
                "--cluster-node-timeout",
                "5000",
            ],
        )
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

    /// Sends a signal (`STOP` freezes it, `CONT` resumes it) to the process.
    pub fn signal(&self, signal: &str) {
        let pid = self.child.as_ref().expect("running").id();
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &pid.to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} {pid} failed");
    }

    /// Runs redis-cli against this server and returns its output.
    pub fn cli(&self, args: &[&str]) -> String {
        cli(self.port, args)
    }

    /// Keys matching `pattern` (SCAN).
    pub fn keys(&self, pattern: &str) -> Vec<String> {
        keys(self.port, pattern)
    }

    /// Its working folder (empty: persistence is off).
    pub fn dir(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// redis-cli output against the server on `port` (raw mode, one value a line).
pub fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-h", "127.0.0.1", "-p", &port.to_string(), "--raw"])
        .args(args)
        .output()
        .expect("run redis-cli");
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Keys matching `pattern` on the server at `port` (SCAN, so it also works on a big database).
pub fn keys(port: u16, pattern: &str) -> Vec<String> {
    cli(port, &["--scan", "--pattern", pattern])
        .lines()
        .filter(|l| !l.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Waits until the server answers PING (after AUTH when it has a password).
fn wait_for_pong(port: u16, password: Option<&str>) {
    wait_until(&format!("redis-server on port {port} answers PING"), || {
        pong(port, password)
    });
}

fn pong(port: u16, password: Option<&str>) -> bool {
    let Ok(mut s) = TcpStream::connect(("127.0.0.1", port)) else {
        return false;
    };
    let _ = s.set_read_timeout(Some(Duration::from_millis(500)));
    let hello = match password {
        Some(p) => format!("AUTH {p}\r\nPING\r\n"),
        None => "PING\r\n".to_owned(),
    };
    if s.write_all(hello.as_bytes()).is_err() {
        return false;
    }
    let (mut buf, mut got) = ([0u8; 64], String::new());
    while let Ok(n) = s.read(&mut buf) {
        if n == 0 {
            break;
        }
        got.push_str(&String::from_utf8_lossy(&buf[..n]));
        if got.contains("PONG") {
            return true;
        }
    }
    false
}

/// A 3-master Redis Cluster without replicas, every slot covered; killed on drop.
pub struct RedisCluster {
    /// The three masters.
    pub nodes: Vec<RedisServer>,
}

impl RedisCluster {
    /// Starts and joins the three nodes, waiting until each reports `cluster_state:ok`;
    /// `None` (the test skips) when redis-server is missing outside CI.
    pub fn start() -> Option<RedisCluster> {
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
        for node in &nodes {
            wait_until("every cluster node reports cluster_state:ok", || {
                node.cli(&["cluster", "info"]).contains("cluster_state:ok")
            });
        }
        Some(RedisCluster { nodes })
    }

    /// `redis://127.0.0.1:<port>` of every node, to seed a cluster client.
    pub fn seeds(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| format!("redis://127.0.0.1:{}", n.port))
            .collect()
    }
}

/// A store on `url` with its own key `prefix` (one per test) and a generous timeout: the
/// tests that use it are about decisions, not latency (the fault tests set their own).
#[cfg(feature = "redis-store")]
pub async fn store(url: &str, prefix: &str) -> sluicegate_redis::RedisStore {
    let mut config = sluicegate_redis::RedisConfig::standalone(url);
    config.key_prefix = prefix.to_owned();
    config.timeout = Duration::from_secs(2);
    sluicegate_redis::RedisStore::connect(config)
        .await
        .unwrap_or_else(|e| panic!("connect to {url}: {e}"))
}
