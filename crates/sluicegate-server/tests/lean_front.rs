//! The API listener's lean HTTP/1.1 path (`h1`, `front.rs`) against the real binary over
//! raw sockets: every request is sent on a fresh connection, where the lean path sees it
//! first, and on one that a `GET /healthz` has already handed to hyper; the two transcripts
//! must be the same bytes (the `date` values aside). Then the connection rules: pipelining,
//! slow and silent clients, `max_connections`, graceful shutdown.

use std::io::{Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sluicegate_testkit::{
    Sluicegate as Server, closed_by_server, sluicegate_bin, wait_until, write,
};

const POLICIES: &str = r#"
[[policies]]
name = "bench"
algorithm = "token_bucket"
limit = 1000
period = "1s"

[[policies]]
name = "tiny"
algorithm = "fixed_window"
limit = 1
period = "1h"
"#;

fn start(dir: &tempfile::TempDir, server: &str) -> Server {
    let toml = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nheaders = [\"draft-6\", \"ietf\", \"legacy\"]\n{server}\n{POLICIES}"
    );
    let path = write(dir.path(), "sluicegate.toml", &toml);
    Server::start_with(
        sluicegate_bin!(),
        &["--config", path.to_str().unwrap()],
        false,
    )
}

/// The last request of a transcript: answered, then the server closes. (Closing the
/// client's side instead races hyper, which may then leave pipelined requests unanswered.)
const END: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n";

/// Everything the server sends back for `request` until it closes the connection.
fn transcript(addr: SocketAddr, request: &[u8]) -> Vec<u8> {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    // A server refusing a huge head may close before it is all sent: what it answered
    // is still read below.
    let _ = stream.write_all(request);
    if !request.ends_with(END) {
        // A request cut short: its end is the end of the stream.
        let _ = stream.shutdown(Shutdown::Write);
    }
    let mut answer = Vec::new();
    let mut buf = [0u8; 16 * 1024];
    loop {
        match stream.read(&mut buf) {
            Ok(0) | Err(_) => return answer,
            Ok(n) => answer.extend_from_slice(&buf[..n]),
        }
    }
}

/// `bytes` as text, each `date` value replaced by `<date>`, `x-ratelimit-reset` (legacy:
/// a Unix time) by `<reset>` and a reservation token (signed, with a nonce) by `<token>`.
fn normalized(bytes: &[u8]) -> String {
    let mut text = String::from_utf8_lossy(bytes).into_owned();
    let field = "\"reservation\":\"";
    if let Some(start) = text.find(field).map(|at| at + field.len())
        && let Some(len) = text[start..].find('"')
    {
        text.replace_range(start..start + len, "<token>");
    }
    let mut out = String::new();
    for line in text.split_inclusive("\r\n") {
        if line.starts_with("date: ") {
            out.push_str("date: <date>\r\n");
        } else if line.starts_with("x-ratelimit-reset: ") {
            out.push_str("x-ratelimit-reset: <reset>\r\n");
        } else {
            out.push_str(line);
        }
    }
    out
}

/// The bytes after the first response of `bytes` (one with a `content-length`).
fn after_first_response(bytes: &[u8]) -> &[u8] {
    let end = bytes
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("a response head")
        + 4;
    let head = String::from_utf8_lossy(&bytes[..end]).to_ascii_lowercase();
    let length: usize = head
        .lines()
        .find_map(|l| l.strip_prefix("content-length: "))
        .expect("content-length")
        .trim()
        .parse()
        .unwrap();
    &bytes[end + length..]
}

/// Hands the connection to hyper before the request: a request the lean path does not take.
const TO_HYPER: &[u8] = b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";

/// Sends `template` (`{K}` replaced by a key of its own, as long, so both paths start from the same
/// state) on a fresh connection and on one already hyper's; asserts the same answer and
/// returns it.
fn same_on_both_paths(addr: SocketAddr, template: &[u8]) -> String {
    same_on_both_ways(addr, &[template, END].concat(), false)
}

/// The keys used so far (two digits each).
static KEYS: AtomicUsize = AtomicUsize::new(10);

/// [`same_on_both_paths`] with `template` sent as it is, not followed by [`END`]; with
/// `shape_only`, numbers may differ (a denial's wait is counted in milliseconds of the
/// wall clock).
fn same_on_both_ways(addr: SocketAddr, template: &[u8], shape_only: bool) -> String {
    let fill = |key: &[u8]| -> Vec<u8> {
        let mut out = Vec::new();
        let mut rest = template;
        while let Some(at) = rest.windows(3).position(|w| w == b"{K}") {
            out.extend_from_slice(&rest[..at]);
            out.extend_from_slice(key);
            rest = &rest[at + 3..];
        }
        out.extend_from_slice(rest);
        out
    };
    // Fresh keys for each request (a full bucket: the same numbers), as long as `{K}`.
    let n = KEYS.fetch_add(1, Ordering::Relaxed);
    let lean = transcript(addr, &fill(format!("l{n:02}").as_bytes()));
    let forced = transcript(
        addr,
        &[TO_HYPER, &fill(format!("h{n:02}").as_bytes())].concat(),
    );
    let (lean, hyper) = (normalized(&lean), normalized(after_first_response(&forced)));
    if shape_only {
        let digits = |s: &str| s.replace(|c: char| c.is_ascii_digit(), "0");
        assert_eq!(
            digits(&lean),
            digits(&hyper),
            "{}",
            String::from_utf8_lossy(template)
        );
        return lean;
    }
    assert_eq!(
        lean,
        hyper,
        "request ({} bytes): {}",
        template.len(),
        String::from_utf8_lossy(&template[..template.len().min(300)])
    );
    lean
}

/// A `POST /v1/check` of `body` with `fields` (each ending in CRLF).
fn check(fields: &str, body: &str) -> Vec<u8> {
    format!(
        "POST /v1/check HTTP/1.1\r\nHost: x\r\n{fields}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}

const JSON: &str = "Content-Type: application/json\r\n";

#[test]
fn answers_are_hypers_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir, "");
    let addr = server.api;
    let one = r#"{"policy":"bench","key":"{K}","cost":1}"#;
    let denied = r#"{"policy":"tiny","key":"{K}-d"}"#;
    let cases: Vec<(Vec<u8>, &str)> = vec![
        (
            check(JSON, one),
            "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n",
        ),
        (check("", one), "ratelimit-policy: "),
        (
            check("Content-Type: Application/JSON; charset=utf-8\r\n", one),
            "200 OK",
        ),
        (check("Connection: keep-alive\r\n", one), "200 OK"),
        (
            check(JSON, r#"{"policy":"nope","key":"{K}"}"#),
            "404 Not Found",
        ),
        (
            check(JSON, r#"{"policy":"bench","key":"{K}""#),
            "400 Bad Request",
        ),
        (
            check(JSON, r#"{"policy":"bench","key":"{K}","cost":-1}"#),
            "400 Bad Request",
        ),
        (
            check("Content-Type: text/plain\r\n", one),
            "400 Bad Request",
        ),
        (
            check(
                JSON,
                r#"{"requests":[{"policy":"bench","key":"{K}"},{"policy":"x","key":"k"}]}"#,
            ),
            "\"results\"",
        ),
        (
            check(
                JSON,
                r#"{"policy":"bench","key":"{K}","cost":2,"reserve":true}"#,
            ),
            "\"reservation\"",
        ),
        (
            check(
                JSON,
                r#"{"policy":"bench","key":"{K}","cost":0,"reserve":true}"#,
            ),
            "400 Bad Request",
        ),
        (check(JSON, ""), "400 Bad Request"),
        (
            check(JSON, r#"{"policy":"bench","key":"k\u00e9{K}"}"#),
            "200 OK",
        ),
    ];
    for (request, expect) in cases {
        let answer = same_on_both_paths(addr, &request);
        assert!(answer.contains(expect), "{expect:?} not in {answer}");
    }
    // A denial, and an answer listing policies: their waits are the wall clock's.
    let denial = [check(JSON, denied).repeat(2), END.to_vec()].concat();
    let answer = same_on_both_ways(addr, &denial, true);
    assert!(answer.contains("\r\nretry-after: "), "{answer}");
    let list = check(JSON, r#"{"policy":["bench","tiny"],"key":"{K}-l"}"#);
    let answer = same_on_both_ways(addr, &[list, END.to_vec()].concat(), true);
    assert!(answer.contains("\"policies\""), "{answer}");
}

#[test]
fn token_errors_are_hypers_byte_for_byte() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir, "api_token = \"secret\"");
    let addr = server.api;
    let one = r#"{"policy":"bench","key":"{K}"}"#;
    for (fields, expect) in [
        ("", "401 Unauthorized"),
        ("Authorization: Bearer wrong\r\n", "403 Forbidden"),
        ("Authorization: Basic c2VjcmV0\r\n", "401 Unauthorized"),
        ("Authorization: Bearer secret\r\n", "200 OK"),
        ("authorization: bearer  secret \r\n", "200 OK"),
        (
            "Authorization: Bearer secret\r\nAuthorization: Bearer wrong\r\n",
            "200 OK",
        ),
        (
            "Authorization: Bearer wrong\r\nAuthorization: Bearer secret\r\n",
            "403 Forbidden",
        ),
        ("Authorization: Bearer s\u{e9}cret\r\n", "401 Unauthorized"),
    ] {
        let answer = same_on_both_paths(addr, &check(fields, one));
        assert!(
            answer.contains(expect),
            "{fields:?}: {expect:?} not in {answer}"
        );
    }
}

/// Requests that are not plain go to hyper whole: framing is never judged twice.
#[test]
fn odd_and_hostile_requests_get_hypers_answer() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir, "");
    let addr = server.api;
    let body = r#"{"policy":"bench","key":"{K}"}"#;
    let next = "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n";
    let smuggled = format!("0\r\n\r\n{}", String::from_utf8(check("", body)).unwrap());
    let cases: Vec<Vec<u8>> = vec![
        // CL + TE, TE alone, two lengths (equal, different), a signed or listed length.
        format!("POST /v1/check HTTP/1.1\r\nContent-Length: {}\r\nTransfer-Encoding: chunked\r\n\r\n{smuggled}", smuggled.len()).into_bytes(),
        format!("POST /v1/check HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n{smuggled}").into_bytes(),
        check("Content-Length: 30\r\n", body),
        check("Content-Length: 3\r\n", body),
        format!("POST /v1/check HTTP/1.1\r\nContent-Length: +30\r\n\r\n{body}").into_bytes(),
        format!("POST /v1/check HTTP/1.1\r\nContent-Length: 30, 30\r\n\r\n{body}").into_bytes(),
        format!("POST /v1/check HTTP/1.1\r\nContent-Length: 0{}\r\n\r\n{body}", body.len()).into_bytes(),
        // obs-fold, a space before the colon, bare LF line ends, a NUL in a value.
        check("X-A: 1\r\n folded\r\n", body),
        check("X-A : 1\r\n", body),
        format!("POST /v1/check HTTP/1.1\nContent-Length: {}\n\n{body}", body.len()).into_bytes(),
        check("X-A: a\0b\r\n", body),
        // A body longer than its Content-Length: the rest is the next request.
        [check(JSON, body), next.as_bytes().to_vec()].concat(),
        [check(JSON, body), b"GARBAGE\r\n\r\n".to_vec()].concat(),
        // Another version, method, path or form; Expect; Upgrade; Connection: close.
        format!("POST /v1/check HTTP/1.0\r\nContent-Length: {}\r\n\r\n{body}", body.len()).into_bytes(),
        format!("post /v1/check HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}", body.len()).into_bytes(),
        format!("GET /v1/check HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}", body.len()).into_bytes(),
        format!("POST /v1/check?x=1 HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}", body.len()).into_bytes(),
        format!("POST /v1/check/ HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}", body.len()).into_bytes(),
        format!("POST http://x/v1/check HTTP/1.1\r\nContent-Length: {}\r\n\r\n{body}", body.len()).into_bytes(),
        check("Expect: 100-continue\r\n", body),
        check("Upgrade: h2c\r\nConnection: Upgrade\r\n", body),
        check("Connection: close\r\n", body),
        // A body over 64 KiB (413), a head over the lean bound, one over hyper's.
        check(JSON, &format!("{{\"policy\":\"bench\",\"key\":\"{}\"}}", "k".repeat(70_000))),
        check(&format!("X-Big: {}\r\n", "a".repeat(20_000)), body),
        check(&"X-Many: 1\r\n".repeat(150), body),
    ];
    for request in cases {
        same_on_both_paths(addr, &request);
    }
    // A head over hyper's bound (~400 KiB) is refused 431, or answered when one of hyper's
    // reads happens to complete it first (hyper does both on its own path, measured: 1 in
    // 40); never judged on the lean path.
    let huge = [
        check(&format!("X-Big: {}\r\n", "a".repeat(500_000)), body),
        END.to_vec(),
    ]
    .concat();
    let answer = normalized(&transcript(addr, &huge));
    // A status line follows the previous response's body on the same line (no newline
    // ends a JSON body), so split on the status lines' start, not on lines.
    let statuses: Vec<String> = answer
        .split("HTTP/1.1 ")
        .skip(1)
        .map(|rest| format!("HTTP/1.1 {}", rest.lines().next().unwrap_or_default()))
        .collect();
    assert!(
        statuses == ["HTTP/1.1 431 Request Header Fields Too Large"]
            || statuses == ["HTTP/1.1 200 OK", "HTTP/1.1 200 OK"],
        "{answer}"
    );
    // A head cut short, a body cut short, then the end of the stream.
    same_on_both_ways(addr, b"POST /v1/check HTTP/1.1\r\nContent-Le", false);
    same_on_both_ways(addr, &check(JSON, body)[..80], false);
    // Not HTTP/1 at all: a TLS hello is hyper's 400 on both; an HTTP/2 preface is served
    // as HTTP/2 (the server's SETTINGS frame first).
    let hello = b"\x16\x03\x01\x00\xa5\x01\x00\x00\xa1\x03\x03";
    assert!(same_on_both_ways(addr, hello, false).starts_with("HTTP/1.1 400"));
    let preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n\x00\x00\x00\x04\x00\x00\x00\x00\x00";
    let answer = transcript(addr, preface);
    assert!(answer.len() >= 9 && answer[3] == 4, "{answer:?}");
}

/// The responses in `bytes`, each head with its body, in order (each has a length).
fn responses(mut bytes: &[u8]) -> Vec<String> {
    let mut all = Vec::new();
    while !bytes.is_empty() {
        let rest = after_first_response(bytes);
        all.push(String::from_utf8_lossy(&bytes[..bytes.len() - rest.len()]).into_owned());
        bytes = rest;
    }
    all
}

/// Pipelined requests are answered in order, the lean path's and hyper's alike, on one
/// connection that goes from one to the other.
#[test]
fn pipelined_requests_are_answered_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir, "");
    let mut request = Vec::new();
    for i in 0..3 {
        request.extend(check(JSON, &format!(r#"{{"policy":"tiny","key":"p{i}"}}"#)));
    }
    request.extend(check(JSON, r#"{"policy":"tiny","key":"p0"}"#));
    request.extend_from_slice(TO_HYPER);
    request.extend(check(JSON, r#"{"policy":"tiny","key":"p1"}"#));
    request.extend_from_slice(END);
    let answers = responses(&transcript(server.api, &request));
    assert_eq!(answers.len(), 7, "{answers:?}");
    for (i, allowed) in [true, true, true, false].into_iter().enumerate() {
        assert!(
            answers[i].starts_with("HTTP/1.1 200 OK\r\n"),
            "{}",
            answers[i]
        );
        assert!(
            answers[i].contains(&format!("\"allowed\":{allowed}")),
            "{i}: {}",
            answers[i]
        );
    }
    assert!(answers[4].contains("\"status\""), "{}", answers[4]);
    assert!(answers[5].contains("\"allowed\":false"), "{}", answers[5]);
}

/// A head of `POST /v1/check` that never ends is cut at `header_read_timeout`, and so is a
/// second one started on a kept-alive connection after a lean answer.
#[test]
fn slow_heads_on_the_lean_path_are_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(&dir, "header_read_timeout = \"1s\"\nidle_timeout = \"60s\"");
    let mut slow = TcpStream::connect(server.api).unwrap();
    slow.write_all(b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Len")
        .unwrap();
    assert!(
        closed_by_server(&mut slow, Duration::from_secs(30)),
        "slow head kept open"
    );

    let mut kept = TcpStream::connect(server.api).unwrap();
    kept.write_all(&check(JSON, r#"{"policy":"bench","key":"s"}"#))
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = kept.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200 OK"));
    kept.write_all(b"POST /v1/check HTTP/1.1\r\n").unwrap();
    assert!(
        closed_by_server(&mut kept, Duration::from_secs(30)),
        "second slow head kept open"
    );
}

/// A client that sends requests and never reads the answers holds its connection (and
/// its `max_connections` slot) only until `idle_timeout`: with one slot, the next client
/// is served once it is cut.
#[test]
fn a_client_that_never_reads_is_cut_off() {
    let dir = tempfile::tempdir().unwrap();
    let server = start(
        &dir,
        "max_connections = 1\nheader_read_timeout = \"1s\"\nidle_timeout = \"1s\"",
    );
    let deaf = TcpStream::connect(server.api).unwrap();
    let request = check(JSON, r#"{"policy":"bench","key":"deaf"}"#);
    // Far more answers than the socket buffers hold; the server blocks writing them.
    let flood = request.repeat(100_000);
    let writer = std::thread::spawn({
        let mut deaf = deaf.try_clone().unwrap();
        move || {
            let _ = deaf.write_all(&flood);
        }
    });
    // Waits in the backlog while the deaf client holds the only slot.
    let mut next = TcpStream::connect(server.api).unwrap();
    next.set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    next.write_all(&check(JSON, r#"{"policy":"bench","key":"next"}"#))
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = next.read(&mut buf).expect("the next client is served");
    assert!(
        buf[..n].starts_with(b"HTTP/1.1 200 OK"),
        "{}",
        String::from_utf8_lossy(&buf[..n])
    );
    let _ = deaf.shutdown(Shutdown::Both);
    writer.join().unwrap();
}

/// SIGTERM closes a kept-alive connection idle on the lean path at once: the drain does
/// not wait for it (it would wait `DRAIN_TIMEOUT` and log that it timed out).
#[test]
fn graceful_shutdown_closes_idle_lean_connections() {
    let dir = tempfile::tempdir().unwrap();
    let mut server = start(&dir, "idle_timeout = \"300s\"");
    let mut kept = TcpStream::connect(server.api).unwrap();
    kept.write_all(&check(JSON, r#"{"policy":"bench","key":"g"}"#))
        .unwrap();
    let mut buf = [0u8; 4096];
    let n = kept.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 200 OK"));
    server.signal("TERM");
    assert!(
        closed_by_server(&mut kept, Duration::from_secs(60)),
        "kept open"
    );
    let status = server.child.wait().unwrap();
    assert!(status.success(), "exit status {status}");
    // Its last words, once its stderr is read to the end.
    wait_until("the server logs that it stopped", || {
        server.log().contains("stopped")
    });
    let log = server.log();
    assert!(!log.contains("drain timed out"), "{log}");
}
