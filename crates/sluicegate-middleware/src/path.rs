//! Path normalisation: the one form of a request path that routes are matched against.
//!
//! An upstream serves `/api/%61uth`, `/api//auth` and `/api/./auth` as `/api/auth`; if
//! the limiter compared raw bytes, a client could pick a spelling that no route names
//! and walk around its limit. [`normalize_path`] applies RFC 3986 §6.2.2 and a little
//! more, always in the direction of *matching more*, never less:
//!
//! - percent-encoded unreserved characters (`A-Z a-z 0-9 - . _ ~`) are decoded, and the
//!   hex digits of every other escape are upper-cased (§6.2.2.1, §6.2.2.2);
//! - `%2F` / `%2f` is decoded to `/`: some upstreams (and frameworks) decode it before
//!   routing, so `/api%2Fauth` must meet `/api/auth`'s limits. An upstream that keeps it
//!   as a literal byte serves another resource, which is then limited more, never less;
//! - `;` parameters are cut from every segment (`/api/auth;jsessionid=1` is
//!   `/api/auth`; Tomcat and Spring route that way, and `..;` becomes `..`);
//! - dot segments are removed (§5.2.4; `..` never climbs above the root) and repeated
//!   slashes are merged;
//! - a malformed escape (`%zz`, a lone `%`) names no other character: no server decodes
//!   it into another resource, so it cannot spell a limited path in disguise (most
//!   upstreams answer 400). Its `%` is written `%25`, so that normalising twice changes
//!   nothing (`%%61` must not become an escape on a second pass).
//!
//! The query string is not part of the path; callers pass only the path.

use std::borrow::Cow;

/// The normal form of a request path (see the [module documentation](self)).
///
/// Allocation-free for a path that is already normal (the common case).
///
/// ```
/// use sluicegate_middleware::path::normalize_path;
/// assert_eq!(normalize_path("/api/auth"), "/api/auth");
/// assert_eq!(normalize_path("/api/%61uth/login"), "/api/auth/login");
/// assert_eq!(normalize_path("/api//auth/./x/../login"), "/api/auth/login");
/// assert_eq!(normalize_path("/api%2Fauth;v=1/login"), "/api/auth/login");
/// assert_eq!(normalize_path("/a/%zz/%c3%a9"), "/a/%25zz/%C3%A9");
/// assert_eq!(normalize_path(""), "/");
/// ```
pub fn normalize_path(path: &str) -> Cow<'_, str> {
    if is_normal(path) {
        Cow::Borrowed(path)
    } else {
        Cow::Owned(normalize_slow(path))
    }
}

/// A quick scan: starts with `/`, no escape, no parameter, no empty or dot segment. One
/// pass over the bytes: it runs on every request (callgrind: a split-based version cost
/// about 900 instructions for a 19-byte path).
fn is_normal(path: &str) -> bool {
    let bytes = path.as_bytes();
    if bytes.first() != Some(&b'/') {
        return false;
    }
    let mut start = 1;
    for (at, &byte) in bytes.iter().enumerate().skip(1) {
        match byte {
            b'%' | b';' => return false,
            b'/' if !is_plain_segment(&bytes[start..at], false) => return false,
            b'/' => start = at + 1,
            _ => {}
        }
    }
    is_plain_segment(&bytes[start..], true)
}

/// A segment that normalisation keeps as it is: not `.` or `..`, and not empty unless it is
/// the last (a trailing slash).
fn is_plain_segment(segment: &[u8], last: bool) -> bool {
    segment != b"." && segment != b".." && (last || !segment.is_empty())
}

fn normalize_slow(path: &str) -> String {
    let decoded = decode(path);
    let mut out: Vec<&str> = Vec::new();
    let mut trailing_slash = false;
    for raw in decoded.split('/') {
        // `;` parameters belong to their segment and are not part of the name.
        let segment = raw.split(';').next().unwrap_or("");
        trailing_slash = matches!(segment, "" | "." | "..");
        match segment {
            "" | "." => {}
            ".." => {
                out.pop();
            }
            name => out.push(name),
        }
    }
    let mut normal = String::with_capacity(decoded.len() + 1);
    for segment in &out {
        normal.push('/');
        normal.push_str(segment);
    }
    if trailing_slash || out.is_empty() {
        normal.push('/');
    }
    normal
}

