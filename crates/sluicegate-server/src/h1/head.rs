//! A request head parsed by `httparse` (hyper's own parser) and judged *plain*: the only
//! heads the lean front answers itself. Everything else is hyper's.

use httparse::{Header, Status};

/// The largest head answered on the lean path; a longer one (hyper allows ~400 KiB) goes to
/// hyper, which applies its own bound.
pub const MAX_HEAD: usize = 8 * 1024;

/// The most header fields of a head answered on the lean path (hyper allows 100).
pub const MAX_FIELDS: usize = 32;

/// Whether `target` is an origin-form target (`/…`, no fragment) that `http::Uri` takes
/// unchanged: what `http::uri::PathAndQuery::try_from` accepts, without copying the target
/// into a `Bytes` to find out (311 instructions a request, docs/benchmarks/server.md).
/// Its byte classes are http 1.5's (`uri/path.rs`); a target is a `&str`, so the bytes
/// above 0x7F it checks for UTF-8 pass. The `h1_head` fuzz target and
/// `tests::plain_target_is_what_http_accepts` hold the two equal.
pub fn plain_target(target: &str) -> bool {
    let bytes = target.as_bytes();
    if bytes.first() != Some(&b'/') || bytes.len() > MAX_TARGET {
        return false;
    }
    // Path bytes until the first `?`, query bytes after it.
    let mut class = IN_PATH;
    for &b in bytes {
        if TARGET_BYTES[usize::from(b)] & class == 0 {
            return false;
        }
        if b == b'?' {
            class = IN_QUERY;
        }
    }
    true
}

/// `http::uri`'s longest target.
const MAX_TARGET: usize = u16::MAX as usize - 1;
const IN_PATH: u8 = 1;
const IN_QUERY: u8 = 2;

/// For each byte, where `http::uri` takes it: `IN_PATH`, `IN_QUERY`, both or neither.
/// `#` (a fragment, which `Uri` would cut off) is in neither.
static TARGET_BYTES: [u8; 256] = target_bytes();

const fn target_bytes() -> [u8; 256] {
    let mut table = [0; 256];
    let mut i = 0;
    while i < 256 {
        let b = i as u8;
        let path = matches!(b, 0x21 | 0x24..=0x3B | 0x3D | 0x40..=0x5F | 0x61..=0x7A | 0x7C | 0x7E)
            || matches!(b, b'"' | b'{' | b'}' | b'?' | 0x80..=0xFF);
        let query = matches!(b, 0x21 | 0x24..=0x3B | 0x3D | 0x3F..=0x7E | 0x80..=0xFF);
        table[i] = if path { IN_PATH } else { 0 } | if query { IN_QUERY } else { 0 };
        i += 1;
    }
    table
}

/// What the bytes read so far hold.
#[derive(Debug)]
pub enum Parsed<'a> {
    /// The start of a head that may still be plain: read more.
    Partial,
    /// A complete plain head.
    Plain(Head<'a>),
    /// Not a plain HTTP/1.1 head (or not a head at all): hyper's to answer.
    Other,
}

/// A complete plain request head, borrowing the connection's buffer.
#[derive(Debug)]
pub struct Head<'a> {
    method: &'a str,
    path: &'a str,
    fields: &'a [Header<'a>],
    content_length: u64,
    len: usize,
}

impl<'a> Head<'a> {
    /// The method, as sent (methods are case-sensitive).
    pub fn method(&self) -> &'a str {
        self.method
    }

    /// The request target, as sent.
    pub fn path(&self) -> &'a str {
        self.path
    }

    /// The fields, in order.
    pub fn fields(&self) -> &'a [Header<'a>] {
        self.fields
    }

    /// The value of the first field named `name` (ASCII case ignored), as `HeaderMap::get`
    /// would give it.
    pub fn field(&self, name: &str) -> Option<&'a [u8]> {
        self.fields
            .iter()
            .find(|f| f.name.eq_ignore_ascii_case(name))
            .map(|f| f.value)
    }

    /// The body's length: `Content-Length`, or 0 without one.
    pub fn content_length(&self) -> u64 {
        self.content_length
    }

    /// The head's length in bytes, its final blank line included.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: a head has at least a request line.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Parses the head at the start of `buf` into `fields` (at most [`MAX_FIELDS`] used).
pub fn parse<'a>(buf: &'a [u8], fields: &'a mut [Header<'a>]) -> Parsed<'a> {
    let limit = fields.len().min(MAX_FIELDS);
    let mut request = httparse::Request::new(&mut fields[..limit]);
    let len = match request.parse(buf) {
        Ok(Status::Complete(len)) => len,
        Ok(Status::Partial) if buf.len() < MAX_HEAD => return Parsed::Partial,
        // Too long, too many fields, or malformed: hyper judges it (and answers 400, 431…).
        Ok(Status::Partial) | Err(_) => return Parsed::Other,
    };
    if len > MAX_HEAD || request.version != Some(1) {
        return Parsed::Other;
    }
    let (Some(method), Some(path)) = (request.method, request.path) else {
        return Parsed::Other;
    };
    let fields: &'a [Header<'a>] = request.headers;
    match framing(fields) {
        Some(content_length) => Parsed::Plain(Head {
            method,
            path,
            fields,
            content_length,
            len,
        }),
        None => Parsed::Other,
    }
}

