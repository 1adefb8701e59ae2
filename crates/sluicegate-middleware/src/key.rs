//! Client keys from the request itself: `query:<name>`, `cookie:<name>` and composites
//! such as `ip+header:x-api-key`.
//!
//! A value is looked up the way the upstream will read it, so that a client cannot change
//! its key without changing what the upstream sees: query values are percent-decoded (and
//! `+` is a space, as in forms), cookie values lose their optional quotes. A parameter or
//! cookie given more than once with different values is ambiguous (upstreams disagree on
//! which one wins): the request is then keyed by IP, like a request without it.

/// Longest query or cookie name accepted in a key spec.
pub const MAX_NAME_LEN: usize = 128;

/// Most parts a composite key may join.
pub const MAX_PARTS: usize = 8;

/// Whether `name` may follow `query:` or `cookie:`: 1 to 128 bytes of visible ASCII that
/// cannot end a parameter or cookie (`=`, `&`, `;`, `,`, `+`, `%`, quotes, spaces).
pub fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= MAX_NAME_LEN
        && name.bytes().all(|b| {
            b.is_ascii_graphic() && !matches!(b, b'=' | b'&' | b';' | b',' | b'+' | b'%' | b'"')
        })
}

/// The decoded value of query parameter `name` in `query` (without the `?`); `None` when it
/// is absent, empty, not UTF-8 after decoding, holds a control character, or is repeated
/// with another value.
///
/// ```
/// use sluicegate_middleware::key::query_value;
/// assert_eq!(query_value("a=1&api_key=%61bc", "api_key").as_deref(), Some("abc"));
/// assert_eq!(query_value("q=a+b", "q").as_deref(), Some("a b"));
/// assert_eq!(query_value("k=a&k=b", "k"), None);
/// assert_eq!(query_value("k=a&k=a", "k").as_deref(), Some("a"));
/// ```
pub fn query_value(query: &str, name: &str) -> Option<String> {
    let mut found: Option<String> = None;
    for pair in query.split('&') {
        let (raw_name, raw_value) = pair.split_once('=').unwrap_or((pair, ""));
        // A malformed parameter elsewhere in the query does not matter to this one.
        if percent_decode(raw_name).as_deref() != Some(name) {
            continue;
        }
        let value = percent_decode(raw_value)?;
        match &found {
            Some(seen) if *seen != value => return None,
            _ => found = Some(value),
        }
    }
    found.filter(|v| acceptable(v))
}

/// The value of cookie `name` across every `Cookie` header line; `None` when it is absent,
/// empty, holds a control character, or is set twice with different values.
///
/// ```
/// use sluicegate_middleware::key::cookie_value;
/// assert_eq!(cookie_value(["a=1; session=\"xyz\""], "session").as_deref(), Some("xyz"));
/// assert_eq!(cookie_value(["s=1", "s=2"], "s"), None);
/// ```
pub fn cookie_value<'a>(lines: impl IntoIterator<Item = &'a str>, name: &str) -> Option<String> {
    let mut found: Option<&str> = None;
    for line in lines {
        for pair in line.split(';') {
            let Some((n, v)) = pair.split_once('=') else {
                continue;
            };
            if n.trim() != name {
                continue;
            }
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(v);
            match found {
                Some(seen) if seen != v => return None,
                _ => found = Some(v),
            }
        }
    }
    found.filter(|v| acceptable(v)).map(str::to_owned)
}

fn acceptable(value: &str) -> bool {
    !value.is_empty() && !value.chars().any(char::is_control)
}

/// `application/x-www-form-urlencoded` decoding: `%XX` and `+` as space. `None` for a
/// malformed escape or bytes that are not UTF-8.
fn percent_decode(text: &str) -> Option<String> {
    if !text.bytes().any(|b| b == b'%' || b == b'+') {
        return Some(text.to_owned());
    }
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'+' => out.push(b' '),
            b'%' => {
                let hex = bytes.get(i + 1..i + 3)?;
                let hex = std::str::from_utf8(hex).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 2;
            }
            b => out.push(b),
        }
        i += 1;
    }
    String::from_utf8(out).ok()
}

/// Escapes `%` and `+` in one part of a composite key, so that the parts cannot be
/// re-split differently: two clients get the same composite key only if every part is equal.
pub(crate) fn escape_part(part: &str, out: &mut String) {
    for c in part.chars() {
        match c {
            '%' => out.push_str("%25"),
            '+' => out.push_str("%2B"),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names() {
        assert!(valid_name("api_key"));
        assert!(!valid_name(""));
        assert!(!valid_name("a=b"));
        assert!(!valid_name("a b"));
        assert!(!valid_name(&"x".repeat(129)));
    }

    #[test]
    fn query_values() {
        assert_eq!(query_value("", "k"), None);
        assert_eq!(query_value("k", "k"), None);
        assert_eq!(query_value("k=", "k"), None);
        assert_eq!(query_value("%6B=v", "k").as_deref(), Some("v"));
        assert_eq!(query_value("k=%zz", "k"), None);
        assert_eq!(query_value("k=%", "k"), None);
        assert_eq!(query_value("k=%ff", "k"), None);
        assert_eq!(query_value("k=%0a", "k"), None);
        assert_eq!(query_value("other=%zz&k=1", "k").as_deref(), Some("1"));
    }

    #[test]
    fn cookies() {
        assert_eq!(cookie_value(["a=1;b=2"], "b").as_deref(), Some("2"));
        assert_eq!(cookie_value(["ab=1"], "b"), None);
        assert_eq!(cookie_value(["b"], "b"), None);
        assert_eq!(cookie_value(["b=1", "b=1"], "b").as_deref(), Some("1"));
    }

    #[test]
    fn escaping_keeps_parts_apart() {
        let join = |parts: &[&str]| {
            let mut out = String::new();
            for (i, p) in parts.iter().enumerate() {
                if i > 0 {
                    out.push('+');
                }
                escape_part(p, &mut out);
            }
            out
        };
        assert_ne!(join(&["a", "b+c"]), join(&["a+b", "c"]));
        assert_ne!(join(&["a%2B", "b"]), join(&["a+", "b"]));
    }
}
