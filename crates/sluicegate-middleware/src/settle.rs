//! Response-aware routes: what a route does once the upstream has answered.
//!
//! - `cost`: the estimate charged when the request arrives (default 1);
//! - `settle = "header:<name>"`: the upstream reports the real cost in a response header,
//!   removed before the client sees it;
//! - `settle = "openai-usage"`: the real cost is `usage.total_tokens` of a JSON body, or of
//!   the final event of a `text/event-stream` body, read while the body streams by
//!   ([`UsageScanner`]: a few bytes of memory, nothing buffered, nothing delayed);
//! - `count = "failures" | "successes"`: requests that do not count (status < 400, or
//!   >= 400) are given back after the response.
//!
//! Each ends in one [`Store::settle`] of the policies the request consumed from, with the
//! rules of `Algorithm::settle` (never more permissive than charging the real cost upfront).
//! Without a settle source, or when the upstream reports nothing usable, the estimate stays.

use std::str::FromStr;
use std::sync::Arc;

use http::{HeaderMap, HeaderName, StatusCode};
use sluicegate_core::{Micros, Policy, Settlement, Store, Verdict};

/// Where a route's real cost comes from (`settle`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SettleFrom {
    /// A response header holding a whole number (removed from the response).
    Header(HeaderName),
    /// `usage.total_tokens` of an OpenAI-style JSON or server-sent-events body.
    OpenAiUsage,
}

impl FromStr for SettleFrom {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        if s == "openai-usage" {
            return Ok(SettleFrom::OpenAiUsage);
        }
        match s.strip_prefix("header:") {
            Some(name) => HeaderName::from_str(&name.to_ascii_lowercase())
                .map(SettleFrom::Header)
                .map_err(|_| format!("settle: {name:?} is not a header name")),
            None => Err(format!(
                "settle must be \"header:<name>\" or \"openai-usage\", got {s:?}"
            )),
        }
    }
}

/// Which requests count (`count`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Count {
    /// Every request.
    #[default]
    All,
    /// Only failures (status >= 400); successes are given back.
    Failures,
    /// Only successes (status < 400); failures are given back.
    Successes,
}

impl FromStr for Count {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "all" => Ok(Count::All),
            "failures" => Ok(Count::Failures),
            "successes" => Ok(Count::Successes),
            other => Err(format!(
                "count must be all, failures or successes, got {other:?}"
            )),
        }
    }
}

impl Count {
    /// Whether a response with `status` counts.
    pub fn counts(self, status: StatusCode) -> bool {
        let failure = status.as_u16() >= 400;
        match self {
            Count::All => true,
            Count::Failures => failure,
            Count::Successes => !failure,
        }
    }
}

/// A route's after-the-response rules.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AfterResponse {
    /// Where the real cost comes from, if anywhere.
    pub settle: Option<SettleFrom>,
    /// Which responses count.
    pub count: Count,
}

impl AfterResponse {
    /// Whether anything happens after the response.
    pub fn is_active(&self) -> bool {
        self.settle.is_some() || self.count != Count::All
    }
}

/// The real cost of one admitted request, to settle once.
pub struct Settler {
    store: Arc<dyn Store>,
    policies: Vec<Arc<Policy>>,
    remaining: Vec<u64>,
    key: String,
    estimate: u64,
    at: Micros,
}

impl std::fmt::Debug for Settler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Settler")
            .field("key", &self.key)
            .field("estimate", &self.estimate)
            .finish_non_exhaustive()
    }
}

impl Settler {
    /// The settler of an admitted `verdict` of `estimate` for `key`: the policies it
    /// consumed from (concurrency aside). `None` when there is nothing to settle (denied,
    /// decided without a store, nothing consumed).
    pub fn of(store: Arc<dyn Store>, verdict: &Verdict, key: &str, estimate: u64) -> Option<Self> {
        if !verdict.allowed || verdict.at == 0 || estimate == 0 {
            return None;
        }
        let (policies, remaining): (Vec<_>, Vec<_>) = verdict
            .decisions
            .iter()
            .enumerate()
            .filter(|(i, d)| verdict.consumes(*i) && !d.policy.algorithm().is_concurrency())
            .map(|(_, d)| (Arc::clone(&d.policy), d.decision.remaining))
            .unzip();
        (!policies.is_empty()).then(|| Settler {
            store,
            policies,
            remaining,
            key: key.to_owned(),
            estimate,
            at: verdict.at,
        })
    }

