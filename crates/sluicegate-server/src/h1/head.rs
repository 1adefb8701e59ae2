//! A request head parsed by `httparse` (hyper's own parser) and judged *plain*: the only
//! heads the lean front answers itself. Everything else is hyper's.

use httparse::{Header, Status};

/// The largest head answered on the lean path; a longer one (hyper allows ~400 KiB) goes to
/// hyper, which applies its own bound.
pub const MAX_HEAD: usize = 8 * 1024;

/// The most header fields of a head answered on the lean path (hyper allows 100).
pub const MAX_FIELDS: usize = 32;

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
