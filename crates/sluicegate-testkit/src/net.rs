//! Loopback ports and condition polling (tests wait for conditions, never for luck).

use std::io::Read;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

/// How long a condition may take before the test fails: generous, because a loaded 2-core
/// machine is slow, and a passing test never waits for it.
pub const PATIENCE: Duration = Duration::from_secs(20);

/// A loopback port nobody listens on right now (bound, read, released).
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .expect("bind 127.0.0.1:0")
}

/// A free port whose Redis Cluster bus port (`port + 10000`) is free too.
pub fn free_port_with_bus() -> u16 {
    loop {
        let port = free_port();
        if port < 55_000 && TcpListener::bind(("127.0.0.1", port + 10_000)).is_ok() {
            return port;
        }
    }
}

/// Waits until something accepts TCP connections on `addr` (fails after [`PATIENCE`]).
pub fn wait_for_port(addr: SocketAddr) {
    wait_until(&format!("something listens on {addr}"), || {
        TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok()
    });
}

/// Polls `done` every 20 ms until it returns true; panics naming `what` after [`PATIENCE`].
pub fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + PATIENCE;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The async [`wait_until`]: polls `done` every 20 ms until it returns true; panics naming
/// `what` after [`PATIENCE`].
pub async fn eventually<F, Fut>(what: &str, mut done: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + PATIENCE;
    while !done().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// For a raw-TCP upstream written by a test: the method and path of the next request head on
/// `socket` (bytes already read and not yet used are kept in `buf`), or `None` at the end of
/// the connection. The head is consumed; a body, if any, is left for the caller.
pub async fn read_request_head(
    socket: &mut tokio::net::TcpStream,
    buf: &mut Vec<u8>,
) -> Option<(String, String)> {
    use tokio::io::AsyncReadExt;
    loop {
        if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&buf[..end]).into_owned();
            buf.drain(..end + 4);
            let mut words = head.split(' ');
            return Some((words.next()?.to_owned(), words.next()?.to_owned()));
        }
        let mut chunk = [0u8; 4096];
        match socket.read(&mut chunk).await {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Whether the server closed `stream` (EOF or reset), waiting up to `patience` and reading
/// past whatever it sends first (a 408, or the rest of a large body).
pub fn closed_by_server(stream: &mut TcpStream, patience: Duration) -> bool {
    stream
        .set_read_timeout(Some(patience))
        .expect("set a read timeout");
    let mut buf = [0u8; 16 * 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return true,
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => return false,
            Err(e) if e.kind() == std::io::ErrorKind::TimedOut => return false,
            Err(_) => return true,
        }
    }
}
