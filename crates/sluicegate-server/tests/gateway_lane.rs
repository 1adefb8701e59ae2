//! The gateway's lean upstream lane (`src/lane.rs`) against an upstream written by hand on
//! raw TCP, which answers each path with fixed bytes: every framing a response can have
//! (Content-Length, chunked with trailers, until close, none for HEAD/204/304, an interim
//! 100 first), malformed answers (a 502), an upstream that closes in the middle of a body
//! (the client sees a broken body, not a hang), and connection reuse (an accept counter).

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sluicegate_testkit::{Sluicegate, read_request_head, sluicegate_bin, write};
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// The answer to `method path`, and whether the upstream closes the connection after it.
fn answer(method: &str, path: &str) -> (Vec<u8>, bool) {
    let fixed: &[u8] = match path {
        "/length" => b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-up: 1\r\n\r\nhello",
        "/chunked" => b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntrailer: x-sum\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nx-sum: 11\r\n\r\n",
        "/chunked-plain" => b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
        "/no-content" => b"HTTP/1.1 204 No Content\r\nx-up: 1\r\n\r\n",
        "/not-modified" => b"HTTP/1.1 304 Not Modified\r\netag: \"a\"\r\ncontent-length: 9\r\n\r\n",
        "/continue" => b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok",
        "/until-close" => return (b"HTTP/1.1 200 OK\r\n\r\nuntil the end".to_vec(), true),
        "/says-close" => {
            return (
                b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 3\r\n\r\nbye".to_vec(),
                false,
            );
        }
        "/both" => b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n",
        "/two-lengths" => b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nhello!",
        "/gzip-chunked" => b"HTTP/1.1 200 OK\r\ntransfer-encoding: gzip, chunked\r\n\r\n0\r\n\r\n",
        "/garbage" => b"HTTP/1.1 abc\r\n\r\n",
        "/not-http" => b"SSH-2.0-OpenSSH\r\n\r\n",
        "/switch" => b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n\r\n",
        "/cut-length" => return (b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly ten!!".to_vec(), true),
        "/cut-chunked" => return (b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n64\r\nonly ten!!".to_vec(), true),
        "/bad-chunk" => b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
        "/big-head" => {
            let filler = "x".repeat(70 * 1024);
            return (format!("HTTP/1.1 200 OK\r\nx-big: {filler}\r\ncontent-length: 0\r\n\r\n").into_bytes(), false);
        }
        "/many-fields" => {
            let fields: String = (0..150).map(|i| format!("x-{i}: 1\r\n")).collect();
            return (format!("HTTP/1.1 200 OK\r\n{fields}content-length: 0\r\n\r\n").into_bytes(), false);
        }
        "/large" => {
            let body = pattern(1 << 20);
            let mut all = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len()).into_bytes();
            all.extend_from_slice(&body);
            return (all, false);
        }
        _ => b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n",
    };
    let mut bytes = fixed.to_vec();
    if method == "HEAD" {
        // A HEAD answer is the head alone, whatever its Content-Length says.
        let end = bytes.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
        bytes.truncate(end);
    }
    (bytes, false)
}

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| b'a' + (i % 26) as u8).collect()
}

/// A raw upstream; counts the connections it accepted.
async fn upstream() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = accepted.clone();
    tokio::spawn(async move {
        loop {
            let (socket, _) = listener.accept().await.unwrap();
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(serve(socket));
        }
    });
    (addr, accepted)
}

async fn serve(mut socket: TcpStream) {
    let mut buf = Vec::new();
    loop {
        let Some((method, path)) = read_request_head(&mut socket, &mut buf).await else {
            return;
        };
        let (bytes, close) = answer(&method, &path);
        // In two writes, so the lane also meets a head and body split across reads.
        let split = bytes.len() / 2;
        if socket.write_all(&bytes[..split]).await.is_err() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
        if socket.write_all(&bytes[split..]).await.is_err() || close {
            return;
        }
    }
}

fn start(dir: &std::path::Path, upstream: SocketAddr) -> Sluicegate {
    let toml = format!(
        "[gateway]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://{upstream}\"\nupstream_timeout = \"5s\"\n"
    );
    let path = write(dir, "g.toml", &toml);
    Sluicegate::start(sluicegate_bin!(), &["--config", path.to_str().unwrap()])
}

