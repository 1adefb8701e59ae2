//! Redis key names: `<prefix>:{<escaped client key>}:<policy>:<tag>`.
//!
//! - The braces are a Redis Cluster hash tag: only the escaped client key is hashed, so every
//!   policy's state for one client lives in one hash slot and a multi-policy script may touch
//!   them all.
//! - The client key is percent-escaped: `%`, `{`, `}`, `:`, space, control bytes and every
//!   non-ASCII byte become `%XX`. The escaped text contains no brace, so a hostile key cannot
//!   end the hash tag early or start another; the escaping is injective, so two client keys
//!   never share a Redis key. Ordinary keys (IPv4 addresses, API keys) stay readable.
//! - The tag names the algorithm only: a policy whose limit, burst, period or calendar is
//!   edited (or a key given an override) keeps its state, which records the numbers it was
//!   counted under and is carried over to the new ones by the script, keeping what the key
//!   has used, like the in-memory store; a changed algorithm reads another key and starts
//!   afresh.
//! - A key's override under a policy lives in `<…>:<policy>:override`, beside its states;
//!   a key also checked placed (the Envoy service's) has a copy beside its placed states,
//!   in the placement's slot, which the script reads with them.

use sluicegate_core::{AlgorithmKind, Policy};

/// Appends the escaped form of `key`.
pub(crate) fn escape_into(out: &mut String, key: &str) {
    const HEX: &[u8; 16] = b"0123456789ABCDEF";
    let plain = |b: u8| b.is_ascii_graphic() && !matches!(b, b'%' | b'{' | b'}' | b':');
    // Runs of plain bytes are copied whole (most keys are one run): a push per byte was a
    // visible share of a local (`store.sync`) decision's CPU. A run is ASCII between
    // character boundaries, so it is a valid slice of `key`.
    let bytes = key.as_bytes();
    let mut start = 0;
    for (i, &b) in bytes.iter().enumerate() {
        if plain(b) {
            continue;
        }
        out.push_str(key.get(start..i).unwrap_or_default());
        out.push('%');
        out.push(char::from(HEX[usize::from(b >> 4)]));
        out.push(char::from(HEX[usize::from(b & 0xf)]));
        start = i + 1;
    }
    out.push_str(key.get(start..).unwrap_or_default());
}

/// The short algorithm name in a key's tag. Always two characters: the entry script finds
/// a state's override key by cutting them off (`entry.lua`).
fn algorithm_tag(kind: AlgorithmKind) -> &'static str {
    match kind {
        AlgorithmKind::FixedWindow => "fw",
        AlgorithmKind::SlidingLog => "sl",
        AlgorithmKind::SlidingWindow => "sw",
        AlgorithmKind::TokenBucket => "tb",
        AlgorithmKind::LeakyBucket => "lb",
        AlgorithmKind::Gcra => "gc",
        AlgorithmKind::Concurrency => "cc",
    }
}

/// A calendar policy's time zone as a number the script compares (FNV-1a of its name; 0
/// without a calendar): a state counted in another zone's windows is carried over.
pub(crate) fn zone_tag(policy: &Policy) -> u32 {
    let Some(calendar) = policy.calendar() else {
        return 0;
    };
    let mut hash: u32 = 0x811c_9dc5;
    for byte in calendar.zone().bytes() {
        hash ^= u32::from(byte);
        hash = hash.wrapping_mul(0x0100_0193);
    }
    hash.max(1)
}

/// The Redis key holding `client_key`'s override under `policy` (the script derives it
/// from the state key: the algorithm tag replaced by `override`).
///
/// ```
/// # use std::time::Duration;
/// # use sluicegate_core::{AlgorithmKind, Policy};
/// let policy = Policy::builder("api", AlgorithmKind::FixedWindow, 10, Duration::from_secs(60)).build().unwrap();
/// assert_eq!(sluicegate_redis::override_key("sg", "c-42", &policy), "sg:{c-42}:api:override");
/// ```
pub fn override_key(prefix: &str, client_key: &str, policy: &Policy) -> String {
    placed_override_key(prefix, None, client_key, policy)
}

