//! The checks behind each fuzz target, as plain functions of the input bytes.
//!
//! `fuzz_targets/*.rs` hand libFuzzer's input to these functions, and the workspace's
//! corpus replay (`crates/sluicegate-server/tests/fuzz_corpus.rs`, which includes this file)
//! feeds every file of `fuzz/corpus/<target>/` through the same functions on stable Rust,
//! so CI checks the corpus without nightly. Each function panics only when the code under
//! test panics or breaks one of the properties stated in its documentation.

#![deny(missing_docs)]

use std::net::IpAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderValue, Method};
use sluicegate_core::{AlgorithmKind, CheckRequest, Policy};
use sluicegate_envoy::compile::{Compiler, Options};
use sluicegate_middleware::path::normalize_path;
use sluicegate_middleware::{ClientIdentity, ClientIpHeader, RouteSpec, RouteTable};
use sluicegate_server::api::check::{CheckInput, parse_body, parse_entry};
use sluicegate_server::api::plain_body;
use sluicegate_server::api::types::CheckBody;
use sluicegate_server::h1;
use sluicegate_server::lane::{self, Chunked, Decoded, Framing, ResponseHead};

/// A target's check: the input bytes in, a panic on a finding.
pub type Check = fn(&[u8]);

/// The targets, by name: what `scripts/fuzz.sh` runs and the corpus folders' names.
pub const TARGETS: [(&str, Check); 8] = [
    ("config_toml", config_toml),
    ("envoy_yaml", envoy_yaml),
    ("check_body", check_body),
    ("client_ip", client_ip),
    ("path_route", path_route),
    ("h1_head", h1_head),
    ("lane_chunked", lane_chunked),
    ("lane_head", lane_head),
];

/// The TOML configuration reader (`sluicegate validate` and `serve`): any text is either a
/// configuration or a list of errors, each with a line and column inside the text.
pub fn config_toml(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return; // the server reads files as UTF-8 and refuses others before parsing
    };
    match sluicegate_server::config::load(text, Path::new("fuzz.toml")) {
        Ok(config) => {
            let _ = config.summary();
        }
        Err(diagnostics) => {
            assert!(!diagnostics.errors.is_empty(), "an error without a reason");
            let lines = text.lines().count().max(1) + 1;
            for d in &diagnostics.errors {
                assert!(d.line <= lines, "line {} of a {lines}-line text", d.line);
            }
            let _ = diagnostics.to_string();
        }
    }
}

/// The envoyproxy/ratelimit YAML reader and compiler (`[envoy] config`): any text compiles
/// or is refused with errors, never a panic. The first byte picks the switches.
pub fn envoy_yaml(data: &[u8]) {
    let Some((&switches, rest)) = data.split_first() else {
        return;
    };
    let Ok(text) = std::str::from_utf8(rest) else {
        return;
    };
    let options = Options {
        algorithm: if switches & 1 == 0 {
            AlgorithmKind::FixedWindow
        } else {
            AlgorithmKind::TokenBucket
        },
        merge_domains: switches & 2 != 0,
        shadow: switches & 4 != 0,
        quota: switches & 8 != 0,
        dynamic_metadata: switches & 16 != 0,
    };
    let mut compiler = Compiler::new(options);
    compiler.add_yaml(text, Path::new("a.yaml"));
    if switches & 32 != 0 {
        // The same text twice: a duplicate domain (or a merge of it with itself).
        compiler.add_yaml(text, Path::new("b.yaml"));
    }
    match compiler.finish() {
        Ok(config) => drop(config),
        Err(errors) => assert!(!errors.to_string().is_empty()),
    }
}

/// The `/v1/check` body (`sluicegate_server::api::check::parse_body`): any bytes are one
/// request, a batch or a 400/413; a parsed request is then validated as the store would
/// (key length, cost within capacity) without a panic.
pub fn check_body(data: &[u8]) {
    let policies = [policy("p", 10), policy("q", 1)];
    let validate = |body: &sluicegate_server::api::types::CheckBody| {
        let named: Vec<Arc<Policy>> = body
            .policy
            .names()
            .iter()
            .map(|name| {
                let i = usize::from(*name != "p");
                Arc::clone(&policies[i])
            })
            .collect();
        let _ = CheckRequest::new(&named, &body.key, body.cost).validate();
    };
    same_as_serde(data);
    match parse_body(data) {
        Ok(CheckInput::One(body)) => validate(&body),
        Ok(CheckInput::Batch(batch)) => {
            for value in batch.requests.into_iter().take(1000) {
                if let Ok(body) = parse_entry(value) {
                    validate(&body);
                }
            }
        }
        Err(e) => {
            let status = e.status.as_u16();
            assert!(status == 400 || status == 413, "status {status}");
        }
    }
}

