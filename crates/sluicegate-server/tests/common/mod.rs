//! Helpers shared by the integration tests: the real `sluicegate` binary on free ports,
//! external programs (nginx, redis-server) found or loudly missing.

#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A running `sluicegate serve`; killed on drop.
pub struct Server {
    pub child: Child,
    pub api: SocketAddr,
    pub gateway: Option<SocketAddr>,
    pub banner: String,
    stderr: std::sync::Arc<std::sync::Mutex<String>>,
}

impl Server {
    /// Starts `sluicegate serve ARGS --listen 127.0.0.1:0` and waits for its banner.
    pub fn start(args: &[&str]) -> Server {
        Self::start_with(args, true)
    }

    /// As [`start`], without adding `--listen` (the config file or the flags choose).
    pub fn start_with(args: &[&str], pick_port: bool) -> Server {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sluicegate"));
        cmd.arg("serve").args(args);
        if pick_port {
            cmd.args(["--listen", "127.0.0.1:0"]);
        }
        let mut child = cmd
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn sluicegate");
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        let log = std::sync::Arc::new(std::sync::Mutex::new(String::new()));
        let sink = log.clone();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                sink.lock().unwrap().push_str(&(line + "\n"));
            }
        });
        let (tx, rx) = mpsc::channel::<String>();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    // Keep draining so the server never blocks on a full pipe.
                }
            }
        });
        let deadline = Instant::now() + Duration::from_secs(20);
        let mut banner = String::new();
        let mut api = None;
        let mut gateway = None;
        while Instant::now() < deadline {
            match rx.recv_timeout(Duration::from_millis(100)) {
                Ok(line) => {
                    banner.push_str(&line);
                    banner.push('\n');
                    let t = line.trim();
                    if let Some(rest) = t.strip_prefix("api http://") {
                        api = rest.parse().ok();
                    }
                    if let Some(rest) = t.strip_prefix("gateway http://") {
                        gateway = rest.split(' ').next().and_then(|a| a.parse().ok());
                    }
                    if t == "ready" {
                        break;
                    }
                }
                Err(mpsc::RecvTimeoutError::Timeout) => {
                    if let Ok(Some(status)) = child.try_wait() {
                        panic!("sluicegate exited with {status}: {}", log.lock().unwrap());
                    }
                }
                Err(mpsc::RecvTimeoutError::Disconnected) => {
                    std::thread::sleep(Duration::from_millis(200));
                    panic!(
                        "sluicegate closed stdout: {banner}\n{}",
                        log.lock().unwrap()
                    );
                }
            }
        }
        // Keep reading the rest of the banner in the background.
        std::thread::spawn(move || while rx.recv().is_ok() {});
        let api = api.unwrap_or_else(|| panic!("no API address in banner: {banner}"));
        Server {
            child,
            api,
            gateway,
            banner,
            stderr: log,
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.api, path)
    }

    pub fn gateway_url(&self, path: &str) -> String {
        format!("http://{}{}", self.gateway.expect("gateway running"), path)
    }

    /// What the server logged so far.
    pub fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> ExitStatus {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "server did not stop after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().unwrap().is_none()
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A port nobody listens on right now.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The path of an external program, or `None` (test skipped) when it is missing outside
/// CI; in CI (`CI=true`) a missing program fails the test.
pub fn program(name: &str) -> Option<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::env::var_os("PATH")
        .map(|p| std::env::split_paths(&p).collect())
        .unwrap_or_default();
    dirs.extend(["/usr/sbin", "/usr/local/sbin", "/sbin", "/usr/bin"].map(PathBuf::from));
    let found = dirs.iter().map(|d| d.join(name)).find(|p| p.is_file());
    if found.is_none() {
        if std::env::var("CI").is_ok_and(|v| v == "true") {
            panic!(
                "{name} is required (scripts/install-test-deps.sh installs it) but is not installed"
            );
        }
        eprintln!("SKIPPED: {name} is not installed (run scripts/install-test-deps.sh)");
    }
    found
}

/// Waits until something accepts TCP connections on `addr`.
pub fn wait_for_port(addr: SocketAddr) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_err() {
        assert!(Instant::now() < deadline, "nothing listens on {addr}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Polls `f` until it returns true (or fails after 10 s).
pub async fn eventually<F, Fut>(what: &str, mut f: F)
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = Instant::now() + Duration::from_secs(10);
    while !f().await {
        assert!(Instant::now() < deadline, "timed out waiting for: {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Writes `text` to `dir/name` and returns the path.
pub fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
    let path = dir.join(name);
    std::fs::write(&path, text).unwrap();
    path
}

/// The sluicegate binary, for one-shot commands (`validate`).
pub fn binary() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sluicegate"))
}