/// [`override_key`] beside a placed state ([`placed_state_key`]): the override the script
/// reads for the placed checks (the Envoy service's), in the placement's slot.
///
/// ```
/// # use std::time::Duration;
/// # use sluicegate_core::{AlgorithmKind, Policy};
/// let policy = Policy::builder("p", AlgorithmKind::FixedWindow, 10, Duration::from_secs(60)).build().unwrap();
/// let key = sluicegate_redis::placed_override_key("sg", Some("api"), "api/ip=1", &policy);
/// assert_eq!(key, "sg:{api}api/ip=1:p:override");
/// ```
pub fn placed_override_key(
    prefix: &str,
    placement: Option<&str>,
    client_key: &str,
    policy: &Policy,
) -> String {
    let state = placed_state_key(prefix, placement, client_key, policy);
    let cut = state.rfind(':').unwrap_or(state.len());
    format!("{}:override", &state[..cut])
}

/// The Redis key holding `policy`'s state for `client_key`.
///
/// ```
/// # use std::time::Duration;
/// # use sluicegate_core::{AlgorithmKind, Policy};
/// let policy = Policy::builder("auth", AlgorithmKind::TokenBucket, 10, Duration::from_secs(60))
///     .build()
///     .unwrap();
/// let key = sluicegate_redis::state_key("sluicegate", "2001:db8::1", &policy);
/// assert_eq!(key, "sluicegate:{2001%3Adb8%3A%3A1}:auth:tb");
/// ```
pub fn state_key(prefix: &str, client_key: &str, policy: &Policy) -> String {
    placed_state_key(prefix, None, client_key, policy)
}

/// [`state_key`] for a key placed with others ([`KeyedCheck::placement`]): the hash tag is
/// the escaped placement, so every key of one placement lives in one hash slot:
/// `<prefix>:{<escaped placement>}<escaped client key>:<policy>:<tag>`. No escaped text
/// holds `:` or a brace, so a placed key never equals an unplaced one (which has `}:`) nor
/// another placed one.
///
/// ```
/// # use std::time::Duration;
/// # use sluicegate_core::{AlgorithmKind, Policy};
/// let policy = Policy::builder("p", AlgorithmKind::FixedWindow, 10, Duration::from_secs(60)).build().unwrap();
/// let key = sluicegate_redis::placed_state_key("sg", Some("api"), "api/ip=1", &policy);
/// assert_eq!(key, "sg:{api}api/ip=1:p:fw");
/// ```
///
/// [`KeyedCheck::placement`]: sluicegate_core::KeyedCheck::placement
pub fn placed_state_key(
    prefix: &str,
    placement: Option<&str>,
    client_key: &str,
    policy: &Policy,
) -> String {
    let mut key = String::with_capacity(prefix.len() + client_key.len() + policy.name().len() + 20);
    push_placed_state_key(&mut key, prefix, placement, client_key, policy);
    key
}

/// [`placed_state_key`] appended to `key` (a buffer the caller reuses).
pub(crate) fn push_placed_state_key(
    key: &mut String,
    prefix: &str,
    placement: Option<&str>,
    client_key: &str,
    policy: &Policy,
) {
    key.push_str(prefix);
    key.push_str(":{");
    match placement {
        Some(placement) => {
            escape_into(key, placement);
            key.push('}');
            escape_into(key, client_key);
            key.push(':');
        }
        None => {
            escape_into(key, client_key);
            key.push_str("}:");
        }
    }
    key.push_str(policy.name());
    key.push(':');
    key.push_str(algorithm_tag(policy.algorithm()));
}

