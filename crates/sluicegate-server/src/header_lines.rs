//! The rate-limit headers as HTTP/1.1 field lines (`name: value\r\n`) appended to a
//! response's bytes: what the lean HTTP path ([`crate::h1`]) sends, where hyper's path
//! inserts the same values into a `HeaderMap` (`sluicegate_middleware::headers`), which cost
//! ~3,200 instructions a response to build and drop (docs/benchmarks/server.md).
//!
//! The values are the renderer's ([`sluicegate_core::render`]), in its order; a header set
//! twice keeps its first place with its last value, as `HeaderMap::insert` does; a value a
//! `HeaderValue` would refuse is left out, as the map's sink leaves it out. The common case
//! (one enforcing policy, `draft-6` and `ietf`, the route's `RateLimit-Policy` at hand) is
//! written straight as bytes, names and the policy line fixed, numbers by `itoa`; a
//! property test holds it to the renderer's output.

use sluicegate_core::render::{self, Header, HeaderSet, HeaderSink, Value};
use sluicegate_core::{Outcome, SystemClock, Verdict};

/// Appends the lines of `sets` for `verdict` (and `Retry-After` on a denial) to `out`;
/// `policy_field` is the `RateLimit-Policy` value computed at load, when there is one.
pub fn write_lines(
    sets: &[HeaderSet],
    verdict: &Verdict,
    policy_field: Option<&[u8]>,
    out: &mut Vec<u8>,
) {
    // Room for the usual lines (two sets: ~200 bytes), so that no write grows `out`.
    out.reserve(256);
    if !write_one_policy(sets, verdict, policy_field, out) {
        write_rendered(sets, verdict, policy_field, out);
    }
}

/// The renderer's way, for every verdict: [`write_lines`] when the fast path declines,
/// and the oracle its tests hold the fast path to.
fn write_rendered(
    sets: &[HeaderSet],
    verdict: &Verdict,
    policy_field: Option<&[u8]>,
    out: &mut Vec<u8>,
) {
    let mut lines = Lines {
        start: out.len(),
        out,
        policy_field,
        written: [None; SLOTS],
        count: 0,
    };
    render::write_headers(sets, verdict, &SystemClock, &mut lines);
}

/// The common case written straight as bytes, without the renderer's `String` for
/// `RateLimit` or its sink's bookkeeping (~1,900 instructions a response through the
/// renderer, docs/benchmarks/server.md): an admitted request under one enforcing policy
/// decided by the store, at its own limit, with the route's `RateLimit-Policy` at hand,
/// a name that is an sf-string without escapes, and `draft-6` and `ietf` each at most once.
/// Returns `false`, having written nothing, for anything else: the renderer's case.
///
/// The lines are the renderer's (`render::write_headers`), in the order of `sets`:
/// `draft-6` writes the headline policy's limit, remaining and reset (whole seconds, up);
/// `ietf` writes `RateLimit` (remaining capped at the largest sf-integer, reset at least
/// 1 s) and the cached `RateLimit-Policy`. `tests::the_fast_path_is_the_renderers` holds
/// the two equal on generated verdicts.
fn write_one_policy(
    sets: &[HeaderSet],
    verdict: &Verdict,
    policy_field: Option<&[u8]>,
    out: &mut Vec<u8>,
) -> bool {
    let (Some(field), [d]) = (policy_field, &verdict.decisions[..]) else {
        return false;
    };
    let name = d.policy.name().as_bytes();
    let plain_name = name
        .iter()
        .all(|&b| (0x20..=0x7e).contains(&b) && b != b'"' && b != b'\\');
    let fits = verdict.allowed
        && d.policy.is_enforcing()
        && d.outcome != Outcome::StoreError
        && d.decision.limit == d.policy.limit()
        && plain_name
        && sets.len() <= 2
        && sets.iter().all(|s| *s != HeaderSet::Legacy)
        && !(sets.len() == 2 && sets[0] == sets[1]);
    if !fits {
        return false;
    }
    let d = &d.decision;
    let reset = render::ceil_secs(d.reset_after);
    let mut digits = itoa::Buffer::new();
    for set in sets {
        if *set == HeaderSet::Draft6 {
            out.extend_from_slice(b"ratelimit-limit: ");
            out.extend_from_slice(digits.format(d.limit).as_bytes());
            out.extend_from_slice(b"\r\nratelimit-remaining: ");
            out.extend_from_slice(digits.format(d.remaining).as_bytes());
            out.extend_from_slice(b"\r\nratelimit-reset: ");
            out.extend_from_slice(digits.format(reset).as_bytes());
            out.extend_from_slice(b"\r\n");
        } else {
            out.extend_from_slice(b"ratelimit: \"");
            out.extend_from_slice(name);
            out.extend_from_slice(b"\";r=");
            let remaining = d.remaining.min(SF_MAX_INTEGER);
            out.extend_from_slice(digits.format(remaining).as_bytes());
            out.extend_from_slice(b";t=");
            out.extend_from_slice(digits.format(reset.max(1)).as_bytes());
            out.extend_from_slice(b"\r\nratelimit-policy: ");
            out.extend_from_slice(field);
            out.extend_from_slice(b"\r\n");
        }
    }
    true
}

