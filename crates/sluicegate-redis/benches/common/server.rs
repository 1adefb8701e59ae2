//! One redis-server for a benchmark (on a free port, no persistence), and its CPU time
//! (`INFO cpu`).

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use super::pin;

/// A running redis-server (killed on drop) and its port.
pub struct Server(Child, pub u16);

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts redis-server on a free port, on `cpu` when pinning, and waits until it answers.
pub fn start_server(cpu: Option<&str>) -> Server {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let server = Server(
        pin::command("redis-server", cpu)
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server must be installed (scripts/install-test-deps.sh)"),
        port,
    );
    for _ in 0..200 {
        if cli(port, &["ping"]).contains("PONG") {
            return server;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    panic!("redis-server did not start");
}

/// `redis-cli -p port args…`, its output trimmed.
pub fn cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli")
        .args(["-p", &port.to_string()])
        .args(args)
        .output()
        .expect("redis-cli");
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// CPU seconds redis-server has used, from INFO cpu.
pub fn server_cpu(port: u16) -> f64 {
    cli(port, &["info", "cpu"])
        .lines()
        .filter(|l| l.starts_with("used_cpu_sys:") || l.starts_with("used_cpu_user:"))
        .filter_map(|l| l.split(':').nth(1)?.trim().parse::<f64>().ok())
        .sum()
}
