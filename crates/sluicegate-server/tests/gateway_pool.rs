//! The gateway's upstream connections (`src/upstream.rs`) against an upstream written by hand
//! on raw TCP, so each test controls what a connection does: kept-alive connections are
//! reused; an upstream that closes them after every response costs nothing but new
//! connections; a response the client stops reading closes its upstream connection (no
//! leak, and nothing of it reaches the next request); a response that came too late (504)
//! is never handed to the next request.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

use sluicegate_testkit::{Sluicegate, eventually, read_request_head, sluicegate_bin, write};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// What the upstream has seen.
#[derive(Default)]
struct Seen {
    /// Connections accepted.
    accepted: AtomicUsize,
    /// Connections open now.
    open: AtomicUsize,
    /// Close every connection after one response (without saying so in `Connection`).
    close_after_each: AtomicBool,
    /// Late `/slow` answers written (or whose write failed): the moment they can reach the
    /// gateway has passed.
    late: AtomicUsize,
}

const BIG: usize = 8 * 1024 * 1024;

/// An HTTP/1.1 upstream for GET requests: `/big` answers `BIG` bytes, `/slow` answers after
/// two seconds, anything else `ok:PATH`.
async fn upstream() -> (SocketAddr, Arc<Seen>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Arc::new(Seen::default());
    let counts = seen.clone();
    tokio::spawn(async move {
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            counts.accepted.fetch_add(1, Ordering::SeqCst);
            counts.open.fetch_add(1, Ordering::SeqCst);
            let counts = counts.clone();
            tokio::spawn(async move {
                serve(socket, &counts).await;
                counts.open.fetch_sub(1, Ordering::SeqCst);
            });
        }
    });
    (addr, seen)
}

/// Answers requests on one connection until the peer closes it (or a write fails).
async fn serve(mut socket: TcpStream, seen: &Seen) {
    let mut buf = Vec::new();
    loop {
        let Some((_, path)) = read_request_head(&mut socket, &mut buf).await else {
            return;
        };
        let body = match path.as_str() {
            "/big" => vec![b'x'; BIG],
            "/slow" => {
                tokio::time::sleep(Duration::from_secs(2)).await;
                b"late:/slow".to_vec()
            }
            _ => format!("ok:{path}").into_bytes(),
        };
        let head = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len());
        let written = socket.write_all(head.as_bytes()).await.is_ok()
            && socket.write_all(&body).await.is_ok();
        if path == "/slow" {
            seen.late.fetch_add(1, Ordering::SeqCst);
        }
        if !written {
            return;
        }
        if seen.close_after_each.load(Ordering::SeqCst) {
            return;
        }
    }
}

fn start(dir: &std::path::Path, upstream: SocketAddr) -> Sluicegate {
    let toml = format!(
        "[gateway]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://{upstream}\"\nupstream_timeout = \"1s\"\n"
    );
    let path = write(dir, "g.toml", &toml);
    Sluicegate::start(sluicegate_bin!(), &["--config", path.to_str().unwrap()])
}

/// `GET path` on a client connection of its own: the status and the body.
async fn get(client: &reqwest::Client, server: &Sluicegate, path: &str) -> (u16, String) {
    let r = client.get(server.gateway_url(path)).send().await.unwrap();
    (r.status().as_u16(), r.text().await.unwrap())
}

#[tokio::test]
async fn kept_alive_connections_are_reused_and_closed_ones_replaced() {
    let (addr, seen) = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), addr);
    // One client connection reaches one worker, which keeps one upstream connection.
    let client = reqwest::Client::new();
    for i in 0..50 {
        let path = format!("/r{i}");
        assert_eq!(
            get(&client, &server, &path).await,
            (200, format!("ok:{path}"))
        );
    }
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 1);

    // An upstream that closes each connection after its response: every request still gets
    // its own answer, each on a new connection.
    seen.close_after_each.store(true, Ordering::SeqCst);
    for i in 0..20 {
        let path = format!("/c{i}");
        assert_eq!(
            get(&client, &server, &path).await,
            (200, format!("ok:{path}"))
        );
    }
    assert!(seen.accepted.load(Ordering::SeqCst) >= 20);
    eventually("the closed connections are gone", || async {
        seen.open.load(Ordering::SeqCst) == 0
    })
    .await;
}

#[tokio::test]
async fn a_response_the_client_stops_reading_closes_its_upstream_connection() {
    let (addr, seen) = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), addr);
    let gateway = server.gateway.unwrap();
    for _ in 0..3 {
        let mut client = TcpStream::connect(gateway).await.unwrap();
        client
            .write_all(b"GET /big HTTP/1.1\r\nhost: x\r\n\r\n")
            .await
            .unwrap();
        let mut part = vec![0u8; 64 * 1024];
        client.read_exact(&mut part).await.unwrap();
        drop(client);
    }
    // The rest of each body was still coming: those connections cannot serve another
    // request, so the gateway closes them rather than keeping them.
    eventually(
        "the half-read responses' connections are closed",
        || async { seen.open.load(Ordering::SeqCst) == 0 },
    )
    .await;
    // And nothing of them reaches the next request.
    let client = reqwest::Client::new();
    for i in 0..5 {
        let path = format!("/after{i}");
        assert_eq!(
            get(&client, &server, &path).await,
            (200, format!("ok:{path}"))
        );
    }
}

#[tokio::test]
async fn a_response_that_came_too_late_is_not_given_to_the_next_request() {
    let (addr, seen) = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), addr);
    let client = reqwest::Client::new();
    assert_eq!(get(&client, &server, "/slow").await.0, 504);
    // The late answer arrives on a connection the gateway gave up: the next requests are
    // answered on another one, each with its own body.
    for i in 0..5 {
        let path = format!("/next{i}");
        assert_eq!(
            get(&client, &server, &path).await,
            (200, format!("ok:{path}"))
        );
    }
    eventually("the upstream has sent its late answer", || async {
        seen.late.load(Ordering::SeqCst) == 1
    })
    .await;
    for i in 0..5 {
        let path = format!("/later{i}");
        assert_eq!(
            get(&client, &server, &path).await,
            (200, format!("ok:{path}"))
        );
    }
    assert!(seen.accepted.load(Ordering::SeqCst) >= 2);
}

/// The lane's response-head deadline is one timer per upstream connection, moved on for each
/// request: on a connection that has carried requests, a slow answer still gets its 504
/// within `upstream_timeout`, and the quick ones before it were not cut short by an earlier
/// request's deadline.
#[tokio::test]
async fn a_kept_alive_connection_times_out_a_slow_answer_too() {
    let (addr, seen) = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), addr);
    // One client connection: one gateway worker, so one upstream connection carries all.
    let client = reqwest::Client::new();
    for i in 0..5 {
        let path = format!("/warm{i}");
        assert_eq!(
            get(&client, &server, &path).await,
            (200, format!("ok:{path}"))
        );
    }
    assert_eq!(seen.accepted.load(Ordering::SeqCst), 1);
    assert_eq!(get(&client, &server, "/slow").await.0, 504);
    for i in 0..5 {
        let path = format!("/next{i}");
        assert_eq!(
            get(&client, &server, &path).await,
            (200, format!("ok:{path}"))
        );
    }
    // (The late answer never reached them: each got its own body, above.)
}