/// The body length of plain fields; `None` when a field makes the request anything but a
/// plain one: a second `Content-Length` (even an equal one) or one that is not plain
/// digits, any `Transfer-Encoding` (with or without a length: the smuggling case), `Expect`,
/// `Upgrade`, or a `Connection` other than `keep-alive`.
fn framing(fields: &[Header<'_>]) -> Option<u64> {
    let mut length = None;
    for field in fields {
        let name = field.name.as_bytes();
        if name.eq_ignore_ascii_case(b"content-length") {
            if length.is_some() {
                return None;
            }
            length = Some(digits(field.value)?);
        } else if name.eq_ignore_ascii_case(b"transfer-encoding")
            || name.eq_ignore_ascii_case(b"expect")
            || name.eq_ignore_ascii_case(b"upgrade")
            || (name.eq_ignore_ascii_case(b"connection")
                && !field.value.eq_ignore_ascii_case(b"keep-alive"))
        {
            return None;
        }
    }
    Some(length.unwrap_or(0))
}

/// `1*DIGIT` of at most 18 digits (no sign, space, comma or overflow).
fn digits(value: &[u8]) -> Option<u64> {
    if value.is_empty() || value.len() > 18 || !value.iter().all(u8::is_ascii_digit) {
        return None;
    }
    Some(value.iter().fold(0, |n, d| n * 10 + u64::from(d - b'0')))
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// What the lean gateway required before `plain_target`: `http::uri`'s own answer.
    fn by_http(target: &str) -> bool {
        target.starts_with('/')
            && !target.contains('#')
            && http::uri::PathAndQuery::try_from(target).is_ok()
    }

    #[test]
    fn plain_target_is_what_http_accepts_for_every_byte() {
        let mut text = String::new();
        for c in (0..=0x7fu8)
            .map(char::from)
            .chain(['é', '\u{80}', '€', '😀'])
        {
            for shape in [
                "/{c}", "{c}", "/a{c}b", "/?{c}", "/a?b{c}?", "/{c}?x", "{c}/",
            ] {
                text.clear();
                text.push_str(&shape.replace("{c}", &c.to_string()));
                assert_eq!(plain_target(&text), by_http(&text), "{text:?}");
            }
        }
        for len in [MAX_TARGET - 1, MAX_TARGET, MAX_TARGET + 1] {
            let long = format!("/{}", "a".repeat(len - 1));
            assert_eq!(plain_target(&long), by_http(&long), "{len}");
        }
        assert!(plain_target("/api/items?x=1&y={2}"));
        assert!(!plain_target("/a b") && !plain_target("/a#b") && !plain_target(""));
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(2048))]
        /// Targets made of the bytes the classes treat apart, and any text at all.
        #[test]
        fn plain_target_is_what_http_accepts(
            target in prop_oneof![
                "/[a-z/?#%\"{}<>\\^`| \t\x00-\x1f\x7féü€]{0,24}",
                "[/?#a-z]{0,4}\\PC{0,8}",
                any::<String>(),
            ]
        ) {
            prop_assert_eq!(plain_target(&target), by_http(&target));
        }
    }

    fn judge(bytes: &[u8]) -> &'static str {
        let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
        match parse(bytes, &mut fields) {
            Parsed::Partial => "partial",
            Parsed::Plain(_) => "plain",
            Parsed::Other => "other",
        }
    }

    #[test]
    fn plain_heads_and_their_length() {
        let bytes = b"POST /v1/check HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}GET";
        let mut fields = [httparse::EMPTY_HEADER; MAX_FIELDS];
        let Parsed::Plain(head) = parse(bytes, &mut fields) else {
            panic!("not plain");
        };
        assert_eq!((head.method(), head.path()), ("POST", "/v1/check"));
        assert_eq!((head.content_length(), head.len()), (2, bytes.len() - 5));
        assert_eq!(head.field("HOST"), Some(&b"x"[..]));
        assert_eq!(
            judge(b"GET / HTTP/1.1\r\nConnection: Keep-Alive\r\n\r\n"),
            "plain"
        );
        assert_eq!(judge(b"POST /v1/check HTTP/1.1\r\nHost: x\r\n"), "partial");
    }

    #[test]
    fn anything_but_plain_is_other() {
        for bytes in [
            &b"GET / HTTP/1.0\r\n\r\n"[..],
            b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
            b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
            b"POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 2\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: +2\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 2, 2\r\n\r\n",
            b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
            b"POST / HTTP/1.1\r\nExpect: 100-continue\r\n\r\n",
            b"GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
            b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n",
            b"GET / HTTP/1.1\r\nX-A: 1\r\n folded\r\n\r\n",
            b"GET / HTTP/1.1\r\nBad Name: 1\r\n\r\n",
            b"GET / HTTP/1.1\r\nX : 1\r\n\r\n",
        ] {
            assert_eq!(judge(bytes), "other", "{}", String::from_utf8_lossy(bytes));
        }
    }

    #[test]
    fn large_heads_and_many_fields_are_hypers() {
        let mut long = b"GET / HTTP/1.1\r\nX: ".to_vec();
        long.resize(MAX_HEAD, b'a');
        assert_eq!(judge(&long), "other");
        let mut many = b"GET / HTTP/1.1\r\n".to_vec();
        for i in 0..=MAX_FIELDS {
            many.extend_from_slice(format!("X-{i}: 1\r\n").as_bytes());
        }
        many.extend_from_slice(b"\r\n");
        assert_eq!(judge(&many), "other");
    }
}