/// The common body read by hand (`api::plain_body`, tried before serde) accepts only what
/// serde accepts, and reads the same policies, key, cost and `reserve` from it.
fn same_as_serde(data: &[u8]) {
    let Some(plain) = plain_body::parse(data) else {
        return;
    };
    let serde: CheckBody = serde_json::from_slice(data).expect("read by hand, refused by serde");
    assert_eq!(
        format!("{:?}", plain.policy.names()),
        format!("{:?}", serde.policy.names()),
        "policies"
    );
    assert_eq!(
        (&*plain.key, plain.cost, plain.reserve),
        (&*serde.key, serde.cost, serde.reserve)
    );
}

/// Client identity behind trusted proxies (`X-Forwarded-For`, `Forwarded`, `X-Real-IP`):
/// the first byte picks the header and the peer, the rest is split into header lines at
/// `\n`. The client is the peer or an address written in the header, never anything else;
/// an untrusted peer is always its own client; IPv6 is cut to the prefix; the same lines
/// read as a head's field lines name the same client.
pub fn client_ip(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let header = match pick % 3 {
        0 => ClientIpHeader::XForwardedFor,
        1 => ClientIpHeader::Forwarded,
        _ => ClientIpHeader::XRealIp,
    };
    let trusted = vec![
        "127.0.0.0/8".parse().unwrap(),
        "10.0.0.0/8".parse().unwrap(),
        "fd00::/8".parse().unwrap(),
    ];
    let identity = ClientIdentity::new(trusted, 64).with_header(header);
    let peer: IpAddr = match (pick / 3) % 3 {
        0 => "127.0.0.1".parse().unwrap(),
        1 => "fd00::1".parse().unwrap(),
        _ => "192.0.2.7".parse().unwrap(),
    };
    let mut headers = HeaderMap::new();
    for line in rest.split(|b| *b == b'\n') {
        if let Ok(value) = HeaderValue::from_bytes(line) {
            headers.append(http::HeaderName::from_static(header.name()), value);
        }
    }
    let addr = identity.client_addr(peer, &headers);
    assert_eq!(identity.client_ip(peer, &headers), identity.mask(addr));
    // The same lines as a head's field lines (the lean paths' entry, names in mixed case,
    // lines a map refuses included): the same client.
    let upper = header.name().to_ascii_uppercase();
    let lines: Vec<httparse::Header<'_>> = rest
        .split(|b| *b == b'\n')
        .enumerate()
        .map(|(i, value)| httparse::Header {
            name: if i % 2 == 0 { header.name() } else { &upper },
            value,
        })
        .collect();
    let fields = sluicegate_middleware::FieldLines(&lines);
    assert_eq!(
        identity.client_addr(peer, &fields),
        addr,
        "the field lines' client differs"
    );
    if !identity.is_trusted(peer) {
        assert_eq!(addr, peer, "an untrusted peer named another client");
        return;
    }
    if addr != peer {
        let text = String::from_utf8_lossy(rest).to_ascii_lowercase();
        let written = [addr.to_string(), ipv4_mapped(addr)];
        assert!(
            written.iter().any(|a| text.contains(a.as_str())) || has_ipv6(&text),
            "{addr} is neither the peer nor written in {text:?}"
        );
    }
}

/// Path normalisation and route matching: the normal form is normal (normalising it again
/// changes nothing), starts with `/` and holds no empty, `.` or `..` segment; a raw path
/// and its normal form meet the same route. The first byte picks the method.
pub fn path_route(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let path = String::from_utf8_lossy(rest);
    let normal = normalize_path(&path);
    assert_eq!(
        normalize_path(&normal),
        normal,
        "not idempotent on {path:?}"
    );
    assert!(normal.starts_with('/'), "{normal:?}");
    let inner = &normal[1..];
    for (i, segment) in inner.split('/').enumerate() {
        let last = i + 1 == inner.split('/').count();
        assert!(
            segment != "." && segment != ".." && (last || !segment.is_empty()),
            "{path:?} → {normal:?}"
        );
    }
    let method = [Method::GET, Method::POST, Method::DELETE][usize::from(pick % 3)].clone();
    let table = routes();
    let headers = HeaderMap::new();
    let raw = table.find(&method, &path, &headers).map(|r| r.index());
    let normalised = table.find(&method, &normal, &headers).map(|r| r.index());
    assert_eq!(
        raw, normalised,
        "{path:?} and {normal:?} meet different routes"
    );
}

