//! Client keys from the request itself: `query:<name>`, `cookie:<name>` and composites
//! such as `ip+header:x-api-key`.
//!
//! A value is looked up the way the upstream will read it, so that a client cannot change
//! its key without changing what the upstream sees: query values are percent-decoded (and
//! `+` is a space, as in forms), cookie values lose their optional quotes. A parameter or
//! cookie given more than once with different values is ambiguous (upstreams disagree on
//! which one wins): the request is then keyed by IP, like a request without it.

/// Room for a key held in place: `ip:` and a dotted quad are at most 18 bytes; 30 is what
/// fits beside the tag in the 32 bytes the `String` variant takes anyway.
const INLINE_KEY: usize = 30;

/// Each octet's decimal digits, left-aligned in three bytes, and how many there are.
static OCTET_TEXT: [(u8, [u8; 3]); 256] = {
    let mut table = [(0u8, [0u8; 3]); 256];
    let mut n = 0;
    while n < 256 {
        let b = n as u8;
        table[n] = if b >= 100 {
            (3, [b'0' + b / 100, b'0' + b / 10 % 10, b'0' + b % 10])
        } else if b >= 10 {
            (2, [b'0' + b / 10, b'0' + b % 10, 0])
        } else {
            (1, [b'0' + b, 0, 0])
        };
        n += 1;
    }
    table
};

/// A client key as a decision holds it: an IPv4 key (the usual one) in place, any other in
/// a `String`.
///
/// The IPv4 key was a `String` of its own a request: its allocation and free cost ~130
/// instructions of the layer's ~9,300 (callgrind, docs/benchmarks/middleware.md). It reads
/// as the `&str` the `String` did (`Deref`), so the store, the leases and the settler see
/// the same key.
#[derive(Clone)]
pub(crate) struct ClientKey(KeyRepr);

#[derive(Clone)]
enum KeyRepr {
    // Only `ClientKey::ipv4` makes it: `len` bytes of `ip:`, digits and dots (and only
    // ASCII digits, dots and zeros past them).
    Inline { len: u8, bytes: [u8; INLINE_KEY] },
    Heap(String),
}

impl ClientKey {
    /// `ip:a.b.c.d`, what `ClientIdentity::ip_key` says for an IPv4 address, in place.
    pub(crate) fn ipv4(ip: std::net::Ipv4Addr) -> ClientKey {
        let mut bytes = [0u8; INLINE_KEY];
        bytes[..3].copy_from_slice(b"ip:");
        let mut len = 3;
        // Each octet's three table bytes are copied whole and a dot put after its digits;
        // what lies past them is overwritten by the next octet or past the key's end
        // (`len` drops the last dot). Byte by byte, with a bounds check each, it cost
        // about twice the instructions.
        for octet in ip.octets() {
            let (digits, text) = OCTET_TEXT[usize::from(octet)];
            let digits = usize::from(digits);
            // In bounds: `len` is at most 3 + 3 * 4 = 15 here, the buffer 30 long.
            if let Some(room) = bytes.get_mut(len..len + 4) {
                room[..3].copy_from_slice(&text);
                room[digits] = b'.';
            }
            len += digits + 1;
        }
        ClientKey(KeyRepr::Inline {
            len: (len - 1) as u8,
            bytes,
        })
    }

    /// The key as a `String` (for the public API that hands one out).
    pub(crate) fn into_string(self) -> String {
        match self.0 {
            KeyRepr::Heap(key) => key,
            KeyRepr::Inline { .. } => self.as_str().to_owned(),
        }
    }

    fn as_str(&self) -> &str {
        match &self.0 {
            KeyRepr::Inline { len, bytes } => {
                let text = bytes.get(..usize::from(*len)).unwrap_or_default();
                // SAFETY: `Inline` is made only by `ClientKey::ipv4`, whose buffer holds only
                // ASCII bytes (`ip:`, digits and dots from a table, zeros): any prefix of it
                // is valid UTF-8 (`ipv4_key_is_ip_key` checks the text against `ip_key`).
                unsafe { std::str::from_utf8_unchecked(text) }
            }
            KeyRepr::Heap(key) => key,
        }
    }
}

impl From<String> for ClientKey {
    fn from(key: String) -> ClientKey {
        ClientKey(KeyRepr::Heap(key))
    }
}

impl std::ops::Deref for ClientKey {
    type Target = str;
    fn deref(&self) -> &str {
        self.as_str()
    }
}

impl std::fmt::Debug for ClientKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(self.as_str(), f)
    }
}

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

    proptest::proptest! {
        /// The in-place IPv4 key is the `String` `ip_key` formats (every address: one-,
        /// two- and three-digit octets, zeros), and reads back the same through every
        /// accessor.
        #[test]
        fn ipv4_key_is_ip_key(bits in proptest::num::u32::ANY, small in 0..4u8) {
            // Octets of 0-9 and 10-99 are rare among random words: mix them in.
            let mut octets = bits.to_be_bytes();
            for octet in octets.iter_mut().take(usize::from(small)) {
                *octet %= if bits & 1 == 0 { 10 } else { 100 };
            }
            let ip = std::net::Ipv4Addr::from(octets);
            let general = crate::ClientIdentity::default().ip_key(std::net::IpAddr::V4(ip));
            let key = ClientKey::ipv4(ip);
            proptest::prop_assert_eq!(&*key, general.as_str());
            proptest::prop_assert_eq!(format!("{key:?}"), format!("{general:?}"));
            proptest::prop_assert_eq!(key.clone().into_string(), general.clone());
            proptest::prop_assert_eq!(&*ClientKey::from(general.clone()), general.as_str());
        }
    }

    #[test]
    fn client_key_of_ipv6_is_ip_key() {
        let id = crate::ClientIdentity::default();
        let ip: std::net::IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(&*id.client_key(ip), id.ip_key(ip));
        let v4: std::net::IpAddr = "255.255.255.255".parse().unwrap();
        assert_eq!(&*id.client_key(v4), "ip:255.255.255.255");
    }

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
