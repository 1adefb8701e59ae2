//! A gateway people can deploy (issue 15, item 3), through the real binary with real
//! clients: WebSocket upgrades limited at the handshake and then streamed both ways
//! (tokio-tungstenite), `https://` upstreams (`upstream_ca` or the system's roots), TLS
//! served by the gateway with its certificate reloaded (curl, rustls), HTTP/2 from clients
//! (curl, hyper's h2 client) with every stream decided, and the connection limits holding
//! for TLS handshakes. Certificates are made at test time (rcgen).

use std::convert::Infallible;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::extract::Request;
use axum::http::HeaderValue;
use axum::response::Response;
use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use http_body_util::Empty;
use hyper_util::rt::{TokioExecutor, TokioIo};
use sluicegate_testkit::tls::{TestCa, connect, serve_tls};
use sluicegate_testkit::{Sluicegate, eventually, http, program, sluicegate_bin, write};
use tokio_tungstenite::tungstenite::{self, Message};

/// What the WebSocket upstream saw in each request: `(path, upgrade, connection)`.
type Seen = Arc<Mutex<Vec<(String, String, String)>>>;

/// An upstream on one port that answers WebSocket handshakes (greets, then echoes every
/// message) and, for any other request, 200 naming the `Upgrade`/`Connection` it received.
async fn ws_upstream() -> (String, Seen) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let seen = Seen::default();
    let record = Arc::clone(&seen);
    tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                continue;
            };
            let record = Arc::clone(&record);
            let service = hyper::service::service_fn(move |request| {
                let record = Arc::clone(&record);
                async move { Ok::<_, Infallible>(ws_or_plain(request, &record)) }
            });
            tokio::spawn(
                hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection_with_upgrades(TokioIo::new(stream), service)
                    .into_owned(),
            );
        }
    });
    (format!("http://{addr}"), seen)
}

fn ws_or_plain(
    mut request: hyper::Request<hyper::body::Incoming>,
    seen: &Seen,
) -> hyper::Response<Empty<Bytes>> {
    let header = |name: &str| {
        request
            .headers()
            .get(name)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("-")
            .to_owned()
    };
    let (upgrade, connection) = (header("upgrade"), header("connection"));
    seen.lock().unwrap().push((
        request.uri().path().to_owned(),
        upgrade.clone(),
        connection.clone(),
    ));
    let Some(key) = request.headers().get("sec-websocket-key").cloned() else {
        let mut response = hyper::Response::new(Empty::new());
        let h = response.headers_mut();
        h.insert("x-seen-upgrade", HeaderValue::from_str(&upgrade).unwrap());
        h.insert(
            "x-seen-connection",
            HeaderValue::from_str(&connection).unwrap(),
        );
        return response;
    };
    let on_upgrade = hyper::upgrade::on(&mut request);
    tokio::spawn(async move {
        let Ok(upgraded) = on_upgrade.await else {
            return;
        };
        let mut ws = tokio_tungstenite::WebSocketStream::from_raw_socket(
            TokioIo::new(upgraded),
            tungstenite::protocol::Role::Server,
            None,
        )
        .await;
        let _ = ws.send(Message::text("hello")).await;
        while let Some(Ok(message)) = ws.next().await {
            if (message.is_text() || message.is_binary()) && ws.send(message).await.is_err() {
                break;
            }
        }
    });
    let accept = tungstenite::handshake::derive_accept_key(key.as_bytes());
    hyper::Response::builder()
        .status(101)
        .header("upgrade", "websocket")
        .header("connection", "upgrade")
        .header("sec-websocket-accept", accept)
        .body(Empty::new())
        .unwrap()
}

fn start(dir: &Path, toml: &str) -> Sluicegate {
    let path = write(dir, "g.toml", toml);
    Sluicegate::start(sluicegate_bin!(), &["--config", path.to_str().unwrap()])
}