/// The one-time marker of a settled reservation `id` of `client_key`: in the client key's
/// hash slot, so the settle script touches one hash slot. `}!` never follows the tag in a state
/// key (which has `}:`), so a marker is never a state.
pub(crate) fn settle_marker_key(prefix: &str, client_key: &str, id: &str) -> String {
    let mut key = String::with_capacity(prefix.len() + client_key.len() + id.len() + 16);
    key.push_str(prefix);
    key.push_str(":{");
    escape_into(&mut key, client_key);
    key.push_str("}!settled:");
    escape_into(&mut key, id);
    key
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::time::Duration;

    use super::*;

    fn policy(limit: u64) -> Policy {
        Policy::builder("p", AlgorithmKind::Gcra, limit, Duration::from_secs(1))
            .build()
            .unwrap()
    }

    fn hash_tag(key: &str) -> &str {
        let open = key.find('{').unwrap();
        let close = open + key[open..].find('}').unwrap();
        &key[open + 1..close]
    }

    #[test]
    fn escaping_copies_plain_runs_and_escapes_every_other_byte() {
        let escaped = |key: &str| {
            let mut out = String::new();
            escape_into(&mut out, key);
            out
        };
        assert_eq!(escaped(""), "");
        assert_eq!(escaped("user-42"), "user-42");
        assert_eq!(escaped("a:b{c}%d é\n"), "a%3Ab%7Bc%7D%25d%20%C3%A9%0A");
        assert_eq!(escaped("::"), "%3A%3A");
        assert_eq!(escaped("é"), "%C3%A9");
    }

    #[test]
    fn escaping_keeps_keys_apart_and_in_their_slot() {
        let hostile = [
            "a", "a}", "{a", "a:b", "a%3Ab", "a b", "a\nb", "a\u{0}", "é", "%", "}{", "{}",
        ];
        let p = policy(5);
        let mut seen = HashSet::new();
        for client in hostile {
            let key = state_key("sg", client, &p);
            assert!(seen.insert(key.clone()), "collision for {client:?}");
            let tag = hash_tag(&key);
            assert!(!tag.is_empty());
            assert!(!tag.contains('{') && !tag.contains('}'));
            assert_eq!(key.matches('{').count(), 1);
            assert_eq!(key.matches('}').count(), 1);
        }
    }

    #[test]
    fn placed_keys_share_their_placement_slot_and_never_collide() {
        use redis::cluster_routing::Slot;
        let p = policy(5);
        let a = placed_state_key("sg", Some("api"), "api/ip=1", &p);
        let b = placed_state_key("sg", Some("api"), "api/path=%2Flogin", &p);
        assert_eq!(Slot::for_key(&a), Slot::for_key(&b));
        assert_eq!(hash_tag(&a), "api");
        let mut seen = HashSet::new();
        for (placement, client) in [
            (None, "api"),
            (Some("api"), "x"),
            (Some("api}x"), "y"),
            (Some("a"), "pi}x"),
            (Some("api"), ":x"),
            (None, "api}x"),
        ] {
            let key = placed_state_key("sg", placement, client, &p);
            assert!(seen.insert(key.clone()), "collision: {key}");
            assert_eq!(key.matches('{').count(), 1);
            assert_eq!(key.matches('}').count(), 1);
        }
    }

    #[test]
    fn new_numbers_keep_the_key_a_new_algorithm_does_not() {
        assert_eq!(
            state_key("sg", "k", &policy(5)),
            state_key("sg", "k", &policy(6))
        );
        let other = Policy::builder("p", AlgorithmKind::TokenBucket, 5, Duration::from_secs(1))
            .build()
            .unwrap();
        assert_ne!(
            state_key("sg", "k", &policy(5)),
            state_key("sg", "k", &other)
        );
    }

    #[test]
    fn tags_are_two_characters_as_the_script_assumes() {
        for kind in AlgorithmKind::ALL
            .into_iter()
            .chain([AlgorithmKind::Concurrency])
        {
            assert_eq!(algorithm_tag(kind).len(), 2, "{kind:?}");
        }
        let state = state_key("sg", "k", &policy(5));
        let cut = &state[..state.len() - 2];
        assert_eq!(
            format!("{cut}override"),
            override_key("sg", "k", &policy(5))
        );
    }
}
