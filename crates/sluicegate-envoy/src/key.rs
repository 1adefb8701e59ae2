//! The store key of a descriptor: its domain and every entry, e.g.
//! `api/remote_address=10.0.0.1&path=%2Flogin`... only `%`, `&`, `=` and `/` are escaped.
//!
//! The policy already names the rule; the key names the client. Entry values come from
//! requests (client IPs, headers), so the key space is client-controlled: the store's own
//! bound (`max_keys` in memory, TTLs in Redis) is what keeps memory bounded. Keys longer
//! than the store accepts keep their first bytes and end in a hash of the whole key.

use sluicegate_core::store::MAX_KEY_LEN;

use crate::tree::CounterPart;

fn escape_into(out: &mut String, text: &str) {
    for c in text.chars() {
        match c {
            '%' => out.push_str("%25"),
            '&' => out.push_str("%26"),
            '=' => out.push_str("%3D"),
            '/' => out.push_str("%2F"),
            c => out.push(c),
        }
    }
}

/// The domain of a store key made by [`counter_key`] (the service places the key's checks
/// under it); `None` for a key of another shape. An override of such a key is written where
/// the service's placed checks read it.
///
/// ```
/// use sluicegate_envoy::key::{descriptor_key, domain_of};
/// assert_eq!(domain_of(&descriptor_key("a/b", &[("ip", "1")])).as_deref(), Some("a/b"));
/// assert_eq!(domain_of("c-42"), None);
/// assert_eq!(domain_of("/ip=1"), None);
/// ```
pub fn domain_of(key: &str) -> Option<String> {
    let (escaped, entries) = key.split_once('/')?;
    if escaped.is_empty() || !entries.contains('=') {
        return None;
    }
    let mut out = String::with_capacity(escaped.len());
    let mut rest = escaped;
    while let Some(at) = rest.find('%') {
        out.push_str(&rest[..at]);
        let c = match rest.get(at..at + 3)? {
            "%25" => '%',
            "%26" => '&',
            "%3D" => '=',
            "%2F" => '/',
            _ => return None,
        };
        out.push(c);
        rest = &rest[at + 3..];
    }
    out.push_str(rest);
    Some(out)
}

/// The key of `entries` in `domain`, at most [`MAX_KEY_LEN`] bytes.
///
/// ```
/// use sluicegate_envoy::key::descriptor_key;
/// assert_eq!(descriptor_key("api", &[("remote_address", "10.0.0.1")]), "api/remote_address=10.0.0.1");
/// assert_eq!(descriptor_key("api", &[("a", "x&y"), ("b", "")]), "api/a=x%26y&b=");
/// assert!(descriptor_key("api", &[("h", &"v".repeat(5000))]).len() <= 1024);
/// ```
pub fn descriptor_key(domain: &str, entries: &[(&str, &str)]) -> String {
    let parts: Vec<(&str, CounterPart<'_>)> = entries
        .iter()
        .map(|&(key, value)| (key, CounterPart::Value(value)))
        .collect();
    counter_key(domain, &parts)
}

/// The key of a matched descriptor, where a `share_threshold` wildcard stands for every value
/// it matches: such an entry is written `key=%*pattern`, which no escaped value can be (a
/// value's `%` is always `%25`).
///
/// ```
/// use sluicegate_envoy::key::counter_key;
/// use sluicegate_envoy::tree::CounterPart;
/// assert_eq!(counter_key("api", &[("files", CounterPart::Shared("files/*"))]), "api/files=%*files%2F*");
/// assert_eq!(counter_key("api", &[("files", CounterPart::Value("files/*"))]), "api/files=files%2F*");
/// ```
pub fn counter_key(domain: &str, entries: &[(&str, CounterPart<'_>)]) -> String {
    let mut out = String::with_capacity(domain.len() + 32);
    escape_into(&mut out, domain);
    out.push('/');
    for (i, (key, part)) in entries.iter().enumerate() {
        if i > 0 {
            out.push('&');
        }
        escape_into(&mut out, key);
        out.push('=');
        match part {
            CounterPart::Value(value) => escape_into(&mut out, value),
            CounterPart::Shared(pattern) => {
                out.push_str("%*");
                escape_into(&mut out, pattern);
            }
        }
    }
    if out.len() <= MAX_KEY_LEN {
        return out;
    }
    // FNV-1a: stable across processes and builds, so every node maps a long key alike.
    let hash = out.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    });
    let mut cut = MAX_KEY_LEN - 17;
    while !out.is_char_boundary(cut) {
        cut -= 1;
    }
    out.truncate(cut);
    out.push('#');
    out.push_str(&format!("{hash:016x}"));
    out
}