/// The status of a refused WebSocket handshake, and its `Retry-After`.
fn refused(result: Result<impl Sized, tungstenite::Error>) -> (u16, Option<String>) {
    match result {
        Err(tungstenite::Error::Http(response)) => (
            response.status().as_u16(),
            response
                .headers()
                .get("retry-after")
                .map(|v| v.to_str().unwrap().to_owned()),
        ),
        Err(other) => panic!("handshake failed otherwise: {other}"),
        Ok(_) => panic!("handshake was admitted"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn websocket_is_limited_at_the_handshake_then_streams_both_ways() {
    let (upstream, seen) = ws_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(
        dir.path(),
        &format!(
            r#"
[[policies]]
name = "ws"
algorithm = "fixed_window"
limit = 2
period = "1h"

[[policies]]
name = "live"
algorithm = "concurrency"
limit = 1
lease = "10m"

[[routes]]
path = "/ws"
policies = ["ws"]

[[routes]]
path = "/live"
policies = ["live"]

[gateway]
listen = "127.0.0.1:0"
upstream = "{upstream}"
"#
        ),
    );
    let url = |path: &str| format!("ws://{}{path}", server.gateway.unwrap());

    let (mut ws, response) = tokio_tungstenite::connect_async(url("/ws/chat"))
        .await
        .unwrap();
    assert_eq!(response.status(), 101);
    assert_eq!(response.headers()["ratelimit-remaining"], "1");
    // The upstream speaks first, then echoes: bytes flow both ways.
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("hello"));
    ws.send(Message::text("ping 1")).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("ping 1"));
    let big: Vec<u8> = (0..300_000u32).map(|i| (i * 7 % 251) as u8).collect();
    ws.send(Message::binary(big.clone())).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::binary(big));

    let (_second, _) = tokio_tungstenite::connect_async(url("/ws/chat"))
        .await
        .unwrap();
    let (status, retry_after) = refused(tokio_tungstenite::connect_async(url("/ws/chat")).await);
    assert_eq!(status, 429, "the third handshake is over the limit");
    assert!(retry_after.is_some(), "a 429 handshake says when to retry");
    // The open tunnel is not disturbed by the refusal.
    ws.send(Message::text("still here")).await.unwrap();
    assert_eq!(
        ws.next().await.unwrap().unwrap(),
        Message::text("still here")
    );

    // A concurrency policy holds its lease for the life of the WebSocket.
    let (mut live, _) = tokio_tungstenite::connect_async(url("/live"))
        .await
        .unwrap();
    assert_eq!(live.next().await.unwrap().unwrap(), Message::text("hello"));
    let (status, _) = refused(tokio_tungstenite::connect_async(url("/live")).await);
    assert_eq!(status, 429, "one WebSocket in flight is the limit");
    live.close(None).await.unwrap();
    while live.next().await.is_some() {}
    drop(live);
    eventually("the closed WebSocket's lease is released", || async {
        tokio_tungstenite::connect_async(url("/live")).await.is_ok()
    })
    .await;

    // Upgrades keep `Upgrade` and `Connection: upgrade`; other requests lose them.
    let plain = reqwest::Client::new()
        .get(server.gateway_url("/plain"))
        .header("upgrade", "websocket")
        .header("connection", "keep-alive")
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status(), 200);
    assert_eq!(plain.headers()["x-seen-upgrade"], "-");
    assert_eq!(plain.headers()["x-seen-connection"], "-");
    let seen = seen.lock().unwrap().clone();
    let handshakes: Vec<_> = seen.iter().filter(|(p, _, _)| p != "/plain").collect();
    assert_eq!(
        handshakes.len(),
        2 + 2,
        "refused handshakes never reach the upstream"
    );
    for (path, upgrade, connection) in handshakes {
        assert_eq!(
            (upgrade.as_str(), connection.as_str()),
            ("websocket", "upgrade"),
            "{path}"
        );
    }
}

