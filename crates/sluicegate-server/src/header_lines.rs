//! The rate-limit headers as HTTP/1.1 field lines (`name: value\r\n`) appended to a
//! response's bytes: what the lean HTTP path ([`crate::h1`]) sends, where hyper's path
//! inserts the same values into a `HeaderMap` (`sluicegate_middleware::headers`), which cost
//! ~3,200 instructions a response to build and drop (docs/benchmarks/server.md).
//!
//! The values are the renderer's ([`sluicegate_core::render`]), in its order; a header set
//! twice keeps its first place with its last value, as `HeaderMap::insert` does; a value a
//! `HeaderValue` would refuse is left out, as the map's sink leaves it out.

use sluicegate_core::render::{self, Header, HeaderSet, HeaderSink, Value};
use sluicegate_core::{SystemClock, Verdict};

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
    let mut lines = Lines {
        start: out.len(),
        out,
        policy_field,
        written: [None; SLOTS],
        count: 0,
    };
    render::write_headers(sets, verdict, &SystemClock, &mut lines);
}

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
    use sluicegate_core::{AlgorithmKind, CheckRequest, MemoryStore, Policy};
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
