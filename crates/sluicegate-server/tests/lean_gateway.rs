//! The gateway's lean HTTP/1.1 path (`src/gateway/lean.rs` on `src/h1/`) against the real
//! binary and a hand-written upstream on raw TCP: every request is sent on a fresh
//! connection, where the lean path sees it first, and on one that an `OPTIONS` has already
//! handed to hyper; the two transcripts must be the same bytes (`date` and the legacy reset
//! aside; chunk boundaries, which follow the upstream's reads, compared as the body they
//! carry). The upstream echoes the head it got, so the head sent upstream is compared too.
//! Then the rules that are not a transcript: a client that never reads a large body, a
//! slow body streamed as it comes.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::thread;
use std::time::Duration;

use sluicegate_testkit::{Sluicegate as Server, closed_by_server, sluicegate_bin, write};

/// The upstream's answer to a request for `path` (by its last segment): bytes to write,
/// with pauses between the parts, and whether to close the connection after them.
fn answer(method: &str, path: &str, head: &[u8]) -> (Vec<Vec<u8>>, Duration, bool) {
    let name = path.split('?').next().unwrap_or_default();
    let name = name.rsplit('/').next().unwrap_or_default();
    let one = |bytes: &[u8]| (vec![bytes.to_vec()], Duration::ZERO, false);
    let parts = match name {
        "echo" => {
            let mut all = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", head.len())
                .into_bytes();
            all.extend_from_slice(head);
            return (vec![all], Duration::ZERO, false);
        }
        "length" => one(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-up: 1\r\n\r\nhello"),
        "cl-zero" => one(b"HTTP/1.1 200 OK\r\nx-a: 1\r\ncontent-length: 0\r\nx-b: 2\r\n\r\n"),
        "equal-lengths" => one(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-a: 1\r\ncontent-length: 2\r\n\r\nok"),
        "dated" => one(b"HTTP/1.1 201 Created\r\ndate: Tue, 01 Dec 2026 00:00:00 GMT\r\ncontent-length: 2\r\n\r\nok"),
        "cookies" => one(b"HTTP/1.1 200 OK\r\nset-cookie: a=1\r\nx-a: 1\r\nSet-Cookie: b=2\r\ncontent-length: 2\r\n\r\nok"),
        "clash" => one(b"HTTP/1.1 200 OK\r\nratelimit-limit: 999\r\nx-a: 1\r\nretry-after: 5\r\ncontent-length: 2\r\n\r\nok"),
        "hop" => one(b"HTTP/1.1 200 OK\r\nconnection: x-secret\r\nx-secret: 1\r\nkeep-alive: timeout=5\r\nx-kept: 1\r\nproxy-authenticate: x\r\ncontent-length: 2\r\n\r\nok"),
        "real-cost" => one(b"HTTP/1.1 200 OK\r\nx-real-cost: 3\r\nx-a: 1\r\ncontent-length: 2\r\n\r\nok"),
        "reason" => one(b"HTTP/1.1 299 Custom Reason\r\ncontent-length: 2\r\n\r\nok"),
        "chunked" => one(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\ntrailer: x-sum\r\n\r\n5\r\nhello\r\n6;ext=1\r\n world\r\n0\r\nx-sum: 11\r\n\r\n"),
        "no-content" => one(b"HTTP/1.1 204 No Content\r\nx-up: 1\r\n\r\n"),
        "not-modified" => one(b"HTTP/1.1 304 Not Modified\r\netag: \"a\"\r\ncontent-length: 9\r\n\r\n"),
        "continue" => one(b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"),
        "until-close" => return (vec![b"HTTP/1.1 200 OK\r\nx-a: 1\r\n\r\nuntil the end".to_vec()], Duration::ZERO, true),
        "says-close" => one(b"HTTP/1.1 200 OK\r\nconnection: close\r\ncontent-length: 3\r\n\r\nbye"),
        "both" => one(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ntransfer-encoding: chunked\r\n\r\n0\r\n\r\n"),
        "two-lengths" => one(b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\ncontent-length: 6\r\n\r\nhello!"),
        "garbage" => one(b"HTTP/1.1 abc\r\n\r\n"),
        "switch" => one(b"HTTP/1.1 101 Switching Protocols\r\nupgrade: x\r\n\r\n"),
        "cut-length" => return (vec![b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\nonly ten!!".to_vec()], Duration::ZERO, true),
        "cut-chunked" => return (vec![b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n64\r\nonly ten!!".to_vec()], Duration::ZERO, true),
        "big-head" => one(format!("HTTP/1.1 200 OK\r\nx-big: {}\r\ncontent-length: 0\r\n\r\n", "x".repeat(70 * 1024)).as_bytes()),
        "large" => {
            let body = pattern(LARGE);
            let mut all = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len()).into_bytes();
            all.extend_from_slice(&body);
            one(&all)
        }
        "slow" => {
            let mut parts = vec![b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n".to_vec()];
            parts.extend((0..4).map(|i| format!("4\r\npart\r\n1\r\n{i}\r\n").into_bytes()));
            parts.push(b"0\r\n\r\n".to_vec());
            (parts, Duration::from_millis(150), false)
        }
        "slow-length" => {
            let mut parts = vec![b"HTTP/1.1 200 OK\r\ncontent-length: 12\r\n\r\n".to_vec()];
            parts.extend((0..3).map(|_| b"slow".to_vec()));
            (parts, Duration::from_millis(150), false)
        }
        "slow-head" => (vec![Vec::new(), b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".to_vec()], Duration::from_secs(3), false),
        "late-length" => (vec![Vec::new(), b"HTTP/1.1 200 OK\r\ncontent-length: 5\r\nx-up: 1\r\n\r\nhello".to_vec()], Duration::from_millis(500), false),
        _ => one(b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\n\r\n"),
    };
    let (mut parts, pause, close) = parts;
    if method == "HEAD" || method == "OPTIONS" {
        // Those the tests send only to hand a connection to hyper: a short answer.
        parts = vec![b"HTTP/1.1 200 OK\r\ncontent-length: 0\r\n\r\n".to_vec()];
    }
    (parts, pause, close)
}

const LARGE: usize = 1 << 20;

fn pattern(len: usize) -> Vec<u8> {
    (0..len).map(|i| b'a' + (i % 26) as u8).collect()
}

/// A raw upstream on its own threads, one a connection.
fn upstream() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    thread::spawn(move || {
        for socket in listener.incoming().flatten() {
            thread::spawn(move || serve(socket));
        }
    });
    addr
}

fn serve(mut socket: TcpStream) {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") else {
            match socket.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
            continue;
        };
        let head: Vec<u8> = buf.drain(..end + 4).collect();
        let text = String::from_utf8_lossy(&head).to_ascii_lowercase();
        let mut words = text.split(' ');
        let (method, path) = (
            words.next().unwrap_or_default().to_ascii_uppercase(),
            words.next().unwrap_or_default().to_owned(),
        );
        // A body hyper's path forwards (the tests' GETs with a length): skipped.
        let length: usize = text
            .lines()
            .find_map(|l| l.strip_prefix("content-length:"))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or(0);
        while buf.len() < length {
            match socket.read(&mut chunk) {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        buf.drain(..length);
        let (parts, pause, close) = answer(&method, &path, &head);
        for (i, part) in parts.iter().enumerate() {
            if i > 0 {
                thread::sleep(pause);
            }
            if socket.write_all(part).is_err() {
                return;
            }
        }
        if close {
            return;
        }
    }
}

fn start(dir: &tempfile::TempDir, upstream: SocketAddr, server: &str) -> Server {
    let toml = format!(
        r#"
[server]
headers = ["draft-6", "ietf", "legacy"]
{server}

[[policies]]
name = "open"
algorithm = "token_bucket"
limit = 1000
period = "1s"

[[policies]]
name = "limited"
algorithm = "fixed_window"
limit = 2
period = "1h"

[[policies]]
name = "metered"
algorithm = "token_bucket"
limit = 100
period = "1h"

[[routes]]
path = "/r"
policies = ["open"]
key = "header:x-key"

[[routes]]
path = "/limited"
methods = ["GET"]
policies = ["limited"]
key = "header:x-key"

[[routes]]
path = "/metered"
policies = ["metered"]
key = "header:x-key"
cost = 10
settle = "header:x-real-cost"

[[routes]]
path = "/pooled"
policies = ["open"]
key = "header:x-key"
pool = "backend"

[[pools]]
name = "backend"
concurrency = 2
queue = 10
max_wait = "10s"

[gateway]
listen = "127.0.0.1:0"
upstream = "http://{upstream}/"
upstream_timeout = "1s"
"#
    );
    let path = write(dir.path(), "g.toml", &toml);
    Server::start(sluicegate_bin!(), &["--config", path.to_str().unwrap()])
}

/// The last request of a transcript: hyper's (it says close), then the server closes.
const END: &[u8] = b"GET /end HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

/// Hands the connection to hyper: a method the lean path does not take.
const TO_HYPER: &[u8] = b"OPTIONS /to-hyper HTTP/1.1\r\nHost: x\r\n\r\n";

/// Everything the server sends back for `request` until it closes the connection.
fn transcript(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    transcript_with(addr, request, true)
}

/// [`transcript`]; `half_close`: a request not ending in [`END`] is followed by the end of
/// the client's stream, else the server is left to close.
fn transcript_with(addr: SocketAddr, request: &[u8], half_close: bool) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let _ = stream.write_all(request);
    if half_close && !request.ends_with(END) {
        let _ = stream.shutdown(Shutdown::Write);
    }
    let mut answer = Vec::new();
    let mut buf = [0u8; 64 * 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return answer,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
    }
}

/// The end of the head at the start of `bytes`.
fn head_end(bytes: &[u8]) -> Option<usize> {
    bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map(|at| at + 4)
}

/// The responses of `bytes` as text: `date` values and the legacy reset (wall clock)
/// replaced, a chunked body's chunks joined into one (their boundaries follow the
/// upstream's reads), whatever cannot be parsed (a broken body) left as it is.
fn normalized(mut bytes: &[u8]) -> String {
    let mut out = String::new();
    while let Some(end) = head_end(bytes) {
        let head = String::from_utf8_lossy(&bytes[..end]).into_owned();
        for line in head.split_inclusive("\r\n") {
            if line.starts_with("date: ") && !line.contains("2026 00:00:00") {
                out.push_str("date: <date>\r\n");
            } else if line.starts_with("x-ratelimit-reset: ") {
                out.push_str("x-ratelimit-reset: <reset>\r\n");
            } else {
                out.push_str(line);
            }
        }
        bytes = &bytes[end..];
        let lower = head.to_ascii_lowercase();
        let length = lower
            .lines()
            .find_map(|l| l.strip_prefix("content-length: "))
            .and_then(|v| v.trim().parse::<usize>().ok());
        if lower.contains("\r\ntransfer-encoding: chunked\r\n") {
            let Some((body, rest)) = dechunk(bytes) else {
                break;
            };
            out.push_str(&format!(
                "<chunked {}>{}",
                body.len(),
                String::from_utf8_lossy(&body)
            ));
            bytes = rest;
        } else if let Some(length) = length.filter(|&n| n <= bytes.len()) {
            out.push_str(&String::from_utf8_lossy(&bytes[..length]));
            bytes = &bytes[length..];
        } else if length.is_some() {
            break;
        }
    }
    out.push_str(&String::from_utf8_lossy(bytes));
    out
}

/// A chunked body's data and what follows it; `None` if it is cut short.
fn dechunk(mut bytes: &[u8]) -> Option<(Vec<u8>, &[u8])> {
    let mut body = Vec::new();
    loop {
        let line = bytes.windows(2).position(|w| w == b"\r\n")?;
        let size = usize::from_str_radix(std::str::from_utf8(&bytes[..line]).ok()?, 16).ok()?;
        bytes = &bytes[line + 2..];
        if size == 0 {
            return bytes.strip_prefix(b"\r\n").map(|rest| (body, rest));
        }
        body.extend_from_slice(bytes.get(..size)?);
        bytes = bytes.get(size + 2..)?;
    }
}

static KEYS: AtomicUsize = AtomicUsize::new(10);

/// Sends `template` (`{K}` replaced by a fresh key of the same length) then [`END`], on a
/// fresh connection and after [`TO_HYPER`]; asserts the same transcript and returns it.
fn same_on_both_paths(addr: SocketAddr, template: &[u8]) -> String {
    same_on_both_ways(addr, template, false, true)
}

/// [`same_on_both_paths`]; with `shape_only`, numbers may differ (a denial's wait is the
/// wall clock's).
fn same_on_both_ways(addr: SocketAddr, template: &[u8], shape_only: bool, end: bool) -> String {
    same_on_both(addr, template, shape_only, (end, true))
}

/// [`same_on_both_ways`]; `(end, half_close)`: whether [`END`] follows, whether the client
/// ends its stream after its request ([`transcript_with`]).
fn same_on_both(
    addr: SocketAddr,
    template: &[u8],
    shape_only: bool,
    framing: (bool, bool),
) -> String {
    let (lean, hyper) = both(addr, template, framing);
    if shape_only {
        let digits = |s: &str| s.replace(|c: char| c.is_ascii_digit(), "0");
        assert_eq!(digits(&lean), digits(&hyper));
        return lean;
    }
    assert_eq!(
        lean,
        hyper,
        "request: {}",
        String::from_utf8_lossy(&template[..template.len().min(300)])
    );
    lean
}

/// The normalized transcripts of `template` on the lean path and on hyper's, `{K}` put back
/// for the keys.
fn both(addr: SocketAddr, template: &[u8], (end, half_close): (bool, bool)) -> (String, String) {
    let n = KEYS.fetch_add(1, Ordering::Relaxed);
    let fill = |key: &str| -> Vec<u8> {
        let text = [template, if end { END } else { b"" }].concat();
        let mut out = Vec::new();
        let mut rest = &text[..];
        while let Some(at) = rest.windows(3).position(|w| w == b"{K}") {
            out.extend_from_slice(&rest[..at]);
            out.extend_from_slice(key.as_bytes());
            rest = &rest[at + 3..];
        }
        out.extend_from_slice(rest);
        out
    };
    let (lean_key, hyper_key) = (format!("l{n:02}"), format!("h{n:02}"));
    let lean = transcript_with(addr, &fill(&lean_key), half_close);
    let lean = normalized(&lean).replace(&lean_key, "{K}");
    let forced = transcript_with(addr, &[TO_HYPER, &fill(&hyper_key)].concat(), half_close);
    let first = head_end(&forced).expect("hyper's answer to OPTIONS");
    let hyper = normalized(&forced[first..]).replace(&hyper_key, "{K}");
    (lean, hyper)
}

fn get(path: &str, fields: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: x\r\nX-Key: {{K}}\r\n{fields}\r\n").into_bytes()
}

#[test]
fn proxied_answers_are_hypers_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir, upstream(), "");
    let addr = server.gateway.unwrap();
    for (path, expect) in [
        ("/r/echo", "x-forwarded-for: 127.0.0.1\r\n"),
        ("/echo?q=a%20b&x=1", "GET /echo?q=a%20b&x=1 HTTP/1.1"),
        ("/r/length", "ratelimit-remaining: "),
        ("/r/cl-zero", "x-b: 2\r\n"),
        ("/r/equal-lengths", "\r\n\r\nok"),
        ("/r/dated", "201 Created"),
        ("/r/cookies", "set-cookie: b=2"),
        ("/r/clash", "ratelimit-limit: 1000"),
        ("/r/hop", "x-kept: 1"),
        ("/metered/real-cost", "x-a: 1"),
        ("/r/reason", "299 <none>"),
        ("/r/chunked", "<chunked 11>hello world"),
        ("/r/no-content", "204 No Content"),
        ("/r/not-modified", "304 Not Modified"),
        ("/r/continue", "\r\n\r\nok"),
        ("/r/until-close", "<chunked 13>until the end"),
        ("/r/says-close", "bye"),
        ("/r/both", "502 Bad Gateway"),
        ("/r/two-lengths", "502 Bad Gateway"),
        ("/r/garbage", "502 Bad Gateway"),
        ("/r/switch", "502 Bad Gateway"),
        ("/r/big-head", "502 Bad Gateway"),
        ("/r/slow", "<chunked 20>part0part1part2part3"),
        ("/r/slow-length", "slowslowslow"),
        ("/r/slow-head", "504 Gateway Timeout"),
        ("/pooled/length", "hello"),
        ("/r/large", "content-length: 1048576"),
    ] {
        let answer = same_on_both_paths(addr, &get(path, ""));
        assert!(
            answer.contains(expect),
            "{path}: {expect:?} not in {answer}"
        );
    }
    // Hop-by-hop fields of the client's, `X-Forwarded-*` it sent, several lines of a name.
    let fields = "Connection: keep-alive\r\nKeep-Alive: 5\r\nProxy-Authorization: x\r\nX-Forwarded-For: 203.0.113.9\r\nX-Forwarded-Proto: https\r\nX-Forwarded-Host: evil\r\nAccept: a\r\naccept: b\r\nTrailer: t\r\n";
    let answer = same_on_both_paths(addr, &get("/r/echo", fields));
    assert!(
        answer.contains("x-forwarded-for: 203.0.113.9, 127.0.0.1\r\n"),
        "{answer}"
    );
    assert!(!answer.contains("proxy-authorization"), "{answer}");
    // Denied: the third request of a key on a route with limit 2.
    let three = get("/limited/echo", "").repeat(3);
    let answer = same_on_both_ways(addr, &three, true, true);
    assert!(answer.contains("429 Too Many Requests"), "{answer}");
}

/// The decision reads the field lines on the lean path (no `HeaderMap`): the key is the
/// first `X-Key` line whatever the case of the others, as on hyper's path. Each case runs
/// twice: a path that took another line would spend the shared `second` bucket, and the
/// second run's answers would differ from hyper's. (The two entries are compared over
/// hostile heads in `sluicegate-middleware`'s `tests/field_lines.rs`.)
#[test]
fn the_key_is_read_from_the_field_lines_as_from_the_map() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir, upstream(), "");
    let addr = server.gateway.unwrap();
    for fields in ["x-key: second\r\n", "X-KEY: second\r\nx-kEy: third\r\n"] {
        for _ in 0..2 {
            let three = get("/limited/echo", fields).repeat(3);
            let answer = same_on_both_ways(addr, &three, true, true);
            assert!(answer.contains("429 Too Many Requests"), "{answer}");
        }
    }
}

/// A broken upstream body breaks the client's the same way on both paths (no complete
/// response, no hang).
#[test]
fn a_body_cut_short_is_cut_short_on_both_paths() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir, upstream(), "");
    let addr = server.gateway.unwrap();
    // Whether the head goes out before the body breaks is a race on both paths (hyper
    // writes nothing when the break is read before its first write): either nothing, or
    // the head and the ten bytes, never a complete response.
    for path in ["/r/cut-length", "/r/cut-chunked"] {
        let (lean, hyper) = both(addr, &get(path, ""), (false, false));
        for answer in [lean, hyper] {
            let broken = answer.ends_with("only ten!!") || answer.ends_with("only ten!!\r\n");
            assert!(answer.is_empty() || broken, "{path}: {answer}");
        }
    }
    // A client that half-closes after its request gets no answer on either path (hyper
    // ends the request at its client's end of stream, and the lean path does too). The
    // upstream answers half a second late, so that the end of stream has reached the
    // gateway while the request waits: with an immediate answer, a client thread
    // descheduled between its write and its shutdown got the response on either path (a
    // race, seen once in a clean-clone CI run).
    let answer = same_on_both_ways(addr, &get("/r/late-length", ""), false, false);
    assert_eq!(answer, "");
}

/// Requests that are not plain, or not the lean gateway's, get hyper's answer on both.
#[test]
fn odd_and_hostile_requests_get_hypers_answer() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir, upstream(), "");
    let addr = server.gateway.unwrap();
    let cases: Vec<Vec<u8>> = vec![
        // Smuggling: CL + TE, TE alone, two lengths, a GET with a body.
        b"GET /r/echo HTTP/1.1\r\nHost: x\r\nX-Key: {K}\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(),
        b"GET /r/echo HTTP/1.1\r\nHost: x\r\nX-Key: {K}\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n".to_vec(),
        b"GET /r/echo HTTP/1.1\r\nHost: x\r\nX-Key: {K}\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok".to_vec(),
        b"GET /r/echo HTTP/1.1\r\nHost: x\r\nX-Key: {K}\r\nContent-Length: 2\r\n\r\nok".to_vec(),
        b"GET /r/echo HTTP/1.1\r\nHost: x\r\nX-Key: {K}\r\nContent-Length: 0\r\n\r\n".to_vec(),
        // obs-fold, a space before the colon, bare LF, a NUL, a DEL.
        get("/r/echo", "X-A: 1\r\n folded\r\n"),
        get("/r/echo", "X-A : 1\r\n"),
        b"GET /r/echo HTTP/1.1\nHost: x\nX-Key: {K}\n\n".to_vec(),
        get("/r/echo", "X-A: a\0b\r\n"),
        get("/r/echo", "X-A: a\x7fb\r\n"),
        // Two Hosts, none, TE, Upgrade, Expect, Connection: close.
        get("/r/echo", "Host: y\r\n"),
        b"GET /r/echo HTTP/1.1\r\nX-Key: {K}\r\n\r\n".to_vec(),
        get("/r/echo", "TE: trailers\r\n"),
        get("/r/echo", "Upgrade: websocket\r\nConnection: Upgrade\r\n"),
        get("/r/echo", "Expect: 100-continue\r\n"),
        get("/r/echo", "Connection: close\r\n"),
        get("/r/echo", "Connection: keep-alive, x-a\r\nX-A: 1\r\n"),
        // Other versions, methods and target forms.
        b"GET /r/echo HTTP/1.0\r\nHost: x\r\nX-Key: {K}\r\n\r\n".to_vec(),
        b"HEAD /r/length HTTP/1.1\r\nHost: x\r\nX-Key: {K}\r\n\r\n".to_vec(),
        b"DELETE /r/echo HTTP/1.1\r\nHost: x\r\nX-Key: {K}\r\n\r\n".to_vec(),
        b"get /r/echo HTTP/1.1\r\nHost: x\r\nX-Key: {K}\r\n\r\n".to_vec(),
        b"GET http://x/r/echo HTTP/1.1\r\nHost: x\r\nX-Key: {K}\r\n\r\n".to_vec(),
        b"GET /r/echo#frag HTTP/1.1\r\nHost: x\r\nX-Key: {K}\r\n\r\n".to_vec(),
        b"GET /r/e{c}ho HTTP/1.1\r\nHost: x\r\nX-Key: {K}\r\n\r\n".to_vec(),
        b"GET /r/%zz/../echo HTTP/1.1\r\nHost: x\r\nX-Key: {K}\r\n\r\n".to_vec(),
        b"GET * HTTP/1.1\r\nHost: x\r\nX-Key: {K}\r\n\r\n".to_vec(),
        // Heads over the lean bound and over hyper's field count.
        get("/r/echo", &format!("X-Big: {}\r\n", "a".repeat(20_000))),
        get("/r/echo", &"X-Many: 1\r\n".repeat(150)),
        get("/r/echo", &"X-Some: 1\r\n".repeat(40)),
    ];
    for request in cases {
        same_on_both_paths(addr, &request);
    }
}

/// A client that asks for large bodies and never reads holds its connection (and its
/// `max_connections` slot) only until `idle_timeout`, and the server does not buffer the
/// bodies for it: its memory stays within a few MiB of what it was.
#[test]
fn a_client_that_never_reads_a_large_body_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let limits = "max_connections = 1\nheader_read_timeout = \"2s\"\nidle_timeout = \"2s\"";
    let server = start(&dir, upstream(), limits);
    let addr = server.gateway.unwrap();
    let rss = || -> u64 {
        let status =
            std::fs::read_to_string(format!("/proc/{}/status", server.child.id())).unwrap();
        status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap()
    };
    // Warm: one large body read whole.
    let warm = transcript(
        addr,
        &[get("/r/large", "").as_slice(), END].concat().replace_key(),
    );
    assert!(warm.len() > LARGE, "{}", warm.len());
    let before = rss();
    let mut deaf = TcpStream::connect(addr).unwrap();
    deaf.write_all(&get("/r/large", "").replace_key().repeat(64))
        .unwrap();
    // Waits in the backlog while the deaf client holds the only slot.
    let mut next = TcpStream::connect(addr).unwrap();
    next.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    next.write_all(&get("/r/length", "").replace_key()).unwrap();
    let mut buf = [0u8; 4096];
    let n = next.read(&mut buf).expect("the next client is served");
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200 OK"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    let grown = rss().saturating_sub(before);
    assert!(
        grown < 16 * 1024,
        "the server grew by {grown} kB for a client that never read"
    );
    assert!(
        closed_by_server(&mut deaf, Duration::from_secs(10)),
        "the deaf client kept its connection"
    );
}

/// A slow upstream body reaches the client as it comes, before its end.
#[test]
fn a_slow_body_is_streamed_as_it_comes() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir, upstream(), "");
    let mut stream = TcpStream::connect(server.gateway.unwrap()).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    stream.write_all(&get("/r/slow", "").replace_key()).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    // The head and the first part come while the upstream still sleeps on the rest.
    while !String::from_utf8_lossy(&got).contains("part") {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "closed: {}", String::from_utf8_lossy(&got));
        got.extend_from_slice(&buf[..n]);
    }
    assert!(
        !got.ends_with(b"0\r\n\r\n"),
        "{}",
        String::from_utf8_lossy(&got)
    );
    while !got.ends_with(b"0\r\n\r\n") {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0);
        got.extend_from_slice(&buf[..n]);
    }
    assert!(
        normalized(&got).contains("<chunked 20>part0part1part2part3"),
        "{}",
        normalized(&got)
    );
}

trait ReplaceKey {
    fn replace_key(&self) -> Vec<u8>;
}

impl ReplaceKey for Vec<u8> {
    /// `{K}` replaced by a key of its own.
    fn replace_key(&self) -> Vec<u8> {
        let key = format!("s{:02}", KEYS.fetch_add(1, Ordering::Relaxed));
        String::from_utf8_lossy(self)
            .replace("{K}", &key)
            .into_bytes()
    }
}