/// A quiet tunnel is closed after `idle_timeout` (no byte either way), and its lease and
/// connection slot go with it; a tunnel in use is not.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_websocket_is_closed_and_frees_its_lease() {
    let (upstream, _) = ws_upstream().await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(
        dir.path(),
        &format!(
            r#"
[server]
listen = "127.0.0.1:0"
idle_timeout = "2s"
max_connections = 1

[[policies]]
name = "live"
algorithm = "concurrency"
limit = 1
lease = "10m"

[[routes]]
path = "/live"
policies = ["live"]

[gateway]
listen = "127.0.0.1:0"
upstream = "{upstream}"
upstream_timeout = "1s"
"#
        ),
    );
    let url = format!("ws://{}/live", server.gateway.unwrap());
    let (mut ws, _) = tokio_tungstenite::connect_async(&url).await.unwrap();
    assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("hello"));
    // Busy for longer than idle_timeout in all: still open.
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(3) {
        ws.send(Message::text("tick")).await.unwrap();
        assert_eq!(ws.next().await.unwrap().unwrap(), Message::text("tick"));
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
    // Then quiet: the gateway closes it (awaited; the outer timeout only guards a hang).
    let closed = tokio::time::timeout(Duration::from_secs(60), async {
        loop {
            match ws.next().await {
                None | Some(Err(_)) => return,
                Some(Ok(_)) => {}
            }
        }
    })
    .await;
    assert!(closed.is_ok(), "the idle tunnel was never closed");
    // Its lease and its max_connections slot (1) are free again (with one slot for two
    // workers, a shared budget could hand the slot to the worker the kernel did not queue
    // this connection on: the handshake would never be answered).
    let again = tokio::time::timeout(
        Duration::from_secs(20),
        tokio_tungstenite::connect_async(&url),
    )
    .await;
    let (mut again, _) = again
        .unwrap_or_else(|_| panic!("no second handshake: {}", server.log()))
        .unwrap();
    assert_eq!(again.next().await.unwrap().unwrap(), Message::text("hello"));
}