/// The lean front's request head parser (`h1::parse`): any bytes are a partial head (only
/// while shorter than `MAX_HEAD`), a head for hyper, or a *plain* head that keeps every
/// promise of `h1`'s documentation — see [`check_plain_head`]. A plain head is judged the
/// same on its own bytes as with whatever follows it (pipelining), and none of its own
/// prefixes is already a plain head (a head read in pieces is cut in the same place).
pub fn h1_head(data: &[u8]) {
    // More slots than the bound, so the parser itself must keep to `MAX_FIELDS`.
    let mut fields = [h1::EMPTY_HEADER; h1::MAX_FIELDS + 8];
    let head = match h1::parse(data, &mut fields) {
        h1::Parsed::Partial => {
            assert!(data.len() < h1::MAX_HEAD, "partial at {} bytes", data.len());
            return;
        }
        h1::Parsed::Other => return,
        h1::Parsed::Plain(head) => head,
    };
    check_plain_head(data, &head);
    let len = head.len();
    let mut alone = [h1::EMPTY_HEADER; h1::MAX_FIELDS];
    let h1::Parsed::Plain(again) = h1::parse(&data[..len], &mut alone) else {
        panic!("plain with what follows it, not on its own");
    };
    assert_eq!(
        (
            again.method(),
            again.path(),
            again.len(),
            again.content_length()
        ),
        (head.method(), head.path(), len, head.content_length()),
        "judged differently without what follows it"
    );
    // Every prefix for short heads; a sample of cuts for long ones.
    let step = (len / 256).max(1);
    for cut in (0..len).step_by(step) {
        let mut slots = [h1::EMPTY_HEADER; h1::MAX_FIELDS];
        let prefix = h1::parse(&data[..cut], &mut slots);
        assert!(
            !matches!(prefix, h1::Parsed::Plain(_)),
            "a plain head already at {cut} of {len} bytes"
        );
    }
}

/// What a plain head promises: its length within the input and `MAX_HEAD`, ending in a
/// blank line; HTTP/1.1; at most `MAX_FIELDS` fields, none holding CR, LF or NUL; at most
/// one `Content-Length`, of plain digits, equal to `content_length()` (0 without one); no
/// `Transfer-Encoding`, `Expect` or `Upgrade`; `Connection` only `keep-alive`.
fn check_plain_head(data: &[u8], head: &h1::Head<'_>) {
    let len = head.len();
    assert!(
        len > 0 && len <= data.len() && len <= h1::MAX_HEAD,
        "length {len}"
    );
    assert!(data[..len].ends_with(b"\n\n") || data[..len].ends_with(b"\n\r\n"));
    // Empty lines before the request line are skipped (RFC 9112 §2.2), as hyper does.
    let start = data
        .iter()
        .position(|b| !matches!(b, b'\r' | b'\n'))
        .unwrap();
    let line_end = start + data[start..].iter().position(|&b| b == b'\n').unwrap();
    let line = data[start..line_end]
        .strip_suffix(b"\r")
        .unwrap_or(&data[start..line_end]);
    let expected = format!("{} {} HTTP/1.1", head.method(), head.path());
    assert_eq!(line, expected.as_bytes(), "request line");
    let clean = |bytes: &[u8]| !bytes.iter().any(|b| matches!(b, b'\r' | b'\n' | 0));
    assert!(clean(head.path().as_bytes()) && !head.path().contains(' '));
    // The lean gateway's borrowed target check is `http::uri`'s, origin form, no fragment.
    let path = head.path();
    let by_http = path.starts_with('/')
        && !path.contains('#')
        && http::uri::PathAndQuery::try_from(path).is_ok();
    assert_eq!(h1::plain_target(path), by_http, "target {path:?}");
    assert!(
        head.fields().len() <= h1::MAX_FIELDS,
        "{} fields",
        head.fields().len()
    );
    let mut lengths = Vec::new();
    for field in head.fields() {
        let name = field.name.to_ascii_lowercase();
        assert!(clean(field.name.as_bytes()) && clean(field.value), "{name}");
        assert!(
            !matches!(name.as_str(), "transfer-encoding" | "expect" | "upgrade"),
            "plain with {name}"
        );
        if name == "connection" {
            assert!(field.value.eq_ignore_ascii_case(b"keep-alive"));
        }
        if name == "content-length" {
            lengths.push(field.value);
        }
    }
    match lengths[..] {
        [] => assert_eq!(head.content_length(), 0),
        [value] => {
            assert!(!value.is_empty() && value.iter().all(u8::is_ascii_digit));
            let text = std::str::from_utf8(value).unwrap();
            assert_eq!(text.parse::<u64>().ok(), Some(head.content_length()));
        }
        _ => panic!("plain with {} Content-Length fields", lengths.len()),
    }
}

