//! Responses written as HTTP/1.1 bytes the way hyper's server writes them (status line,
//! the fields in the map's order as lower-case names, `content-length` after them when the
//! map has none, `date` last), so that a response answered on the lean path is the one
//! hyper would have sent.

use std::cell::Cell;
use std::time::{SystemTime, UNIX_EPOCH};

use http::{HeaderMap, StatusCode, header};

/// Appends the status line of `status`, with its canonical reason (hyper's `<none>` for a
/// code without one).
pub fn write_status(out: &mut Vec<u8>, status: StatusCode) {
    if status == StatusCode::OK {
        out.extend_from_slice(b"HTTP/1.1 200 OK\r\n");
        return;
    }
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(status.as_str().as_bytes());
    out.push(b' ');
    out.extend_from_slice(status.canonical_reason().unwrap_or("<none>").as_bytes());
    out.extend_from_slice(b"\r\n");
}

/// Appends a whole response: `status`, `headers`, `content-length` and `date` unless the
/// map has them, and `body`. For the statuses that carry a body (not 1xx, 204 or 304).
pub fn write_response(out: &mut Vec<u8>, status: StatusCode, headers: &HeaderMap, body: &[u8]) {
    write_status(out, status);
    for (name, value) in headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !headers.contains_key(header::CONTENT_LENGTH) {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if !headers.contains_key(header::DATE) {
        date(out);
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(body);
}

/// What hyper's server knows of a response body when it writes the head (from the body's
/// `is_end_stream` and `size_hint`): that decides the framing fields it adds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BodyLength {
    /// Ended before the head is written (hyper then never polls it).
    Ended,
    /// Exactly this many bytes.
    Known(u64),
    /// Not known: chunked, where the status allows a body.
    Unknown,
}

/// Appends the head hyper's server writes for a response to a `GET` with `status`,
/// `headers` and a body of `length` (its encoder, `proto/h1/role.rs`, for lower-case
/// names): see [`ProxiedHead`]. For maps without `transfer-encoding`, `connection` or
/// `trailer` (the gateway strips them as hop-by-hop). Returns how the body is written:
/// `None` when the status forbids one, else `Some(chunked)`.
pub fn write_proxied_head(
    out: &mut Vec<u8>,
    status: StatusCode,
    headers: &HeaderMap,
    length: BodyLength,
) -> Option<bool> {
    let mut head = ProxiedHead::new(out, status, length);
    let mut previous: Option<&http::HeaderName> = None;
    for (name, value) in headers {
        let first_of_name = previous != Some(name);
        previous = Some(name);
        head.field(
            out,
            name.as_str().as_bytes(),
            value.as_bytes(),
            first_of_name,
        );
    }
    head.finish(out)
}

/// The head of a proxied response to a `GET`, written as hyper's server encoder writes it,
/// field by field in the map's order: names lower-case; the first `content-length` line
/// only (none for an ended body, which gets an implied `content-length: 0` after the fields
/// instead); after the fields, `content-length` or `transfer-encoding: chunked` when no
/// length was given, and `date` unless one was. No field may be `transfer-encoding`,
/// `connection` or `trailer` (hyper joins those; the gateway strips them as hop-by-hop).
#[derive(Debug)]
pub struct ProxiedHead {
    status: StatusCode,
    length: BodyLength,
    wrote_len: bool,
    wrote_date: bool,
}

impl ProxiedHead {
    /// Starts the head: its status line.
    pub fn new(out: &mut Vec<u8>, status: StatusCode, length: BodyLength) -> ProxiedHead {
        write_status(out, status);
        ProxiedHead {
            status,
            length,
            wrote_len: false,
            wrote_date: false,
        }
    }

    /// One field line; `first_of_name`: the first line of its name in the map.
    pub fn field(&mut self, out: &mut Vec<u8>, name: &[u8], value: &[u8], first_of_name: bool) {
        if super::same_name(name, b"content-length") {
            // An ended body: hyper skips the field and implies the length in `finish`.
            if self.length == BodyLength::Ended || !first_of_name {
                return;
            }
            self.wrote_len = true;
        } else if super::same_name(name, b"date") {
            self.wrote_date = true;
        }
        field_line(out, name, value);
    }

    /// Ends the head; returns how the body is written: `None` when the status forbids one,
    /// else `Some(chunked)`.
    pub fn finish(self, out: &mut Vec<u8>) -> Option<bool> {
        let status = self.status;
        // 1xx, 204 and 304 carry neither a body nor a length (hyper's `can_have_body`).
        let bodyless = status.is_informational()
            || status == StatusCode::NO_CONTENT
            || status == StatusCode::NOT_MODIFIED;
        let mut chunked = false;
        if !self.wrote_len && !bodyless {
            match self.length {
                BodyLength::Unknown => {
                    out.extend_from_slice(b"transfer-encoding: chunked\r\n");
                    chunked = true;
                }
                BodyLength::Ended => out.extend_from_slice(b"content-length: 0\r\n"),
                BodyLength::Known(len) => {
                    out.extend_from_slice(b"content-length: ");
                    out.extend_from_slice(itoa::Buffer::new().format(len).as_bytes());
                    out.extend_from_slice(b"\r\n");
                }
            }
        }
        if !self.wrote_date {
            date(out);
        }
        out.extend_from_slice(b"\r\n");
        (!bodyless).then_some(chunked)
    }
}

/// The length of an IMF-fixdate (`Wed, 02 Dec 2026 01:15:47 GMT`).
const DATE_LEN: usize = 29;

thread_local! {
    /// The second last rendered on this thread and its text: rendered once a second, as
    /// hyper caches its own.
    static DATE: Cell<(u64, [u8; DATE_LEN])> = const { Cell::new((u64::MAX, [0; DATE_LEN])) };
}

/// Appends the field line `date: <now>\r\n`.
pub fn date(out: &mut Vec<u8>) {
    let now = SystemTime::now();
    let second = now
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| since.as_secs());
    let (cached, mut text) = DATE.get();
    if cached != second {
        let rendered = httpdate::fmt_http_date(now);
        if rendered.len() == DATE_LEN {
            text.copy_from_slice(rendered.as_bytes());
            DATE.set((second, text));
        }
    }
    out.extend_from_slice(b"date: ");
    out.extend_from_slice(&text);
    out.extend_from_slice(b"\r\n");
}