/// An upstream over TLS with a certificate of `ca`, answering with the protocol it was
/// reached by and what `X-Forwarded-Proto` said.
async fn tls_upstream(ca: &TestCa) -> SocketAddr {
    let cert = ca.issue(&["127.0.0.1", "localhost"]);
    let app = Router::new().fallback(|request: Request| async move {
        let proto = request
            .headers()
            .get("x-forwarded-proto")
            .cloned()
            .unwrap_or(HeaderValue::from_static("-"));
        let mut response = Response::new(axum::body::Body::from("over tls"));
        response.headers_mut().insert("x-seen-proto", proto);
        response
    });
    serve_tls(app, cert.server_config(&[b"http/1.1"])).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn https_upstreams_are_checked_against_upstream_ca_or_the_system_roots() {
    let ca = TestCa::new("upstream CA");
    let stranger = TestCa::new("some other CA");
    let upstream = tls_upstream(&ca).await;
    let dir = tempfile::tempdir().unwrap();
    write(dir.path(), "ca.pem", ca.pem());
    write(dir.path(), "other.pem", stranger.pem());
    let toml = |ca_file: &str| {
        format!(
            "[gateway]\nlisten = \"127.0.0.1:0\"\nupstream = \"https://{upstream}\"\nupstream_ca = \"{ca_file}\"\n"
        )
    };
    // A CA that did not sign the upstream's certificate: 502, promptly, not a hang or a 500.
    let server = start(dir.path(), &toml("other.pem"));
    let client = reqwest::Client::new();
    let r = client.get(server.gateway_url("/x")).send().await.unwrap();
    assert_eq!(r.status(), 502);
    let body: serde_json::Value = r.json().await.unwrap();
    assert_eq!(body["error"], "bad_gateway");
    eventually("the failed certificate check is logged", || async {
        let log = server.log();
        log.contains("upstream request failed") && log.contains("UnknownIssuer")
    })
    .await;

    // The right CA, by a reload: the worker's client is rebuilt for it.
    write(dir.path(), "g.toml", &toml("ca.pem"));
    eventually("the reloaded upstream_ca reaches the upstream", || async {
        let r = client.get(server.gateway_url("/x")).send().await.unwrap();
        r.status() == 200 && r.text().await.unwrap() == "over tls"
    })
    .await;

    // Without upstream_ca, the system's roots (here: SSL_CERT_FILE names the test CA).
    let path = write(
        dir.path(),
        "system.toml",
        &format!("[gateway]\nlisten = \"127.0.0.1:0\"\nupstream = \"https://{upstream}\"\n"),
    );
    let ca_file = dir.path().join("ca.pem");
    let system = Sluicegate::start_env(
        sluicegate_bin!(),
        &[
            "--config",
            path.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ],
        false,
        &[("SSL_CERT_FILE", ca_file.to_str().unwrap())],
    );
    let r = client.get(system.gateway_url("/x")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert_eq!(r.headers()["x-seen-proto"], "http");
}

/// `curl ARGS -w '\n%{http_version} %{http_code}'`: the body, the protocol and the status.
async fn curl(args: &[&str]) -> Option<(String, String, u16)> {
    let curl = program("curl")?;
    let out = tokio::process::Command::new(curl)
        .args(["-sS", "-w", "\n%{http_version} %{http_code}"])
        .args(args)
        .output()
        .await
        .unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(
        out.status.success(),
        "curl {args:?}: {text} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let (body, tail) = text.rsplit_once('\n').unwrap();
    let (version, code) = tail.split_once(' ').unwrap();
    Some((body.to_owned(), version.to_owned(), code.parse().unwrap()))
}

/// Sends `n` GETs of `path` at once as streams of one HTTP/2 connection over `io`;
/// returns their statuses.
async fn h2_streams<I>(io: I, authority: &str, path: &str, n: usize) -> Vec<u16>
where
    I: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (sender, connection) =
        hyper::client::conn::http2::handshake(TokioExecutor::new(), TokioIo::new(io))
            .await
            .unwrap();
    tokio::spawn(connection);
    let requests = (0..n).map(|_| {
        let mut sender = sender.clone();
        let request = hyper::Request::get(format!("https://{authority}{path}"))
            .body(Empty::<Bytes>::new())
            .unwrap();
        async move {
            sender
                .send_request(request)
                .await
                .unwrap()
                .status()
                .as_u16()
        }
    });
    futures_util::future::join_all(requests).await
}

fn count(statuses: &[u16], status: u16) -> usize {
    statuses.iter().filter(|s| **s == status).count()
}

const LIMITED: &str = r#"
[[policies]]
name = "api"
algorithm = "fixed_window"
limit = 3
period = "1h"

[[policies]]
name = "burst"
algorithm = "fixed_window"
limit = 5
period = "1h"

[[routes]]
path = "/api"
policies = ["api"]

[[routes]]
path = "/burst"
policies = ["burst"]
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn h2c_streams_are_each_decided() {
    let upstream = http::serve(Router::new().fallback(|| async { "ok" })).await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(
        dir.path(),
        &format!("{LIMITED}\n[gateway]\nlisten = \"127.0.0.1:0\"\nupstream = \"{upstream}\"\n"),
    );
    let gateway = server.gateway.unwrap();
    let tcp = tokio::net::TcpStream::connect(gateway).await.unwrap();
    let statuses = h2_streams(tcp, &gateway.to_string(), "/burst/x", 20).await;
    assert_eq!(
        (count(&statuses, 200), count(&statuses, 429)),
        (5, 15),
        "{statuses:?}"
    );

    let Some((body, version, status)) = curl(&[
        "--http2-prior-knowledge",
        "-D",
        "-",
        &server.gateway_url("/api/a"),
    ])
    .await
    else {
        return;
    };
    assert_eq!((version.as_str(), status), ("2", 200), "{body}");
    assert!(body.contains("ratelimit-remaining: 2"), "{body}");
}

/// An HTTP/2 client that keeps its connection alive with PINGs between requests is not
/// cut at `header_read_timeout`: on HTTP/2 the bytes between streams start no request head,
/// so only `idle_timeout` applies once the first request is served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_h2_connection_pinging_between_requests_outlives_the_header_deadline() {
    let upstream = http::serve(Router::new().fallback(|| async { "ok" })).await;
    let dir = tempfile::tempdir().unwrap();
    let server = start(
        dir.path(),
        &format!(
            "{LIMITED}\n[server]\nheader_read_timeout = \"1s\"\nidle_timeout = \"60s\"\n\
             [gateway]\nlisten = \"127.0.0.1:0\"\nupstream = \"{upstream}\"\n"
        ),
    );
    let gateway = server.gateway.unwrap();
    let tcp = tokio::net::TcpStream::connect(gateway).await.unwrap();
    let (mut sender, connection) = hyper::client::conn::http2::Builder::new(TokioExecutor::new())
        .timer(hyper_util::rt::TokioTimer::new())
        .keep_alive_interval(Duration::from_millis(200))
        .keep_alive_while_idle(true)
        .handshake(TokioIo::new(tcp))
        .await
        .unwrap();
    let closed = tokio::spawn(connection);
    let get = || {
        hyper::Request::get(format!("http://{gateway}/plain"))
            .body(Empty::<Bytes>::new())
            .unwrap()
    };
    let first = sender.send_request(get()).await.unwrap();
    assert_eq!(first.status(), 200);
    // Idle, PINGing every 200 ms, for more than twice the header deadline.
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    assert!(
        !closed.is_finished(),
        "the connection was closed while idle"
    );
    let second = sender.send_request(get()).await;
    assert_eq!(
        second
            .map(|r| r.status().as_u16())
            .map_err(|e| e.to_string()),
        Ok(200),
        "{}",
        server.log()
    );
}

struct TlsGateway {
    server: Sluicegate,
    dir: tempfile::TempDir,
    ca: TestCa,
}

impl TlsGateway {
    fn start(extra: &str, upstream: &str) -> TlsGateway {
        let ca = TestCa::new("gateway CA");
        let dir = tempfile::tempdir().unwrap();
        let cert = ca.issue(&["127.0.0.1", "localhost"]);
        write(dir.path(), "gw.crt", &cert.cert_pem);
        write(dir.path(), "gw.key", &cert.key_pem);
        write(dir.path(), "ca.pem", ca.pem());
        let toml = format!(
            "{extra}\n[gateway]\nlisten = \"127.0.0.1:0\"\nupstream = \"{upstream}\"\ntls_cert = \"gw.crt\"\ntls_key = \"gw.key\"\n"
        );
        let server = start(dir.path(), &toml);
        assert!(
            server.banner.contains("gateway https://"),
            "{}",
            server.banner
        );
        TlsGateway { server, dir, ca }
    }

    fn url(&self, path: &str) -> String {
        format!(
            "https://127.0.0.1:{}{path}",
            self.server.gateway.unwrap().port()
        )
    }

    fn ca_file(&self) -> String {
        self.dir.path().join("ca.pem").to_str().unwrap().to_owned()
    }

    /// The certificate a new connection is shown.
    async fn presented(&self) -> Vec<u8> {
        let stream = connect(
            self.server.gateway.unwrap(),
            "127.0.0.1",
            self.ca.client_config(&[]),
        )
        .await
        .unwrap();
        stream.get_ref().1.peer_certificates().unwrap()[0].to_vec()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_is_served_with_h2_and_http1_and_the_certificate_reloads() {
    let upstream = http::serve(Router::new().fallback(|request: Request| async move {
        let proto = request.headers().get("x-forwarded-proto").cloned();
        proto.map_or("-".to_owned(), |p| p.to_str().unwrap().to_owned())
    }))
    .await;
    let gw = TlsGateway::start(LIMITED, &upstream);
    let ca_file = gw.ca_file();
    let Some((body, version, status)) = curl(&[
        "--http2",
        "--cacert",
        &ca_file,
        "-D",
        "-",
        &gw.url("/api/a"),
    ])
    .await
    else {
        return;
    };
    assert_eq!(
        (version.as_str(), status),
        ("2", 200),
        "ALPN chose h2: {body}"
    );
    assert!(body.contains("ratelimit-remaining: 2"), "{body}");
    assert!(body.ends_with("https"), "X-Forwarded-Proto: {body}");
    let (_, version, status) = curl(&["--http1.1", "--cacert", &ca_file, &gw.url("/api/a")])
        .await
        .unwrap();
    assert_eq!((version.as_str(), status), ("1.1", 200));
    let (_, _, status) = curl(&["--http2", "--cacert", &ca_file, &gw.url("/api/a")])
        .await
        .unwrap();
    assert_eq!(status, 200);
    let (body, _, status) = curl(&["--http2", "--cacert", &ca_file, &gw.url("/api/a")])
        .await
        .unwrap();
    assert_eq!(status, 429, "the same limit over h2 and HTTP/1.1: {body}");
    assert!(body.contains("rate_limit_exceeded"), "{body}");

    // Many streams on one h2 connection over TLS: each is decided.
    let addr = gw.server.gateway.unwrap();
    let tls = connect(addr, "127.0.0.1", gw.ca.client_config(&[b"h2"]))
        .await
        .unwrap();
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]));
    let statuses = h2_streams(tls, &addr.to_string(), "/burst/y", 12).await;
    assert_eq!(
        (count(&statuses, 200), count(&statuses, 429)),
        (5, 7),
        "{statuses:?}"
    );

    // A renewed certificate (both files replaced) is shown to the next connection.
    let first = gw.presented().await;
    let renewed = gw.ca.issue(&["127.0.0.1", "localhost"]);
    write(gw.dir.path(), "gw.key.new", &renewed.key_pem);
    write(gw.dir.path(), "gw.crt.new", &renewed.cert_pem);
    std::fs::rename(
        gw.dir.path().join("gw.key.new"),
        gw.dir.path().join("gw.key"),
    )
    .unwrap();
    std::fs::rename(
        gw.dir.path().join("gw.crt.new"),
        gw.dir.path().join("gw.crt"),
    )
    .unwrap();
    eventually("a new connection sees the renewed certificate", || async {
        gw.presented().await == renewed.der.to_vec()
    })
    .await;
    assert_ne!(first, renewed.der.to_vec());

    // A broken certificate is refused (logged, naming the field) and the running one stays.
    write(
        gw.dir.path(),
        "gw.crt",
        "-----BEGIN CERTIFICATE-----\nnot base64!\n",
    );
    eventually("the broken certificate is reported", || async {
        gw.server.log().contains("tls_cert:") && gw.server.log().contains("not reloaded")
    })
    .await;
    assert_eq!(gw.presented().await, renewed.der.to_vec());
    let (_, _, status) = curl(&["--http2", "--cacert", &ca_file, &gw.url("/other")])
        .await
        .unwrap();
    assert_eq!(status, 200);
    // SIGHUP re-reads now (and does not end the process, its default action).
    gw.server.signal("HUP");
    eventually("SIGHUP is logged", || async {
        gw.server.log().contains("SIGHUP")
    })
    .await;
    let (_, _, status) = curl(&["--cacert", &ca_file, &gw.url("/other")])
        .await
        .unwrap();
    assert_eq!(status, 200);
}