/// Decodes escapes of unreserved characters and of `/`; upper-cases the others; writes
/// the `%` of a malformed one as `%25`. The result is valid UTF-8 whenever the input is: only ASCII is decoded.
fn decode(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut out = String::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%'
            && let (Some(hi), Some(lo)) = (
                bytes.get(i + 1).and_then(|b| hex(*b)),
                bytes.get(i + 2).and_then(|b| hex(*b)),
            )
        {
            let byte = hi << 4 | lo;
            if is_unreserved(byte) || byte == b'/' {
                out.push(char::from(byte));
            } else {
                out.push('%');
                out.push(char::from(HEX[usize::from(hi)]));
                out.push(char::from(HEX[usize::from(lo)]));
            }
            i += 3;
            continue;
        }
        if bytes[i] == b'%' {
            out.push_str("%25");
            i += 1;
            continue;
        }
        // Copy up to the next '%' at once (keeps multi-byte characters whole).
        let next = bytes[i + 1..]
            .iter()
            .position(|b| *b == b'%')
            .map_or(bytes.len(), |p| i + 1 + p);
        out.push_str(&path[i..next]);
        i = next;
    }
    out
}

const HEX: &[u8; 16] = b"0123456789ABCDEF";

fn hex(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// RFC 3986 §2.3.
fn is_unreserved(b: u8) -> bool {
    b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~')
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// The quick check says "normal" exactly when normalising changes nothing.
        #[test]
        fn the_quick_check_agrees_with_normalising(
            parts in proptest::collection::vec(
                proptest::sample::select(vec!["/", ".", "..", "a", "%2e", "%", ";x", "//", "é"]),
                0..10,
            )
        ) {
            let path = parts.concat();
            let normal = normalize_slow(&path);
            proptest::prop_assert_eq!(is_normal(&path), normal == path, "{:?}", path);
        }
    }

    #[test]
    fn bypass_spellings_meet_the_plain_path() {
        for spelling in [
            "/api/auth/login",
            "/api/%61uth/login",
            "/api/%61%75%74%68/login",
            "/api//auth/login",
            "//api///auth//login",
            "/api/./auth/login",
            "/api/x/../auth/login",
            "/api/%2e/auth/login",
            "/api/x/%2E%2E/auth/login",
            "/api/x/..;/auth/login",
            "/api/auth;jsessionid=1/login",
            "/api%2Fauth/login",
            "/api%2fauth%2Flogin",
            "/../api/auth/login",
            "api/auth/login",
        ] {
            assert_eq!(normalize_path(spelling), "/api/auth/login", "{spelling}");
        }
    }

    #[test]
    fn shapes() {
        assert_eq!(normalize_path("/"), "/");
        assert_eq!(normalize_path(""), "/");
        assert_eq!(normalize_path("//"), "/");
        assert_eq!(normalize_path("/.."), "/");
        assert_eq!(normalize_path("/a/"), "/a/");
        assert_eq!(normalize_path("/a/."), "/a/");
        assert_eq!(normalize_path("/a/b/.."), "/a/");
        assert_eq!(normalize_path("/a/..."), "/a/...");
        assert_eq!(normalize_path("/a/%"), "/a/%25");
        assert_eq!(normalize_path("/a/%4"), "/a/%254");
        assert_eq!(normalize_path("/a/%4g"), "/a/%254g");
        assert_eq!(normalize_path("/%%61b"), "/%25ab");
        assert_eq!(normalize_path("/a/%20b"), "/a/%20b");
        assert_eq!(normalize_path("/a/%3b/b"), "/a/%3B/b");
        assert_eq!(normalize_path("/é/%7e"), "/é/~");
        // Decoding happens once: %252F is the text "%2F", not a slash.
        assert_eq!(normalize_path("/a%252Fb"), "/a%252Fb");
    }

    #[test]
    fn already_normal_paths_are_borrowed() {
        for p in ["/", "/api", "/api/", "/api/auth/login", "/a.b/c..d/.e"] {
            assert!(matches!(normalize_path(p), Cow::Borrowed(_)), "{p}");
        }
    }

    #[test]
    fn idempotent_on_samples() {
        for p in [
            "/a/%2e%2e/%2F/b;c/%zz/./",
            "/%61/../..//%7E",
            "/x;y;z/..;/",
            "/%%61b%",
            "/%2%41",
        ] {
            let once = normalize_path(p).into_owned();
            assert_eq!(normalize_path(&once), once.as_str(), "{p}");
        }
    }
}
