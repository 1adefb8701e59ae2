//! A lean HTTP/1.1 front for a listener: the connection's bytes are read into a buffer,
//! each complete request head is parsed with `httparse`, and a request the listener's
//! [`Handler`] takes is answered right there, its response written as bytes into one
//! buffer and sent with one write. Pipelined requests are answered in order.
//!
//! **What it is not**: an HTTP server. It answers only heads that are *plain*: HTTP/1.1, at
//! most [`MAX_HEAD`] bytes and [`MAX_FIELDS`] fields, at most one `Content-Length` of
//! plain digits, no `Transfer-Encoding`, `Expect` or `Upgrade`, no `Connection` but
//! `keep-alive`, and only those its handler accepts. On anything else — another path or
//! method, HTTP/1.0, an HTTP/2 preface, a TLS hello, a head `httparse` refuses, one that is
//! too large, a client that closes mid-request — the connection is handed to hyper with
//! the bytes already read ([`Rewind`]), for the rest of its life. So every other request,
//! and every odd or hostile one, gets hyper's answer byte for byte, as it did before this
//! module existed; only the narrow, unambiguous case is answered here.
//!
//! **Why**: for a decision API the HTTP exchange is most of the cost of a request: hyper's
//! `Request`/`Response` and their `HeaderMap`s, the service and body machinery cost more than
//! the decision itself (issue 15; docs/benchmarks/server.md). A handler here writes its
//! response, headers included, straight into the output buffer.
//!
//! **Why hand-written HTTP is acceptable here**: the parser is hyper's own (`httparse`),
//! the accepted subset is strict (no framing choice is ever ambiguous: a body is exactly
//! `Content-Length` bytes and what follows is the next request), and anything outside
//! it falls back to hyper rather than being judged here.
//!
//! The connection rules of `conn.rs` hold on both paths: the caller's socket is metered
//! (header and idle deadlines, `max_connections`), [`drive`] reports each request it
//! answers through its `started` hook (the request is in progress until its response is
//! written) and closes between requests once `stop` resolves (graceful shutdown).

mod drive;
mod head;
mod rewind;
mod write;

pub use drive::{Handler, Never, Request, Tail, drive};
pub use head::{Head, MAX_FIELDS, MAX_HEAD, Parsed, parse, plain_target};
pub use httparse::{EMPTY_HEADER, Header};
pub use rewind::Rewind;
pub use write::{
    BodyLength, ProxiedHead, date, field_line, write_proxied_head, write_response, write_status,
};

/// Whether two field names are equal, ASCII case ignored: `<[u8]>::eq_ignore_ascii_case`,
/// with a cheaper test per byte (equal bytes, or one letter in both cases) than its two
/// lower-casings — names are compared many times a request on the lean paths (the
/// gateway's map model, the heads' framing fields). `tests::same_name_is_eq_ignore_ascii_case`.
#[inline]
pub fn same_name(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len()
        && a.iter()
            .zip(b)
            .all(|(&x, &y)| x == y || (x ^ y == 0x20 && (x | 0x20).is_ascii_lowercase()))
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    #[test]
    fn same_name_is_eq_ignore_ascii_case_for_every_byte_pair() {
        for x in 0..=255u8 {
            for y in 0..=255u8 {
                assert_eq!(
                    super::same_name(&[x], &[y]),
                    [x].eq_ignore_ascii_case(&[y]),
                    "{x} {y}"
                );
            }
        }
    }

    proptest! {
        #[test]
        fn same_name_is_eq_ignore_ascii_case(a in "[a-zA-Z@\\[`{_-]{0,6}", b in "[a-zA-Z@\\[`{_-]{0,6}") {
            let (a, b) = (a.as_bytes(), b.as_bytes());
            prop_assert_eq!(super::same_name(a, b), a.eq_ignore_ascii_case(b));
            let upper = a.to_ascii_uppercase();
            prop_assert!(super::same_name(a, &upper));
        }
    }
}