fn open_fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// Attack: TCP connections that never finish (or never start) their TLS handshake. The
/// gateway holds at most max_connections of them, closes each at header_read_timeout, and
/// serves a real client afterwards.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stalled_tls_handshakes_are_cut_off_and_max_connections_holds() {
    use std::io::{Read, Write};
    let upstream = http::serve(Router::new().fallback(|| async { "ok" })).await;
    let gw = TlsGateway::start(
        "[server]\nlisten = \"127.0.0.1:0\"\nheader_read_timeout = \"1s\"\nmax_connections = 20\n",
        &upstream,
    );
    let pid = gw.server.child.id();
    let baseline = open_fds(pid);
    let addr = gw.server.gateway.unwrap();
    let mut stalled: Vec<std::net::TcpStream> = (0..60)
        .map(|i| {
            let mut s = std::net::TcpStream::connect(addr).unwrap();
            if i % 2 == 0 {
                // The start of a ClientHello record, never finished.
                s.write_all(&[0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00])
                    .unwrap();
            }
            s
        })
        .collect();
    let started = Instant::now();
    let mut peak = 0;
    while started.elapsed() < Duration::from_secs(2) {
        peak = peak.max(open_fds(pid));
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(
        peak <= baseline + 20 + 2,
        "peak {peak} fds, baseline {baseline}: max_connections did not hold for TLS"
    );
    let all_closed = tokio::task::spawn_blocking(move || {
        stalled.iter_mut().all(|s| {
            s.set_read_timeout(Some(Duration::from_secs(60))).unwrap();
            let mut buf = [0u8; 256];
            loop {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => return true,
                    Ok(_) => continue,
                }
            }
        })
    })
    .await
    .unwrap();
    assert!(all_closed);
    let ca_file = gw.ca_file();
    let Some((body, _, status)) = curl(&["--cacert", &ca_file, &gw.url("/x")]).await else {
        return;
    };
    assert_eq!((body.as_str(), status), ("ok", 200));
}

