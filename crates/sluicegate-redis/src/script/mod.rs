//! The one Lua entry script and its wire format.
//!
//! Each algorithm lives in its own `.lua` file next to this one; they are concatenated at
//! build time after `common.lua` (shared arithmetic) and before `entry.lua` (the
//! dispatcher), so one `EVALSHA` decides any mix of algorithms and policies atomically.
//! `redis::Script` sends `EVALSHA` and, on `NOSCRIPT` (a restarted or flushed server),
//! loads the script and retries.

use std::sync::Arc;

use redis::{Script, ScriptInvocation};
use sluicegate_core::{Decision, Micros, Policy, StoreError, Verdict};

use crate::range::Params;

/// The entry script from its parts: shared helpers, the seven algorithms, the clock, the
/// dispatcher; `$clock` is the clock file(s).
macro_rules! entry_source {
    ($($clock:literal),+) => { entry_source!(@ "entry.lua"; $($clock),+) };
    (@ $entry:literal; $($clock:literal),+) => {
        concat!(
            include_str!("common.lua"),
            "\n",
            include_str!("fixed_window.lua"),
            "\n",
            include_str!("sliding_log.lua"),
            "\n",
            include_str!("sliding_window.lua"),
            "\n",
            include_str!("token_bucket.lua"),
            "\n",
            include_str!("leaky_bucket.lua"),
            "\n",
            include_str!("gcra.lua"),
            "\n",
            include_str!("concurrency.lua"),
            "\n",
            $(include_str!($clock), "\n",)+
            include_str!($entry),
        )
    };
}

/// The entry script. The time is always the Redis server's `TIME` (`clock.lua`).
#[cfg(not(feature = "test-util"))]
pub(crate) const SOURCE: &str = entry_source!("clock.lua");

/// The entry script of test builds: `test_clock.lua` also accepts a caller's time, for the
/// differential tests. The `test-util` feature is enabled by dev-dependencies only.
#[cfg(feature = "test-util")]
pub(crate) const SOURCE: &str = entry_source!("clock.lua", "test_clock.lua");

/// The settle script (reserve then settle, `settle.lua`): the same algorithms and clock.
#[cfg(not(feature = "test-util"))]
pub(crate) const SETTLE_SOURCE: &str = entry_source!(@ "settle.lua"; "clock.lua");

/// The settle script of test builds (see [`SOURCE`]).
#[cfg(feature = "test-util")]
pub(crate) const SETTLE_SOURCE: &str = entry_source!(@ "settle.lua"; "clock.lua", "test_clock.lua");

/// The compiled settle script.
pub(crate) fn settle_script() -> Script {
    Script::new(SETTLE_SOURCE)
}

/// One settle script call: `marker` is the reservation's one-time key, `items` the
/// policies' state keys with each policy's `remaining` after admission.
pub(crate) fn settle_invocation<'s>(
    script: &'s Script,
    now: Option<Micros>,
    marker: &str,
    items: &[(Item, u64)],
    s: &sluicegate_core::Settlement<'_>,
) -> ScriptInvocation<'s> {
    let mut inv = script.prepare_invoke();
    match now {
        Some(now) => inv.arg(now),
        None => inv.arg(""),
    };
    // Beyond 2^50 over the estimate every rule's cap decides; the scripts stay exact.
    let real = s
        .real
        .min(s.estimate.saturating_add(crate::range::EXACT_BOUND));
    inv.key(marker);
    if s.id.is_empty() {
        inv.arg("");
    } else {
        inv.arg(s.expires_at);
    }
    inv.arg(s.admitted_at).arg(s.estimate).arg(real);
    let host_now =
        now.unwrap_or_else(|| sluicegate_core::Clock::now(&sluicegate_core::SystemClock));
    for (item, remaining) in items {
        let p = &item.params;
        inv.key(&item.key)
            .arg(p.code)
            .arg(p.limit)
            .arg(p.period)
            .arg(p.burst)
            .arg(*remaining)
            .arg(item.policy.limit())
            .arg(item.policy.period())
            .arg(crate::keys::zone_tag(&item.policy));
        let bounds = calendar_bounds(&item.policy, host_now);
        inv.arg(bounds.len());
        for b in bounds {
            inv.arg(b);
        }
    }
    inv
}

/// Integers the script returns per item of a check.
const REPLY_WIDTH: usize = 7;

/// The compiled entry script (its SHA1 is computed once).
pub(crate) fn entry_script() -> Script {
    Script::new(SOURCE)
}

/// One policy of one request, ready to send.
#[derive(Debug, Clone)]
pub(crate) struct Item {
    pub policy: Arc<Policy>,
    pub key: String,
    pub cost: u64,
    pub params: Params,
}

/// What the script should do with the requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Op {
    Check,
    Refund,
}