async fn get(client: &reqwest::Client, server: &Sluicegate, path: &str) -> (u16, Vec<u8>) {
    let r = client.get(server.gateway_url(path)).send().await.unwrap();
    (r.status().as_u16(), r.bytes().await.unwrap().to_vec())
}

#[tokio::test]
async fn every_framing_arrives_whole_on_one_reused_connection() {
    let (addr, accepted) = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), addr);
    // One client connection reaches one worker, which keeps one upstream connection.
    let client = reqwest::Client::new();
    for _ in 0..3 {
        let r = client
            .get(server.gateway_url("/length"))
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), 200);
        assert_eq!(r.headers()["x-up"], "1");
        assert_eq!(r.bytes().await.unwrap(), "hello");
        assert_eq!(
            get(&client, &server, "/chunked").await,
            (200, b"hello world".to_vec())
        );
        assert_eq!(
            get(&client, &server, "/chunked-plain").await,
            (200, b"abc".to_vec())
        );
        assert_eq!(
            get(&client, &server, "/no-content").await,
            (204, Vec::new())
        );
        assert_eq!(
            get(&client, &server, "/not-modified").await,
            (304, Vec::new())
        );
        assert_eq!(
            get(&client, &server, "/continue").await,
            (200, b"ok".to_vec())
        );
        assert_eq!(
            get(&client, &server, "/large").await,
            (200, pattern(1 << 20))
        );
        let head = client
            .head(server.gateway_url("/length"))
            .send()
            .await
            .unwrap();
        assert_eq!(head.status(), 200);
        assert_eq!(head.headers()["content-length"], "5");
        assert!(head.bytes().await.unwrap().is_empty());
    }
    assert_eq!(
        accepted.load(Ordering::SeqCst),
        1,
        "the connection was not reused"
    );
}

#[tokio::test]
async fn a_response_until_close_or_with_connection_close_is_not_reused() {
    let (addr, accepted) = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), addr);
    let client = reqwest::Client::new();
    for i in 1..=3 {
        assert_eq!(
            get(&client, &server, "/until-close").await,
            (200, b"until the end".to_vec())
        );
        assert_eq!(accepted.load(Ordering::SeqCst), 2 * i - 1);
        assert_eq!(
            get(&client, &server, "/says-close").await,
            (200, b"bye".to_vec())
        );
        assert_eq!(accepted.load(Ordering::SeqCst), 2 * i);
    }
}

#[tokio::test]
async fn malformed_answers_are_a_502_and_cost_only_their_connection() {
    let (addr, accepted) = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), addr);
    let client = reqwest::Client::new();
    let bad = [
        "/both",
        "/two-lengths",
        "/gzip-chunked",
        "/garbage",
        "/not-http",
        "/switch",
        "/big-head",
        "/many-fields",
    ];
    for path in bad {
        let (status, body) = get(&client, &server, path).await;
        assert_eq!(status, 502, "{path}");
        let text = String::from_utf8(body).unwrap();
        assert!(
            text.contains("bad_gateway") && !text.contains("127.0.0.1"),
            "{path}: {text}"
        );
        // Each broken connection is dropped; the next request is answered on a new one.
        assert_eq!(
            get(&client, &server, "/length").await,
            (200, b"hello".to_vec()),
            "after {path}"
        );
    }
    assert_eq!(accepted.load(Ordering::SeqCst), bad.len() + 1);
}

#[tokio::test]
async fn an_upstream_closing_mid_body_breaks_the_client_body_without_a_hang() {
    let (addr, _) = upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(dir.path(), addr);
    let client = reqwest::Client::new();
    for path in ["/cut-length", "/cut-chunked", "/bad-chunk"] {
        let read = async {
            let r = client.get(server.gateway_url(path)).send().await?;
            r.bytes().await
        };
        let read = tokio::time::timeout(Duration::from_secs(10), read).await;
        match read {
            Ok(Err(_)) => {}
            Ok(Ok(body)) => panic!("{path}: a whole body of {} bytes", body.len()),
            Err(_) => panic!("{path}: the client hung"),
        }
        assert_eq!(
            get(&client, &server, "/length").await,
            (200, b"hello".to_vec()),
            "after {path}"
        );
    }
}