/// A concurrency policy on a route: valid only with a [gateway].
const IN_FLIGHT: &str = "[[policies]]\nname = \"open\"\nalgorithm = \"concurrency\"\nlimit = 1\n[[routes]]\npath = \"/\"\npolicies = [\"open\"]\n";

#[test]
fn validate_names_the_field_of_a_bad_certificate() {
    let ca = TestCa::new("validate CA");
    let dir = tempfile::tempdir().unwrap();
    let one = ca.issue(&["localhost"]);
    let two = ca.issue(&["localhost"]);
    write(dir.path(), "one.crt", &one.cert_pem);
    write(dir.path(), "two.key", &two.key_pem);
    write(dir.path(), "junk.pem", "hello\n");
    let cases = [
        (
            "tls_cert = \"missing.crt\"\ntls_key = \"two.key\"",
            4,
            "tls_cert: cannot read",
        ),
        (
            "tls_cert = \"junk.pem\"\ntls_key = \"two.key\"",
            4,
            "tls_cert: ",
        ),
        (
            "tls_cert = \"one.crt\"\ntls_key = \"junk.pem\"",
            5,
            "tls_key: ",
        ),
        (
            "tls_cert = \"one.crt\"\ntls_key = \"two.key\"",
            5,
            "does not belong to the certificate",
        ),
        ("tls_cert = \"one.crt\"", 4, "`tls_key` is missing"),
        (
            "upstream_ca = \"junk.pem\"",
            4,
            "upstream_ca is for an https:// upstream",
        ),
    ];
    for (fields, line, reason) in cases {
        let text = format!(
            "[gateway]\nlisten = \"127.0.0.1:0\"\nupstream = \"http://127.0.0.1:1\"\n{fields}\n{IN_FLIGHT}"
        );
        let path = write(dir.path(), "v.toml", &text);
        let out = std::process::Command::new(sluicegate_bin!())
            .args(["validate", "--config"])
            .arg(&path)
            .output()
            .unwrap();
        let stderr = String::from_utf8(out.stderr).unwrap();
        assert_eq!(out.status.code(), Some(1), "{fields}: {stderr}");
        let at = format!("{}:{line}:", path.display());
        assert!(
            stderr.contains(&at) && stderr.contains(reason),
            "{fields}: {stderr}"
        );
        // One mistake, one error: the invalid [gateway] is still a gateway for the routes.
        assert!(stderr.contains(": 1 error"), "{fields}: {stderr}");
    }
    let junk_ca = "[gateway]\nlisten = \"127.0.0.1:0\"\nupstream = \"https://127.0.0.1:1\"\nupstream_ca = \"junk.pem\"\n";
    let path = write(dir.path(), "v.toml", junk_ca);
    let out = std::process::Command::new(sluicegate_bin!())
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    let stderr = String::from_utf8(out.stderr).unwrap();
    assert!(
        stderr.contains("upstream_ca: ") && stderr.contains("no PEM certificate"),
        "{stderr}"
    );
}

/// `examples/gateway-tls/sluicegate.toml` is valid once its certificate exists (made here,
/// as the file's comment says to, beside a copy of it).
#[test]
fn the_tls_example_is_valid() {
    let example =
        Path::new(env!("CARGO_MANIFEST_DIR")).join("../../examples/gateway-tls/sluicegate.toml");
    let dir = tempfile::tempdir().unwrap();
    let cert = TestCa::new("example CA").issue(&["localhost", "127.0.0.1"]);
    write(dir.path(), "gateway.crt", &cert.cert_pem);
    write(dir.path(), "gateway.key", &cert.key_pem);
    let path = write(
        dir.path(),
        "sluicegate.toml",
        &std::fs::read_to_string(example).unwrap(),
    );
    let out = std::process::Command::new(sluicegate_bin!())
        .args(["validate", "--config"])
        .arg(&path)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