    /// Sets the real cost, in a spawned task (a response never waits for it).
    pub fn settle(self, real: u64) {
        if real == self.estimate {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return; // no runtime (a body dropped by hand in a test): the estimate stays
        };
        runtime.spawn(async move {
            let settlement = Settlement {
                policies: &self.policies,
                remaining: &self.remaining,
                key: &self.key,
                estimate: self.estimate,
                real,
                admitted_at: self.at,
                // Settled once by construction: no one-time marker, no expiry.
                expires_at: Micros::MAX,
                id: "",
            };
            if let Err(error) = self.store.settle(settlement).await {
                tracing::debug!(%error, "could not settle a request's real cost; the estimate stays");
            }
        });
    }

    /// The rules of `after` applied to the response head: gives back a request that does
    /// not count, settles from a header (removing it), or returns the tap that reads the
    /// body's usage as it streams by.
    pub fn on_head(
        self,
        after: &AfterResponse,
        status: StatusCode,
        headers: &mut HeaderMap,
    ) -> Option<UsageTap> {
        if !after.count.counts(status) {
            if let Some(SettleFrom::Header(name)) = &after.settle {
                headers.remove(name);
            }
            self.settle(0);
            return None;
        }
        match &after.settle {
            None => None,
            Some(SettleFrom::Header(name)) => {
                let real = headers
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .and_then(|v| v.trim().parse::<u64>().ok());
                headers.remove(name);
                if let Some(real) = real {
                    self.settle(real);
                }
                None
            }
            Some(SettleFrom::OpenAiUsage) => Some(UsageTap {
                settler: Some(self),
                scanner: UsageScanner::default(),
            }),
        }
    }
}

/// Reads `usage.total_tokens` from a body as it streams by and settles it when the body
/// ends or is dropped (the last value seen; nothing seen: the estimate stays).
#[derive(Debug)]
pub struct UsageTap {
    settler: Option<Settler>,
    scanner: UsageScanner,
}

impl UsageTap {
    /// Looks at one chunk of the body.
    pub fn feed(&mut self, chunk: &[u8]) {
        self.scanner.feed(chunk);
    }

    /// The body ended: settle now.
    pub fn finish(&mut self) {
        if let (Some(real), Some(settler)) = (self.scanner.total(), self.settler.take()) {
            settler.settle(real);
        }
    }
}

impl Drop for UsageTap {
    fn drop(&mut self) {
        self.finish();
    }
}

const NEEDLE: &[u8] = b"\"total_tokens\"";
/// Longest tail kept between chunks: the needle, some spaces, a colon and 20 digits.
const MAX_CARRY: usize = 64;

/// Finds the last `"total_tokens": <number>` of a stream of chunks, in bounded memory: at
/// most [`MAX_CARRY`] bytes are kept between chunks, so a needle or number cut by a chunk
/// boundary is still found. A JSON completion has one `usage` object; a stream of
/// server-sent events carries it in its final event; the last value seen wins.
#[derive(Debug, Default, Clone)]
pub struct UsageScanner {
    carry: Vec<u8>,
    last: Option<u64>,
}

impl UsageScanner {
    /// The last complete value seen.
    pub fn total(&self) -> Option<u64> {
        self.last
    }

    /// Scans one more chunk.
    pub fn feed(&mut self, chunk: &[u8]) {
        let mut buf = std::mem::take(&mut self.carry);
        buf.extend_from_slice(chunk);
        let mut from = 0;
        let mut keep_from = buf.len().saturating_sub(NEEDLE.len() - 1);
        while let Some(at) = find(&buf[from..], NEEDLE).map(|i| i + from) {
            match number_after(&buf[at + NEEDLE.len()..]) {
                Value::Found(n) => self.last = Some(n),
                Value::Incomplete => {
                    keep_from = at;
                    break;
                }
                Value::Not => {}
            }
            from = at + 1;
        }
        if buf.len() - keep_from <= MAX_CARRY {
            self.carry = buf[keep_from..].to_vec();
        }
    }
}