/// The upstream lane's chunked body decoder (`lane::Chunked`): the first byte picks how the
/// rest is cut into reads. The same bytes decode to the same body, trailers and leftover
/// bytes — or break off after the same body bytes with the same error, or run out at the
/// same point — whether they come in one read, byte by byte, or in those cuts.
pub fn lane_chunked(data: &[u8]) {
    let Some((&seed, body)) = data.split_first() else {
        return;
    };
    let whole = decode_chunked(body, |_| body.len());
    let bytewise = decode_chunked(body, |_| 1);
    assert_eq!(whole, bytewise, "one read and byte by byte differ");
    // Cuts of 1 to 64 bytes, varied by the seed and the read's number.
    let cuts = decode_chunked(body, |i| 1 + (usize::from(seed) * 31 + i * 17) % 64);
    assert_eq!(whole, cuts, "one read and cuts of seed {seed} differ");
}

/// What a chunked body decoded to, whatever the reads.
#[derive(Debug, PartialEq)]
enum Chunks {
    /// The end: the body, its trailers, and the bytes after it.
    End(Vec<u8>, Option<HeaderMap>, Vec<u8>),
    /// An error after these body bytes.
    Broken(Vec<u8>, String),
    /// The input ran out after these body bytes.
    Short(Vec<u8>),
}

/// Decodes `input` fed in reads of `cut(read number)` bytes.
fn decode_chunked(input: &[u8], cut: impl Fn(usize) -> usize) -> Chunks {
    let mut decoder = Chunked::new();
    let (mut read, mut fed, mut reads, mut body) = (BytesMut::new(), 0, 0, Vec::new());
    loop {
        let trailers = match decoder.decode(&mut read) {
            Ok(Decoded::Data(data)) => {
                assert!(!data.is_empty(), "an empty data piece");
                body.extend_from_slice(&data);
                continue;
            }
            Ok(Decoded::More) if fed == input.len() => return Chunks::Short(body),
            Ok(Decoded::More) => {
                let n = cut(reads).clamp(1, input.len() - fed);
                read.extend_from_slice(&input[fed..fed + n]);
                (fed, reads) = (fed + n, reads + 1);
                continue;
            }
            Ok(Decoded::Trailers(fields)) => Some(fields),
            Ok(Decoded::End) => None,
            Err(e) => return Chunks::Broken(body, e.to_string()),
        };
        assert!(
            matches!(decoder.decode(&mut read), Ok(Decoded::End)),
            "not over after the end"
        );
        read.extend_from_slice(&input[fed..]);
        return Chunks::End(body, trailers, read.to_vec());
    }
}

/// The upstream lane's response head (`lane::parse_head`, then `decode_head`), read as the
/// lane reads it (only the first `MAX_HEAD` bytes); the first byte's low bit says whether
/// the request was a `HEAD`. A whole head lies within the input, its fields within it; none
/// of its prefixes is whole, and it parses the same without what follows it. A decoded
/// response's framing is what its fields say (RFC 9112 §6.3) — see [`check_framing`].
pub fn lane_head(data: &[u8]) {
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let buf = &rest[..rest.len().min(lane::MAX_HEAD)];
    let mut offsets = Vec::new();
    let Ok(Some(parsed)) = lane::parse_head(buf, &mut offsets) else {
        return;
    };
    let len = parsed.len();
    assert!(len > 0 && len <= buf.len(), "length {len} of {}", buf.len());
    for &[a, b, c, d] in &offsets {
        assert!(
            a <= b && b <= len && c <= d && d <= len,
            "field outside the head"
        );
    }
    let mut alone = Vec::new();
    let again = lane::parse_head(&buf[..len], &mut alone);
    let again = again
        .expect("refused on its own")
        .expect("partial on its own");
    assert_eq!(
        (again.len(), again.status(), &alone),
        (len, parsed.status(), &offsets)
    );
    for cut in (0..len).step_by((len / 256).max(1)) {
        let prefix = lane::parse_head(&buf[..cut], &mut alone);
        assert!(
            matches!(prefix, Ok(None)),
            "prefix of {cut} bytes: {prefix:?}"
        );
    }
    let head = Bytes::copy_from_slice(&buf[..len]);
    let head_request = pick & 1 == 1;
    let decoded = lane::decode_head(head, &parsed, &offsets, head_request);
    // The gateway's lean path judges a final head with `frame` and writes its fields on as
    // bytes: it must accept exactly what `decode` (hyper's side) accepts, framed the same.
    // Interim and 101 heads never reach `frame` (the exchange reads past or refuses them).
    if !(100..200).contains(&parsed.status()) {
        let framed = lane::frame_head(&buf[..len], &parsed, &offsets, head_request);
        match (&decoded, framed) {
            (Ok(Some(r)), Ok((status, framing, keep_alive))) => assert_eq!(
                (r.parts.status, r.framing, r.keep_alive),
                (status, framing, keep_alive)
            ),
            (Err(_), Err(_)) => {}
            (decoded, framed) => panic!("decode {decoded:?} but frame {framed:?}"),
        }
    }
    match decoded {
        Ok(Some(response)) => check_framing(&response, head_request),
        Ok(None) => assert!(matches!(parsed.status(), 100..=199) && parsed.status() != 101),
        Err(e) => assert!(!e.to_string().is_empty()),
    }
}