/// The largest integer a Structured Field carries, as the renderer caps `r` (its private
/// constant; the fast path's test fails if the two differ).
const SF_MAX_INTEGER: u64 = 999_999_999_999_999;

/// More than the distinct headers the renderer writes (11).
const SLOTS: usize = 12;

struct Lines<'a> {
    out: &'a mut Vec<u8>,
    /// Where the first line starts in `out`.
    start: usize,
    policy_field: Option<&'a [u8]>,
    /// The headers written so far, in order.
    written: [Option<Header>; SLOTS],
    count: usize,
}

impl Lines<'_> {
    /// Writes the line of `header`; `value` is a valid field value (digits, a static
    /// value, a `HeaderValue`, or text that passed [`valid`]).
    fn put(&mut self, header: Header, value: &[u8]) {
        let name = header.name().as_bytes();
        if self.written[..self.count].contains(&Some(header)) {
            self.replace(name, value);
            return;
        }
        if self.count < SLOTS {
            self.written[self.count] = Some(header);
            self.count += 1;
        }
        self.out.extend_from_slice(name);
        self.out.extend_from_slice(b": ");
        self.out.extend_from_slice(value);
        self.out.extend_from_slice(b"\r\n");
    }

    /// Replaces the value of the line of `name` (a header set twice; rare).
    fn replace(&mut self, name: &[u8], value: &[u8]) {
        let mut at = self.start;
        while let Some(len) = self.out[at..].windows(2).position(|w| w == b"\r\n") {
            let line = &self.out[at..at + len];
            if line.len() > name.len() + 1
                && line.starts_with(name)
                && line[name.len()..].starts_with(b": ")
            {
                let from = at + name.len() + 2;
                self.out.splice(from..at + len, value.iter().copied());
                return;
            }
            at += len + 2;
        }
    }
}

/// `HeaderValue`'s rule: no control character but tab, no DEL. Checked on rendered text
/// only: numbers and static values always pass (~300 instructions a response saved).
fn valid(value: &[u8]) -> bool {
    value
        .iter()
        .all(|&b| b == b'\t' || (b >= 0x20 && b != 0x7f))
}