/// Builds one script call carrying `requests` requests. Each distinct policy is sent once,
/// however many requests of a batch use it; items refer to it by index.
pub(crate) fn invocation<'s>(
    script: &'s Script,
    now: Option<Micros>,
    op: Op,
    requests: &[&[Item]],
) -> ScriptInvocation<'s> {
    let mut inv = script.prepare_invoke();
    match now {
        Some(now) => inv.arg(now),
        None => inv.arg(""),
    };
    inv.arg(match op {
        Op::Check => "check",
        Op::Refund => "refund",
    });
    // Distinct policies, by identity first (the common case: one shared Arc), by value else.
    let mut distinct: Vec<&Item> = Vec::new();
    let mut index = Vec::with_capacity(requests.iter().map(|r| r.len()).sum());
    for item in requests.iter().flat_map(|items| items.iter()) {
        let found = distinct.iter().position(|d| {
            Arc::ptr_eq(&d.policy, &item.policy)
                || (d.params == item.params && d.policy.mode() == item.policy.mode())
        });
        index.push(match found {
            Some(i) => i + 1,
            None => {
                distinct.push(item);
                distinct.len()
            }
        });
    }
    inv.arg(distinct.len());
    // Calendar windows are computed here, where the time-zone database is; the script
    // places its own clock's time among them (see `calendar_bounds`).
    let host_now =
        now.unwrap_or_else(|| sluicegate_core::Clock::now(&sluicegate_core::SystemClock));
    for item in &distinct {
        let p = &item.params;
        inv.arg(p.code)
            .arg(u8::from(!item.policy.is_enforcing()))
            .arg(p.limit)
            .arg(p.period)
            .arg(p.burst)
            .arg(p.max_delay)
            .arg(p.penalty)
            .arg(item.policy.limit())
            .arg(item.policy.period())
            .arg(crate::keys::zone_tag(&item.policy));
        let bounds = calendar_bounds(&item.policy, host_now);
        inv.arg(bounds.len());
        for b in bounds {
            inv.arg(b);
        }
    }
    inv.arg(requests.len());
    let mut index = index.into_iter();
    for items in requests {
        inv.arg(items.len());
        for item in *items {
            inv.key(&item.key);
            inv.arg(index.next().unwrap_or(1)).arg(item.cost);
        }
    }
    inv
}

/// For a calendar policy, the boundaries of the window holding `now` (this host's time),
/// of the one before and of the one after: the script decides with the Redis server's
/// clock, which may differ from this host's by anything short of a whole window (a day at
/// least) and still falls among them. Empty for other policies.
fn calendar_bounds(policy: &Policy, now: Micros) -> Vec<Micros> {
    policy
        .calendar()
        .and_then(|c| c.boundaries(now, 1, 1))
        .unwrap_or_default()
}

fn bad_reply(what: &str) -> StoreError {
    StoreError::Internal(format!("unexpected reply from the Redis script: {what}"))
}

/// Turns the script's reply into one verdict per request, in order.
pub(crate) fn verdicts(requests: &[&[Item]], reply: &[i64]) -> Result<Vec<Verdict>, StoreError> {
    let expected: usize = requests
        .iter()
        .map(|r| r.len() * REPLY_WIDTH)
        .sum::<usize>()
        + 1;
    if reply.len() != expected {
        return Err(bad_reply(&format!(
            "{} integers, expected {expected}",
            reply.len()
        )));
    }
    // The script's time closes the reply.
    let at = u64::try_from(reply[expected - 1]).map_err(|_| bad_reply("negative time"))?;
    let mut chunks = reply[..expected - 1].chunks_exact(REPLY_WIDTH);
    let mut out = Vec::with_capacity(requests.len());
    for items in requests {
        let mut decided = Vec::with_capacity(items.len());
        for item in *items {
            let v = chunks.next().ok_or_else(|| bad_reply("too short"))?;
            let num = |x: i64| u64::try_from(x).map_err(|_| bad_reply("negative number"));
            // The limit that applied: the key's override's, else the policy's.
            let limit = num(v[6])?;
            let decision = if v[0] == 1 {
                Decision {
                    delay: num(v[4])?,
                    lease: num(v[5])?,
                    ..Decision::allow(limit, num(v[1])?, num(v[2])?)
                }
            } else {
                Decision::deny(limit, num(v[1])?, num(v[2])?, num(v[3])?)
            };
            decided.push((Arc::clone(&item.policy), decision, item.cost));
        }
        let mut verdict = Verdict::combine(decided);
        verdict.at = at;
        out.push(verdict);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn source_has_every_part() {
        for name in [
            "local function fixed_window",
            "local function sliding_log",
            "local function sliding_window",
            "local function token_bucket",
            "local function leaky_bucket",
            "local function gcra",
            "local function concurrency",
            "local CONSTRUCTORS",
            "MGET",
        ] {
            assert!(SOURCE.contains(name), "{name} missing");
        }
        assert!(SETTLE_SOURCE.contains("function M.settle"));
        assert!(SETTLE_SOURCE.contains("'NX'"));
    }
}
