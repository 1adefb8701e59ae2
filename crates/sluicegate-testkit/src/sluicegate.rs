//! The real `sluicegate` binary: started with a config, waited for until it prints `ready`,
//! its output captured, killed on drop.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::process::{Child, ChildStdout, Command, ExitStatus, Stdio};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::net::{PATIENCE, wait_until};

/// A running `sluicegate serve`; killed on drop.
///
/// The binary's path comes from the test, as only the server crate's tests know it:
/// `Sluicegate::start(env!("CARGO_BIN_EXE_sluicegate"), &["--config", path])`.
pub struct Sluicegate {
    /// The process.
    pub child: Child,
    /// The API address from the banner (`api http://…`).
    pub api: SocketAddr,
    /// The gateway address, when the config runs one (`gateway http://…`).
    pub gateway: Option<SocketAddr>,
    /// The Envoy gRPC address, when the config runs it (`envoy grpc://…`).
    pub envoy: Option<SocketAddr>,
    /// Everything printed on stdout up to and including `ready`.
    pub banner: String,
    stderr: Arc<Mutex<String>>,
}

/// What the banner said up to `ready`.
#[derive(Default)]
struct Banner {
    text: String,
    api: Option<SocketAddr>,
    gateway: Option<SocketAddr>,
    envoy: Option<SocketAddr>,
}

impl Banner {
    /// Reads one line; true on `ready`.
    fn read(&mut self, line: &str) -> bool {
        self.text.push_str(line);
        self.text.push('\n');
        let t = line.trim();
        let addr = |rest: &str| rest.split(' ').next().and_then(|a| a.parse().ok());
        if let Some(rest) = t.strip_prefix("api http://") {
            self.api = addr(rest);
        } else if let Some(rest) = t
            .strip_prefix("gateway http://")
            .or_else(|| t.strip_prefix("gateway https://"))
        {
            self.gateway = addr(rest);
        } else if let Some(rest) = t.strip_prefix("envoy grpc://") {
            self.envoy = addr(rest);
        }
        t == "ready"
    }
}

impl Sluicegate {
    /// Starts `BIN serve ARGS --listen 127.0.0.1:0` and waits until it prints `ready`.
    pub fn start(bin: &str, args: &[&str]) -> Sluicegate {
        Self::start_with(bin, args, true)
    }

    /// As [`Sluicegate::start`]; without `pick_port` no `--listen` is added (the config file
    /// or the arguments choose the API address).
    pub fn start_with(bin: &str, args: &[&str], pick_port: bool) -> Sluicegate {
        Self::start_env(bin, args, pick_port, &[])
    }

    /// As [`Sluicegate::start_with`], with these environment variables set for the process
    /// (e.g. `SSL_CERT_FILE`, where the system's trusted certificates are read from).
    pub fn start_env(
        bin: &str,
        args: &[&str],
        pick_port: bool,
        env: &[(&str, &str)],
    ) -> Sluicegate {
        let mut cmd = Command::new(bin);
        cmd.envs(env.iter().copied());
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
            .unwrap_or_else(|e| panic!("spawn {bin}: {e}"));
        let stderr = capture(child.stderr.take().expect("piped stderr"));
        let lines = lines(child.stdout.take().expect("piped stdout"));
        let banner = read_banner(&mut child, &lines, &stderr);
        // Keep draining stdout: a full pipe would block the server's next print.
        std::thread::spawn(move || while lines.recv().is_ok() {});
        let api = banner
            .api
            .unwrap_or_else(|| panic!("no API address in the banner: {}", banner.text));
        Sluicegate {
            child,
            api,
            gateway: banner.gateway,
            envoy: banner.envoy,
            banner: banner.text,
            stderr,
        }
    }

    /// `http://<api><path>`.
    pub fn url(&self, path: &str) -> String {
        format!("http://{}{}", self.api, path)
    }

    /// `http://<gateway><path>`; panics when no gateway runs.
    pub fn gateway_url(&self, path: &str) -> String {
        format!("http://{}{}", self.gateway.expect("gateway running"), path)
    }

    /// What the server logged on stderr so far.
    pub fn log(&self) -> String {
        self.stderr.lock().unwrap().clone()
    }

    /// Sends SIGTERM and waits for the exit status.
    pub fn terminate(mut self) -> ExitStatus {
        self.signal("TERM");
        let mut status = None;
        wait_until("sluicegate exits after SIGTERM", || {
            status = self.child.try_wait().expect("try_wait");
            status.is_some()
        });
        status.expect("exited")
    }

    /// Sends a signal (`HUP`, `TERM`, …) to the process.
    pub fn signal(&self, signal: &str) {
        let status = Command::new("kill")
            .args([&format!("-{signal}"), &self.child.id().to_string()])
            .status()
            .expect("run kill");
        assert!(status.success(), "kill -{signal} failed");
    }

    /// Whether the process is still running.
    pub fn alive(&mut self) -> bool {
        self.child.try_wait().expect("try_wait").is_none()
    }
}

impl Drop for Sluicegate {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Collects a pipe into a string, in the background.
fn capture(pipe: impl std::io::Read + Send + 'static) -> Arc<Mutex<String>> {
    let log = Arc::new(Mutex::new(String::new()));
    let sink = Arc::clone(&log);
    std::thread::spawn(move || {
        for line in BufReader::new(pipe).lines().map_while(Result::ok) {
            sink.lock().unwrap().push_str(&(line + "\n"));
        }
    });
    log
}

/// The lines of stdout, through a channel.
fn lines(stdout: ChildStdout) -> Receiver<String> {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // A dropped receiver is fine: the reader keeps draining the pipe.
            let _ = tx.send(line);
        }
    });
    rx
}

/// Reads the banner up to `ready`; panics with the server's log when it exits first.
fn read_banner(child: &mut Child, lines: &Receiver<String>, log: &Mutex<String>) -> Banner {
    let deadline = Instant::now() + PATIENCE;
    let mut banner = Banner::default();
    loop {
        assert!(
            Instant::now() < deadline,
            "sluicegate did not print `ready`: {}\n{}",
            banner.text,
            log.lock().unwrap()
        );
        match lines.recv_timeout(Duration::from_millis(100)) {
            Ok(line) if banner.read(&line) => return banner,
            Ok(_) => {}
            Err(RecvTimeoutError::Timeout | RecvTimeoutError::Disconnected) => {
                if let Ok(Some(status)) = child.try_wait() {
                    // Let the stderr reader catch up before reporting.
                    std::thread::sleep(Duration::from_millis(200));
                    panic!(
                        "sluicegate exited with {status}: {}\n{}",
                        banner.text,
                        log.lock().unwrap()
                    );
                }
                std::thread::sleep(Duration::from_millis(20));
            }
        }
    }
}

/// The path of the `sluicegate` binary Cargo built for this test crate (only the server
/// crate's tests have it): `Sluicegate::start(sluicegate_bin!(), &[])`.
#[macro_export]
macro_rules! sluicegate_bin {
    () => {
        env!("CARGO_BIN_EXE_sluicegate")
    };
}