impl HeaderSink for Lines<'_> {
    fn set(&mut self, header: Header, value: Value) {
        let mut number = itoa::Buffer::new();
        let bytes = match &value {
            Value::Int(n) => number.format(*n).as_bytes(),
            Value::Static(s) => s.as_bytes(),
            Value::Text(s) if valid(s.as_bytes()) => s.as_bytes(),
            Value::Text(_) => return,
        };
        self.put(header, bytes);
    }

    fn set_cached_policy_field(&mut self) -> bool {
        let Some(field) = self.policy_field else {
            return false;
        };
        self.put(Header::RateLimitPolicy, field);
        true
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use http::HeaderMap;
    use proptest::prelude::*;
    use sluicegate_core::{
        AlgorithmKind, CheckRequest, Decision, MemoryStore, Mode, Policy, PolicyDecision,
    };
    use sluicegate_middleware::headers::{policy_field, write_headers_cached};

    use super::*;

    /// What the map's sink writes, as hyper would send it.
    fn as_map(sets: &[HeaderSet], verdict: &Verdict, field: bool) -> String {
        let policies: Vec<_> = verdict
            .decisions
            .iter()
            .map(|d| Arc::clone(&d.policy))
            .collect();
        let field = field.then(|| policy_field(&policies)).flatten();
        let mut headers = HeaderMap::new();
        write_headers_cached(sets, verdict, field.as_ref(), &mut headers);
        headers
            .iter()
            .map(|(n, v)| format!("{n}: {}\r\n", v.to_str().unwrap()))
            .collect()
    }

    fn as_lines(sets: &[HeaderSet], verdict: &Verdict, field: bool) -> String {
        let policies: Vec<_> = verdict
            .decisions
            .iter()
            .map(|d| Arc::clone(&d.policy))
            .collect();
        let field = field.then(|| policy_field(&policies)).flatten();
        let mut out = b"HTTP/1.1 200 OK\r\n".to_vec();
        write_lines(
            sets,
            verdict,
            field.as_ref().map(|f| f.as_bytes()),
            &mut out,
        );
        String::from_utf8(out[17..].to_vec()).unwrap()
    }

    fn policy(name: &str, limit: u64, secs: u64, mode: Mode) -> Arc<Policy> {
        let p = Policy::builder(
            name,
            AlgorithmKind::TokenBucket,
            limit,
            Duration::from_secs(secs),
        )
        .mode(mode)
        .build()
        .unwrap();
        Arc::new(p)
    }

    /// What `write_lines` writes, and the renderer's way for the same input.
    fn both(sets: &[HeaderSet], verdict: &Verdict, field: Option<&[u8]>) -> (String, String) {
        let (mut fast, mut rendered) = (b"x".to_vec(), b"x".to_vec());
        write_lines(sets, verdict, field, &mut fast);
        write_rendered(sets, verdict, field, &mut rendered);
        let text = |v: Vec<u8>| String::from_utf8(v).unwrap();
        (text(fast), text(rendered))
    }

    #[test]
    fn the_default_takes_the_fast_path() {
        let store = MemoryStore::new(10);
        let policies = [policy("auth", 10, 60, Mode::Reject)];
        let verdict = store
            .check_now(CheckRequest::new(&policies, "k", 1))
            .unwrap();
        let field = policy_field(&policies).unwrap();
        let mut out = Vec::new();
        assert!(write_one_policy(
            &HeaderSet::DEFAULT,
            &verdict,
            Some(field.as_bytes()),
            &mut out
        ));
        let (fast, rendered) = both(&HeaderSet::DEFAULT, &verdict, Some(field.as_bytes()));
        assert_eq!(fast, rendered);
        assert_eq!(
            &fast[1..],
            "ratelimit-limit: 10\r\nratelimit-remaining: 9\r\nratelimit-reset: 6\r\n\
             ratelimit: \"auth\";r=9;t=6\r\nratelimit-policy: \"auth\";q=10;w=60\r\n"
        );
    }

    /// A number from the edges the writers treat apart (0, 1, the sf-integer cap, u64's).
    fn number() -> impl Strategy<Value = u64> {
        prop_oneof![
            0..20u64,
            SF_MAX_INTEGER - 2..=SF_MAX_INTEGER + 2,
            Just(u64::MAX),
            any::<u64>(),
        ]
    }

    /// A decision, its outcome's index, and the policy's own limit (a valid one), which the
    /// decision's is unless a key's override (`own_limit` false) gave it another.
    fn decision() -> impl Strategy<Value = (Decision, u8, u64)> {
        let micros = prop_oneof![0..3_000_000u64, Just(0), Just(u64::MAX), any::<u64>()];
        let own = (1..1_000_000u64, often());
        let outcome = prop_oneof![4 => Just(0u8), 1 => 0..5u8];
        (number(), number(), micros, often(), outcome, own).prop_map(
            |(limit, remaining, reset_after, allowed, outcome, (own, own_limit))| {
                let limit = if own_limit { own } else { limit };
                let d = if allowed {
                    Decision::allow(limit, remaining, reset_after)
                } else {
                    Decision::deny(limit, remaining, reset_after, reset_after)
                };
                (d, outcome, own)
            },
        )
    }

    /// Mostly true: the generated cases lean to the ones the fast path takes.
    fn often() -> impl Strategy<Value = bool> {
        proptest::bool::weighted(0.85)
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(1024))]
        /// The fast path writes the renderer's bytes whenever it writes: one or two
        /// policies, any mode, outcome and numbers, a key's own limit, every order and
        /// repetition of the sets, with and without the route's `RateLimit-Policy`.
        #[test]
        fn the_fast_path_is_the_renderers(
            decided in prop_oneof![4 => proptest::collection::vec(decision(), 1..=1), 1 => proptest::collection::vec(decision(), 1..=2)],
            enforcing in [often(), often()],
            allowed in often(),
            sets in prop_oneof![3 => Just(vec![0, 1]), 1 => Just(vec![1, 0]), 2 => proptest::collection::vec(0..3usize, 0..=3)],
            with_field in often(),
            window in prop_oneof![Just(1u64), Just(60), 1..100_000u64],
        ) {
            let all = [HeaderSet::Draft6, HeaderSet::Ietf, HeaderSet::Legacy];
            let sets: Vec<HeaderSet> = sets.into_iter().map(|i| all[i]).collect();
            let outcomes = [
                Outcome::Allowed,
                Outcome::Denied,
                Outcome::Delayed,
                Outcome::ShadowDenied,
                Outcome::StoreError,
            ];
            let mut policies = Vec::new();
            let mut decisions = Vec::new();
            for (i, (d, outcome, own)) in decided.into_iter().enumerate() {
                let mode = if enforcing[i] { Mode::Reject } else { Mode::Shadow };
                let p = policy(["auth", "a.b-c_9"][i], own, window, mode);
                policies.push(Arc::clone(&p));
                decisions.push(PolicyDecision {
                    policy: p.into(),
                    decision: d,
                    outcome: outcomes[usize::from(outcome)],
                });
            }
            let verdict = Verdict {
                allowed,
                delay: 0,
                decisions: decisions.into(),
                at: 1,
            };
            // A field even where the route would have none (shadow only): the fast path
            // must still decline what the renderer does not show.
            let made = http::HeaderValue::from_static("\"other\";q=1;w=1");
            let field = with_field.then(|| policy_field(&policies).unwrap_or(made));
            let field = field.as_ref().map(|f| f.as_bytes());
            let (fast, rendered) = both(&sets, &verdict, field);
            // Legacy's reset is the wall clock's: equal unless the second turned.
            if fast != rendered {
                let (fast, rendered) = both(&sets, &verdict, field);
                prop_assert_eq!(fast, rendered);
            }
        }
    }

    #[test]
    fn the_lines_are_the_maps_fields() {
        let all = [HeaderSet::Draft6, HeaderSet::Ietf, HeaderSet::Legacy];
        let store = MemoryStore::new(10);
        // Admitted, then (limit 1) denied with Retry-After.
        for (limit, round) in [1, 10, 5_000].into_iter().flat_map(|l| [(l, 0), (l, 1)]) {
            let p = Policy::builder(
                "auth",
                AlgorithmKind::TokenBucket,
                limit,
                Duration::from_secs(60),
            )
            .build()
            .unwrap();
            let policies = [Arc::new(p)];
            let key = format!("k{limit}");
            let verdict = store
                .check_now(CheckRequest::new(&policies, &key, 1))
                .unwrap();
            assert_eq!(verdict.allowed, limit > 1 || round == 0);
            for sets in [
                &all[..],
                &all[..2],
                &all[1..],
                &[HeaderSet::Draft6, HeaderSet::Draft6],
            ] {
                for field in [false, true] {
                    let (map, lines) = (
                        as_map(sets, &verdict, field),
                        as_lines(sets, &verdict, field),
                    );
                    // Legacy's reset is the wall clock's: equal unless the second turned.
                    if map != lines {
                        assert_eq!(map, as_lines(sets, &verdict, field), "{sets:?}");
                    }
                }
            }
        }
    }
}