/// Writes `name: value` and CRLF, the name lower-cased as hyper sends it (copied, then
/// lower-cased in place: cheaper than a check and a byte at a time).
#[inline]
pub fn field_line(out: &mut Vec<u8>, name: &[u8], value: &[u8]) {
    let at = out.len();
    out.extend_from_slice(name);
    out[at..].make_ascii_lowercase();
    out.extend_from_slice(b": ");
    out.extend_from_slice(value);
    out.extend_from_slice(b"\r\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proxied_heads_as_hyper_writes_them() {
        let mut headers = HeaderMap::new();
        headers.append(header::CONTENT_LENGTH, "2".parse().unwrap());
        headers.append("x-a", "1".parse().unwrap());
        headers.append(header::CONTENT_LENGTH, "2".parse().unwrap());
        headers.append(
            header::DATE,
            "Tue, 01 Dec 2026 00:00:00 GMT".parse().unwrap(),
        );
        let head = |headers: &HeaderMap, status: u16, length| {
            let mut out = Vec::new();
            let status = StatusCode::from_u16(status).unwrap();
            let framing = write_proxied_head(&mut out, status, headers, length);
            (String::from_utf8(out).unwrap(), framing)
        };
        let date = "date: Tue, 01 Dec 2026 00:00:00 GMT\r\n";
        assert_eq!(
            head(&headers, 200, BodyLength::Known(2)),
            (
                format!("HTTP/1.1 200 OK\r\ncontent-length: 2\r\nx-a: 1\r\n{date}\r\n"),
                Some(false)
            )
        );
        assert_eq!(
            head(&headers, 200, BodyLength::Ended),
            (
                format!("HTTP/1.1 200 OK\r\nx-a: 1\r\n{date}content-length: 0\r\n\r\n"),
                Some(false)
            )
        );
        assert_eq!(
            head(&headers, 304, BodyLength::Ended),
            (
                format!("HTTP/1.1 304 Not Modified\r\nx-a: 1\r\n{date}\r\n"),
                None
            )
        );
        // The map's removal moves its last entry into the removed one's place.
        headers.remove(header::CONTENT_LENGTH);
        assert_eq!(
            head(&headers, 200, BodyLength::Unknown),
            (
                format!("HTTP/1.1 200 OK\r\n{date}x-a: 1\r\ntransfer-encoding: chunked\r\n\r\n"),
                Some(true)
            )
        );
    }

    #[test]
    fn a_response_as_hyper_writes_it() {
        let mut headers = HeaderMap::new();
        headers.insert(header::CONTENT_TYPE, "application/json".parse().unwrap());
        headers.append("x-two", "a".parse().unwrap());
        headers.append("x-two", "b".parse().unwrap());
        let mut out = Vec::new();
        write_response(&mut out, StatusCode::PAYLOAD_TOO_LARGE, &headers, b"{}");
        let text = String::from_utf8(out).unwrap();
        let date = httpdate::fmt_http_date(SystemTime::now());
        let expected = format!(
            "HTTP/1.1 413 Payload Too Large\r\ncontent-type: application/json\r\nx-two: a\r\nx-two: b\r\ncontent-length: 2\r\ndate: {date}\r\n\r\n{{}}"
        );
        // The second may turn between the two reads of the clock.
        assert_eq!(text.len(), expected.len(), "{text}");
        assert_eq!(text[..text.len() - 35], expected[..expected.len() - 35]);
        let mut ok = Vec::new();
        write_status(&mut ok, StatusCode::OK);
        write_status(&mut ok, StatusCode::from_u16(599).unwrap());
        assert_eq!(ok, b"HTTP/1.1 200 OK\r\nHTTP/1.1 599 <none>\r\n");
    }
}