/// A final response's framing follows its fields: no body for `HEAD`, 204 and 304; else
/// one lone `chunked` coding and no length, or equal lengths of plain digits, or (neither)
/// a body until the close and no reuse. `Connection: close` is never reused either.
fn check_framing(response: &ResponseHead, head_request: bool) {
    let status = response.parts.status.as_u16();
    assert!(status >= 200, "interim {status} as a final response");
    let headers = &response.parts.headers;
    let close = headers.get_all(CONNECTION).iter().any(|v| {
        v.as_bytes()
            .split(|&b| b == b',')
            .any(|t| t.trim_ascii().eq_ignore_ascii_case(b"close"))
    });
    assert!(
        !(close && response.keep_alive),
        "kept alive despite Connection: close"
    );
    if head_request || status == 204 || status == 304 {
        assert_eq!(response.framing, Framing::Empty);
        return;
    }
    let codings: Vec<_> = headers.get_all(TRANSFER_ENCODING).iter().collect();
    let mut lengths = headers
        .get_all(CONTENT_LENGTH)
        .iter()
        .flat_map(|v| v.as_bytes().split(|&b| b == b','))
        .map(|t| {
            let t = t.trim_ascii();
            assert!(
                !t.is_empty() && t.iter().all(u8::is_ascii_digit),
                "length {t:?}"
            );
            std::str::from_utf8(t).unwrap().parse::<u64>().unwrap()
        });
    let first = lengths.next();
    assert!(lengths.all(|n| Some(n) == first), "differing lengths");
    match (response.framing, codings.as_slice(), first) {
        (Framing::Chunked, [coding], None) => {
            assert!(
                coding
                    .as_bytes()
                    .trim_ascii()
                    .eq_ignore_ascii_case(b"chunked")
            );
        }
        (Framing::Length(n), [], Some(m)) => assert!(n == m && n > 0),
        (Framing::Empty, [], Some(0)) => {}
        (Framing::Close, [], None) => assert!(!response.keep_alive),
        (framing, codings, length) => panic!("{framing:?} from {codings:?} and {length:?}"),
    }
}

fn routes() -> RouteTable {
    let specs = [
        RouteSpec::new("/", &["p"]),
        RouteSpec::new("/api", &["p"]),
        RouteSpec::new("/api/auth", &["p"]).methods(&["POST"]),
        RouteSpec::new("/api/%61uth/login", &["p"]),
        RouteSpec::new("/Admin", &["p"]).case_insensitive(true),
        RouteSpec::new("/files/a%2Fb", &["p"]),
    ];
    RouteTable::new(&specs, |name| Some(policy(name, 5))).expect("valid routes")
}

fn policy(name: &str, limit: u64) -> Arc<Policy> {
    Arc::new(
        Policy::builder(
            name,
            AlgorithmKind::TokenBucket,
            limit,
            Duration::from_secs(1),
        )
        .build()
        .expect("valid policy"),
    )
}

/// `::ffff:a.b.c.d` as IPv4 text, so an IPv4-mapped address written in the header is found.
fn ipv4_mapped(addr: IpAddr) -> String {
    match addr {
        IpAddr::V4(v4) => format!("::ffff:{v4}"),
        IpAddr::V6(v6) => v6.to_string(),
    }
}

/// IPv6 addresses have many spellings (`::1`, `0::0:1`, `[::1]:80`); a text holding a colon
/// may name the client in another spelling, so only IPv4 results are matched as text.
fn has_ipv6(text: &str) -> bool {
    text.contains(':')
}
