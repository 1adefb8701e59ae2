//! Heads on the lane: the request head written as bytes, the response head parsed with
//! `httparse` into `http` types (field values shared with the read buffer, not copied), and
//! the response's framing decided (RFC 9112 §6.3).

use std::mem::MaybeUninit;

use bytes::Bytes;
use http::header::{CONNECTION, CONTENT_LENGTH, TRANSFER_ENCODING};
use http::{HeaderMap, HeaderName, HeaderValue, StatusCode, Version};

use super::{LaneError, MAX_HEADERS};

/// How a response's body is delimited on the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Framing {
    /// No body (a `HEAD` request; 1xx, 204, 304; `Content-Length: 0`).
    Empty,
    /// `Content-Length` bytes.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
    /// Until the upstream closes the connection (then not reusable).
    Close,
}

/// A whole response head at the start of the read buffer; its fields' offsets are in the
/// connection's `offsets`.
#[derive(Debug)]
pub struct Parsed {
    len: usize,
    status: u16,
    http10: bool,
}

impl Parsed {
    /// The head's length in bytes, its final blank line included.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Never true: a head has at least a status line.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The status code as sent (three digits; not yet checked to be a valid status).
    pub fn status(&self) -> u16 {
        self.status
    }
}

/// `METHOD target HTTP/1.1`, the fields, the blank line. The `http` types have already
/// refused CR, LF and NUL in every part, so nothing here can split the head.
pub fn write_request(out: &mut Vec<u8>, request: &http::request::Parts) {
    out.extend_from_slice(request.method.as_str().as_bytes());
    out.push(b' ');
    let target = request.uri.path_and_query().map_or("/", |pq| pq.as_str());
    out.extend_from_slice(target.as_bytes());
    out.extend_from_slice(b" HTTP/1.1\r\n");
    for (name, value) in &request.headers {
        out.extend_from_slice(name.as_str().as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out.extend_from_slice(b"\r\n");
}

/// Parses the head at the start of `buf`: `None` while it is incomplete. The fields'
/// offsets into `buf` go to `offsets` (name start, end, value start, end), so the values
/// can be taken from the buffer once it is frozen, without a copy.
pub fn parse(buf: &[u8], offsets: &mut Vec<[usize; 4]>) -> Result<Option<Parsed>, LaneError> {
    let mut slots = [const { MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS];
    let mut response = httparse::Response::new(&mut []);
    let len = match httparse::ParserConfig::default().parse_response_with_uninit_headers(
        &mut response,
        buf,
        &mut slots,
    ) {
        Ok(httparse::Status::Complete(len)) => len,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(httparse::Error::TooManyHeaders) => {
            return Err(LaneError::Malformed("too many header fields"));
        }
        Err(_) => return Err(LaneError::Malformed("unparsable response head")),
    };
    let base = buf.as_ptr() as usize;
    let offset = |part: &[u8]| -> Result<[usize; 2], LaneError> {
        if part.is_empty() {
            return Ok([0, 0]);
        }
        let start = (part.as_ptr() as usize)
            .checked_sub(base)
            .filter(|start| start + part.len() <= len)
            .ok_or(LaneError::Malformed("header field outside the head"))?;
        Ok([start, start + part.len()])
    };
    offsets.clear();
    for field in response.headers.iter() {
        let [name_start, name_end] = offset(field.name.as_bytes())?;
        let [value_start, value_end] = offset(field.value)?;
        offsets.push([name_start, name_end, value_start, value_end]);
    }
    Ok(Some(Parsed {
        len,
        status: response.code.unwrap_or(0),
        http10: response.version == Some(0),
    }))
}

/// What the framing fields of a head said, gathered as the fields are copied.
#[derive(Default)]
struct Fields {
    length: Option<u64>,
    chunked: bool,
    /// A `Transfer-Encoding` other than one lone `chunked`.
    other_coding: bool,
    close: bool,
}

impl Fields {
    /// Notes the field `name` (any case) of `value`.
    fn see(&mut self, name: &[u8], value: &[u8]) -> Result<(), LaneError> {
        if crate::h1::same_name(name, CONTENT_LENGTH.as_str().as_bytes()) {
            // A list of equal values is allowed (RFC 9110 §8.6); differing ones are not.
            for item in value.split(|&b| b == b',') {
                let n = parse_length(item.trim_ascii())?;
                if self.length.is_some_and(|seen| seen != n) {
                    return Err(LaneError::Malformed("differing Content-Length values"));
                }
                self.length = Some(n);
            }
        } else if crate::h1::same_name(name, TRANSFER_ENCODING.as_str().as_bytes()) {
            if self.chunked || !value.trim_ascii().eq_ignore_ascii_case(b"chunked") {
                self.other_coding = true;
            }
            self.chunked = true;
        } else if crate::h1::same_name(name, CONNECTION.as_str().as_bytes()) {
            self.close |= value
                .split(|&b| b == b',')
                .any(|token| token.trim_ascii().eq_ignore_ascii_case(b"close"));
        }
        Ok(())
    }

    /// The body's framing (RFC 9112 §6.3), for a status that may have a body.
    fn framing(&self) -> Result<Framing, LaneError> {
        if self.other_coding {
            return Err(LaneError::Malformed("unsupported Transfer-Encoding"));
        }
        if self.chunked && self.length.is_some() {
            return Err(LaneError::Malformed(
                "both Transfer-Encoding and Content-Length",
            ));
        }
        Ok(match (self.chunked, self.length) {
            (true, _) => Framing::Chunked,
            (false, Some(0)) => Framing::Empty,
            (false, Some(n)) => Framing::Length(n),
            (false, None) => Framing::Close,
        })
    }
}

/// Decimal digits only, at most 19 of them (no sign, no overflow).
fn parse_length(digits: &[u8]) -> Result<u64, LaneError> {
    if digits.is_empty() || digits.len() > 19 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(LaneError::Malformed("invalid Content-Length"));
    }
    Ok(digits
        .iter()
        .fold(0u64, |n, d| n * 10 + u64::from(d - b'0')))
}

/// What [`decode`] decides without building the parts: the status, the framing, and
/// whether the connection may carry another request. The fields of a head `parse` accepted
/// are valid `HeaderName`s and `HeaderValue`s already (`httparse` admits tokens as names and
/// no control byte but tab, nor DEL, in values), so only the framing can refuse one here.
pub fn frame(
    head: &[u8],
    parsed: &Parsed,
    offsets: &[[usize; 4]],
    head_request: bool,
) -> Result<(StatusCode, Framing, bool), LaneError> {
    let status = StatusCode::from_u16(parsed.status)
        .map_err(|_| LaneError::Malformed("invalid status code"))?;
    let mut fields = Fields::default();
    for &[name_start, name_end, value_start, value_end] in offsets {
        fields.see(&head[name_start..name_end], &head[value_start..value_end])?;
    }
    let no_body =
        head_request || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED;
    let framing = if no_body {
        Framing::Empty
    } else {
        fields.framing()?
    };
    let keep_alive = !(fields.close || parsed.http10 || framing == Framing::Close);
    Ok((status, framing, keep_alive))
}

/// A final response head, decoded.
#[derive(Debug)]
pub struct Response {
    /// Status and fields (the values share the head's bytes).
    pub parts: http::response::Parts,
    /// How its body is delimited.
    pub framing: Framing,
    /// Whether the connection may carry another request after this response's body.
    pub keep_alive: bool,
}

/// Decodes the head `parse` found (its bytes `head`, its fields at `offsets`): the response
/// and its framing, `None` for an interim (1xx) answer, or why it is refused. Its own
/// function, without the connection, so that it can be fuzzed (fuzz target `lane_head`).
pub fn decode(
    head: Bytes,
    parsed: &Parsed,
    offsets: &[[usize; 4]],
    head_request: bool,
) -> Result<Option<Response>, LaneError> {
    let status = StatusCode::from_u16(parsed.status)
        .map_err(|_| LaneError::Malformed("invalid status code"))?;
    if status == StatusCode::SWITCHING_PROTOCOLS {
        // Never asked for on this lane (upgrades go through hyper's client).
        return Err(LaneError::Malformed("an upgrade that was not asked for"));
    }
    if status.is_informational() {
        return Ok(None);
    }
    let mut headers = HeaderMap::with_capacity(offsets.len());
    let mut fields = Fields::default();
    for &[name_start, name_end, value_start, value_end] in offsets {
        let name = HeaderName::from_bytes(&head[name_start..name_end])
            .map_err(|_| LaneError::Malformed("invalid header name"))?;
        let value = HeaderValue::from_maybe_shared(head.slice(value_start..value_end))
            .map_err(|_| LaneError::Malformed("invalid header value"))?;
        fields.see(name.as_str().as_bytes(), value.as_bytes())?;
        headers.append(name, value);
    }
    let no_body =
        head_request || status == StatusCode::NO_CONTENT || status == StatusCode::NOT_MODIFIED;
    let framing = if no_body {
        Framing::Empty
    } else {
        fields.framing()?
    };
    // `Connection: close` and HTTP/1.0: the body is read as framed, but the connection is
    // not reused; a body delimited by the close cannot be followed by anything.
    let keep_alive = !(fields.close || parsed.http10 || framing == Framing::Close);
    let mut response = http::Response::new(());
    *response.status_mut() = status;
    *response.version_mut() = Version::HTTP_11;
    *response.headers_mut() = headers;
    let (parts, ()) = response.into_parts();
    Ok(Some(Response {
        parts,
        framing,
        keep_alive,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(lines: &[(&str, &str)]) -> Result<Framing, LaneError> {
        let mut fields = Fields::default();
        for (name, value) in lines {
            fields.see(name.as_bytes(), value.as_bytes())?;
        }
        fields.framing()
    }

    #[test]
    fn framing_follows_rfc_9112() {
        assert_eq!(fields(&[]).unwrap(), Framing::Close);
        assert_eq!(
            fields(&[("content-length", "12")]).unwrap(),
            Framing::Length(12)
        );
        assert_eq!(fields(&[("content-length", "0")]).unwrap(), Framing::Empty);
        assert_eq!(
            fields(&[("content-length", "5, 5")]).unwrap(),
            Framing::Length(5)
        );
        assert_eq!(
            fields(&[("transfer-encoding", "Chunked")]).unwrap(),
            Framing::Chunked
        );
        for bad in [
            &[("content-length", "5, 6")][..],
            &[("content-length", "5"), ("content-length", "6")],
            &[("content-length", "-1")],
            &[("content-length", "+5")],
            &[("content-length", "99999999999999999999")],
            &[("transfer-encoding", "gzip, chunked")],
            &[
                ("transfer-encoding", "chunked"),
                ("transfer-encoding", "chunked"),
            ],
            &[("transfer-encoding", "chunked"), ("content-length", "5")],
        ] {
            assert!(fields(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn a_head_is_parsed_only_when_whole() {
        let mut offsets = Vec::new();
        let whole = b"HTTP/1.1 200 OK\r\nx-a: 1\r\ncontent-length: 2\r\n\r\nok";
        for cut in 0..whole.len() - 2 {
            assert!(
                parse(&whole[..cut], &mut offsets).unwrap().is_none(),
                "{cut}"
            );
        }
        let parsed = parse(whole, &mut offsets).unwrap().unwrap();
        assert_eq!((parsed.len, parsed.status), (whole.len() - 2, 200));
        assert_eq!(&whole[offsets[0][0]..offsets[0][1]], b"x-a");
        assert_eq!(&whole[offsets[1][2]..offsets[1][3]], b"2");
        assert!(parse(b"HTTP/1.1 200 OK\r\nbad header\r\n\r\n", &mut offsets).is_err());
        let many: String = (0..=MAX_HEADERS).map(|i| format!("x-{i}: 1\r\n")).collect();
        let many = format!("HTTP/1.1 200 OK\r\n{many}\r\n");
        assert!(parse(many.as_bytes(), &mut offsets).is_err());
    }
}
