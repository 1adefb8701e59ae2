//! The chunked transfer coding's decoder (RFC 9112 §7.1) for lane bodies, over the bytes
//! read so far and nothing else (no socket), so that the same bytes decode to the same body,
//! trailers or error however the reads happen to split them (fuzz target `lane_chunked`).

use bytes::{Buf as _, Bytes, BytesMut};
use http::{HeaderMap, HeaderName, HeaderValue};

use super::{LaneError, MAX_HEAD};

/// The longest chunk-size line read (the size and any extensions).
const MAX_CHUNK_LINE: usize = 4096;

/// The most trailer fields a chunked body may end with.
const MAX_TRAILERS: usize = 32;

/// Where a chunked body's decoding is.
#[derive(Debug, Default)]
pub struct Chunked {
    at: At,
    /// How much of the current chunk-size line or trailer section has been searched for
    /// its end already: a line or section dribbled in byte by byte is scanned once, not
    /// once per read (which was quadratic in its length, up to 64 KiB for trailers).
    searched: usize,
}

#[derive(Debug, Default)]
enum At {
    #[default]
    Size,
    Data(u64),
    DataEnd,
    Trailers,
    Done,
}

/// What the bytes read so far decode to.
#[derive(Debug)]
pub enum Decoded {
    /// Body bytes (never empty).
    Data(Bytes),
    /// The trailer fields: the body is over.
    Trailers(HeaderMap),
    /// The body is over (its last chunk and final blank line have been read).
    End,
    /// More bytes are needed.
    More,
}

impl Chunked {
    /// A decoder at the start of a chunked body.
    pub fn new() -> Chunked {
        Chunked::default()
    }

    /// Decodes the next piece of the body from the start of `read`, taking what it used
    /// off `read`; bytes after the body's end stay there.
    pub fn decode(&mut self, read: &mut BytesMut) -> Result<Decoded, LaneError> {
        loop {
            match &mut self.at {
                At::Size => {
                    // The bound is on the line, not on what one read brought: the same
                    // line is refused (or not) however it arrives. Without its CRLF yet,
                    // the line is at least the buffer less a trailing CR.
                    let end = self.find(read, b"\r\n");
                    let Some(end) = end.filter(|&end| end <= MAX_CHUNK_LINE) else {
                        let within = end.is_none() && read.len() <= MAX_CHUNK_LINE + 1;
                        return more(within, "chunk-size line too long");
                    };
                    let size = chunk_size(&read[..end])?;
                    read.advance(end + 2);
                    self.at = if size == 0 {
                        At::Trailers
                    } else {
                        At::Data(size)
                    };
                }
                At::Data(rest) => {
                    if read.is_empty() {
                        return Ok(Decoded::More);
                    }
                    let take =
                        usize::try_from(*rest).map_or(read.len(), |rest| rest.min(read.len()));
                    *rest -= take as u64;
                    if *rest == 0 {
                        self.at = At::DataEnd;
                    }
                    return Ok(Decoded::Data(read.split_to(take).freeze()));
                }
                At::DataEnd => {
                    if read.len() < 2 {
                        return Ok(Decoded::More);
                    }
                    if &read[..2] != b"\r\n" {
                        return Err(LaneError::Malformed("chunk data not followed by CRLF"));
                    }
                    read.advance(2);
                    self.at = At::Size;
                }
                At::Trailers => return self.trailers(read),
                At::Done => return Ok(Decoded::End),
            }
        }
    }

    /// Where `end` first occurs in `read`, searching only what earlier calls have not (less
    /// the end's length, which may straddle two reads); remembers how far it searched.
    fn find(&mut self, read: &[u8], end: &[u8]) -> Option<usize> {
        let from = self.searched.saturating_sub(end.len() - 1).min(read.len());
        let found = read[from..]
            .windows(end.len())
            .position(|w| w == end)
            .map(|at| from + at);
        self.searched = if found.is_some() { 0 } else { read.len() };
        found
    }

    /// After the last chunk: the trailer section, if any, then the end.
    fn trailers(&mut self, read: &mut BytesMut) -> Result<Decoded, LaneError> {
        if read.len() < 2 {
            return Ok(Decoded::More);
        }
        let fields = if read.starts_with(b"\r\n") {
            read.advance(2);
            None
        } else {
            // As for a chunk-size line, the bound is on the section (blank line included):
            // without its end yet, the section is longer than the buffer.
            let end = self.find(read, b"\r\n\r\n");
            let Some(end) = end.filter(|&end| end + 4 <= MAX_HEAD) else {
                let within = end.is_none() && read.len() < MAX_HEAD;
                return more(within, "trailer section too large");
            };
            let fields = trailer_fields(&read[..end + 4])?;
            read.advance(end + 4);
            Some(fields)
        };
        self.at = At::Done;
        Ok(fields.map_or(Decoded::End, Decoded::Trailers))
    }
}

/// `Decoded::More` while `within` the bound, else the error `what`.
fn more(within: bool, what: &'static str) -> Result<Decoded, LaneError> {
    if within {
        Ok(Decoded::More)
    } else {
        Err(LaneError::Malformed(what))
    }
}

/// The size of a chunk-size line (hex, at most 15 digits; extensions after `;` ignored).
fn chunk_size(line: &[u8]) -> Result<u64, LaneError> {
    let digits = line
        .split(|&b| b == b';')
        .next()
        .unwrap_or_default()
        .trim_ascii_end();
    if digits.is_empty() || digits.len() > 15 {
        return Err(LaneError::Malformed("invalid chunk size"));
    }
    digits.iter().try_fold(0u64, |n, &d| {
        let digit = char::from(d)
            .to_digit(16)
            .ok_or(LaneError::Malformed("invalid chunk size"))?;
        Ok(n << 4 | u64::from(digit))
    })
}

/// A trailer section (the fields and the blank line) as a header map.
fn trailer_fields(section: &[u8]) -> Result<HeaderMap, LaneError> {
    let mut slots = [httparse::EMPTY_HEADER; MAX_TRAILERS];
    let parsed = match httparse::parse_headers(section, &mut slots) {
        Ok(httparse::Status::Complete((_, fields))) => fields,
        _ => return Err(LaneError::Malformed("invalid trailer section")),
    };
    let mut map = HeaderMap::with_capacity(parsed.len());
    for field in parsed {
        let name = HeaderName::from_bytes(field.name.as_bytes());
        let value = HeaderValue::from_bytes(field.value);
        let (Ok(name), Ok(value)) = (name, value) else {
            return Err(LaneError::Malformed("invalid trailer field"));
        };
        map.append(name, value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_sizes_are_hex_with_extensions_ignored() {
        assert_eq!(chunk_size(b"1a").unwrap(), 26);
        assert_eq!(chunk_size(b"FF;name=value").unwrap(), 255);
        assert_eq!(chunk_size(b"0 ").unwrap(), 0);
        for bad in [&b""[..], b"g", b"-1", b" 1", b"1234567890abcdef0", b";x"] {
            assert!(chunk_size(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn trailers_are_parsed_and_bad_ones_refused() {
        let map = trailer_fields(b"x-sum: 42\r\nx-b: 1\r\n\r\n").unwrap();
        assert_eq!(map["x-sum"], "42");
        assert!(trailer_fields(b"no colon\r\n\r\n").is_err());
    }
}
