//! The common `/v1/check` answer, one policy without lease or reservation, written as JSON
//! by hand: the same bytes serde writes for [`CheckResponse`], without building the
//! response (a `String` for the policy's name) or serde's machinery (about 2,000
//! instructions a request, docs/benchmarks/server.md). Every other answer is serde's.

use sluicegate_core::Verdict;

use super::types::{CheckResponse, ms};

/// The top-level fields of an answer, borrowed from its verdict: the one place that says
/// which policy decides and which numbers an answer shows ([`CheckResponse::from_verdict`]
/// starts from it too).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Answer<'a> {
    /// Whether the request goes ahead.
    pub allowed: bool,
    /// The deciding policy's name.
    pub policy: &'a str,
    /// Its limit.
    pub limit: u64,
    /// Its remaining requests.
    pub remaining: u64,
    /// Its reset time, ms.
    pub reset_after_ms: u64,
    /// When denied: the longest wait among the denying policies, ms.
    pub retry_after_ms: Option<u64>,
    /// Delay mode only: how long to wait before going ahead, ms.
    pub delay_ms: Option<u64>,
}

impl<'a> Answer<'a> {
    /// The fields of `verdict`'s answer; `None` when no policy decided it.
    pub fn from_verdict(verdict: &'a Verdict) -> Option<Self> {
        let deciding = verdict.deciding()?;
        Some(Answer {
            allowed: verdict.allowed,
            policy: deciding.policy.name(),
            limit: deciding.decision.limit,
            remaining: deciding.decision.remaining,
            reset_after_ms: ms(deciding.decision.reset_after),
            retry_after_ms: if verdict.allowed {
                None
            } else {
                verdict.retry_after().map(ms)
            },
            delay_ms: (verdict.allowed && verdict.delay > 0).then(|| ms(verdict.delay)),
        })
    }

    /// The answer as serde would serialise it, with no `policies`, `lease` or
    /// `reservation` (those answers go through serde).
    pub fn response(&self) -> CheckResponse {
        CheckResponse {
            allowed: self.allowed,
            policy: self.policy.to_owned(),
            limit: self.limit,
            remaining: self.remaining,
            reset_after_ms: self.reset_after_ms,
            retry_after_ms: self.retry_after_ms,
            delay_ms: self.delay_ms,
            policies: None,
            lease: None,
            reservation: None,
        }
    }

    /// Appends the JSON of [`Answer::response`] to `out`: the fields in the struct's order,
    /// no spaces, `null` for no retry, `delay_ms` only when set (serde's output exactly;
    /// tested against it).
    pub fn write_json(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(if self.allowed {
            b"{\"allowed\":true,\"policy\":"
        } else {
            b"{\"allowed\":false,\"policy\":"
        });
        write_str(out, self.policy);
        out.extend_from_slice(b",\"limit\":");
        write_u64(out, self.limit);
        out.extend_from_slice(b",\"remaining\":");
        write_u64(out, self.remaining);
        out.extend_from_slice(b",\"reset_after_ms\":");
        write_u64(out, self.reset_after_ms);
        out.extend_from_slice(b",\"retry_after_ms\":");
        match self.retry_after_ms {
            Some(retry) => write_u64(out, retry),
            None => out.extend_from_slice(b"null"),
        }
        if let Some(delay) = self.delay_ms {
            out.extend_from_slice(b",\"delay_ms\":");
            write_u64(out, delay);
        }
        out.push(b'}');
    }
}

fn write_u64(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

/// A JSON string. Policy names are `[A-Za-z0-9_.-]+` and copied as they are; anything
/// serde would escape (a quote, a backslash, a control character) is left to serde.
fn write_str(out: &mut Vec<u8>, s: &str) {
    let plain = s.bytes().all(|b| b >= 0x20 && b != b'"' && b != b'\\');
    if plain {
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else if serde_json::to_writer(&mut *out, s).is_err() {
        // Writing a string into a Vec cannot fail; an empty string keeps the JSON valid.
        out.extend_from_slice(b"\"\"");
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn answers() -> impl Strategy<Value = (bool, String, [u64; 3], Option<u64>, Option<u64>)> {
        (
            any::<bool>(),
            // Any text, control characters, quotes, backslashes and non-ASCII included.
            prop_oneof![
                any::<String>(),
                "[A-Za-z0-9_.-]{1,20}",
                "[\"\\\\\u{0}-\u{1f}a\u{e9}]{0,8}"
            ],
            any::<[u64; 3]>(),
            any::<Option<u64>>(),
            any::<Option<u64>>(),
        )
    }

    proptest! {
        #[test]
        fn hand_written_json_is_serdes((allowed, name, [limit, remaining, reset], retry, delay) in answers()) {
            let answer = Answer {
                allowed,
                policy: &name,
                limit,
                remaining,
                reset_after_ms: reset,
                retry_after_ms: retry,
                delay_ms: delay,
            };
            let mut ours = Vec::new();
            answer.write_json(&mut ours);
            let serde = serde_json::to_vec(&answer.response()).expect("serialisable");
            prop_assert_eq!(String::from_utf8_lossy(&ours), String::from_utf8_lossy(&serde));
        }
    }

    #[test]
    fn edge_numbers_and_escapes_match_serde() {
        for name in [
            "bench",
            "a\"b",
            "back\\slash",
            "tab\there",
            "\u{1}\u{1f}",
            "é€😀",
            "",
        ] {
            for n in [0, 1, 9, 10, u64::MAX] {
                let answer = Answer {
                    allowed: n % 2 == 0,
                    policy: name,
                    limit: n,
                    remaining: n,
                    reset_after_ms: n,
                    retry_after_ms: Some(n),
                    delay_ms: (n > 0).then_some(n),
                };
                let mut ours = Vec::new();
                answer.write_json(&mut ours);
                assert_eq!(ours, serde_json::to_vec(&answer.response()).unwrap());
            }
        }
    }
}