enum Value {
    Found(u64),
    Incomplete,
    Not,
}

/// `<spaces> : <spaces> <digits>` followed by something else.
fn number_after(rest: &[u8]) -> Value {
    let mut i = 0;
    let spaces = |i: &mut usize| {
        while rest.get(*i).is_some_and(u8::is_ascii_whitespace) {
            *i += 1;
        }
    };
    spaces(&mut i);
    match rest.get(i) {
        None => return Value::Incomplete,
        Some(b':') => i += 1,
        Some(_) => return Value::Not,
    }
    spaces(&mut i);
    let start = i;
    while rest.get(i).is_some_and(u8::is_ascii_digit) {
        i += 1;
    }
    if i == rest.len() {
        return Value::Incomplete;
    }
    if i == start {
        return Value::Not;
    }
    std::str::from_utf8(&rest[start..i])
        .ok()
        .and_then(|d| d.parse().ok())
        .map_or(Value::Not, Value::Found)
}

fn find(haystack: &[u8], needle: &[u8]) -> Option<usize> {
    haystack.windows(needle.len()).position(|w| w == needle)
}

/// Checks a route's `cost` against its policies: at least 1, and admissible by each.
pub fn check_cost(cost: u64, policies: &[Arc<Policy>]) -> Result<(), String> {
    if cost == 0 {
        return Err("cost must be at least 1".into());
    }
    for p in policies {
        if cost > p.capacity() {
            return Err(format!(
                "cost {cost} can never be admitted by policy {:?}, whose capacity is {}",
                p.name(),
                p.capacity()
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(chunks: &[&[u8]]) -> Option<u64> {
        let mut s = UsageScanner::default();
        for c in chunks {
            s.feed(c);
        }
        s.total()
    }

    #[test]
    fn finds_the_usage_of_json_and_event_streams_across_any_chunking() {
        let json = br#"{"id":"x","choices":[{"message":{"content":"total_tokens"}}],"usage":{"prompt_tokens":12,"completion_tokens":30,"total_tokens": 42}}"#;
        let sse = b"data: {\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}\n\ndata: {\"choices\":[],\"usage\":{\"prompt_tokens\":5,\"completion_tokens\":7,\"total_tokens\":12345}}\n\ndata: [DONE]\n\n";
        for (body, want) in [(&json[..], 42), (&sse[..], 12345)] {
            assert_eq!(scan(&[body]), Some(want));
            // Every split into two, and byte by byte.
            for cut in 0..body.len() {
                assert_eq!(scan(&[&body[..cut], &body[cut..]]), Some(want), "cut {cut}");
            }
            let bytes: Vec<&[u8]> = body.chunks(1).collect();
            assert_eq!(scan(&bytes), Some(want));
        }
        assert_eq!(scan(&[b"{\"usage\":null}"]), None);
        assert_eq!(scan(&[b"\"total_tokens\": \"x\""]), None);
        // A huge body without usage keeps a bounded tail only.
        let mut s = UsageScanner::default();
        for _ in 0..1000 {
            s.feed(&[b'a'; 4096]);
        }
        assert!(s.carry.len() <= MAX_CARRY);
    }

    #[test]
    fn parses_settle_and_count() {
        assert_eq!(
            "header:X-Cost".parse::<SettleFrom>(),
            Ok(SettleFrom::Header(HeaderName::from_static("x-cost")))
        );
        assert_eq!(
            "openai-usage".parse::<SettleFrom>(),
            Ok(SettleFrom::OpenAiUsage)
        );
        assert!("body".parse::<SettleFrom>().is_err());
        assert!("header:bad name".parse::<SettleFrom>().is_err());
        assert_eq!("failures".parse::<Count>(), Ok(Count::Failures));
        assert!("some".parse::<Count>().is_err());
        assert!(Count::Failures.counts(StatusCode::BAD_GATEWAY));
        assert!(!Count::Failures.counts(StatusCode::OK));
        assert!(Count::Successes.counts(StatusCode::FOUND));
    }
}
