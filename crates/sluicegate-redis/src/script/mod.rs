//! The one Lua entry script and its wire format.
//!
//! Each algorithm lives in its own `.lua` file next to this one; they are concatenated at
//! build time after `common.lua` (shared arithmetic) and before `entry.lua` (the
//! dispatcher), so one `EVALSHA` decides any mix of algorithms and policies atomically.
//! [`Call`] (the decisions) and `redis::Script` (the settle script) send `EVALSHA` and, on
//! `NOSCRIPT` (a restarted or flushed server), load the script and retry.

use std::collections::HashSet;
use std::sync::Arc;

use redis::aio::ConnectionLike;
use redis::{
    Cmd, ErrorKind, FromRedisValue, RedisResult, Script, ScriptInvocation, ServerErrorKind,
};
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

/// Integers of an item's full reply (see entry.lua; the short form has 2).
const FULL_WIDTH: usize = 7;

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

/// One call of the entry script, ready to send: a plain `EVALSHA` command (one buffer for
/// all its arguments, where `redis::ScriptInvocation` keeps each in its own allocation and
/// copies them all again to send them), loading the script on `NOSCRIPT` like
/// `ScriptInvocation`.
pub(crate) struct Call<'s> {
    script: &'s Script,
    cmd: Cmd,
}

impl Call<'_> {
    /// Sends the call; on `NOSCRIPT` (a restarted or flushed server) loads the script and
    /// sends it again.
    pub(crate) async fn invoke_async<T: FromRedisValue>(
        &self,
        conn: &mut impl ConnectionLike,
    ) -> RedisResult<T> {
        match self.cmd.query_async(conn).await {
            Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                self.script.load_async(conn).await?;
                self.cmd.query_async(conn).await
            }
            other => other,
        }
    }
}

/// Builds one script call carrying `requests` requests. Each distinct policy is sent once,
/// however many requests of a batch use it; items refer to it by index. `flag`: the store's
/// override flag key (standalone), with which the script skips reading overrides while
/// none can exist (see `overrides.rs`).
pub(crate) fn invocation<'s>(
    script: &'s Script,
    now: Option<Micros>,
    op: Op,
    requests: &[&[Item]],
    flag: Option<&str>,
) -> Call<'s> {
    let (distinct, index) = distinct_policies(requests);
    let mut cmd = redis::cmd("EVALSHA");
    cmd.arg(script.get_hash())
        .arg(index.len() + usize::from(flag.is_some()));
    for item in requests.iter().flat_map(|items| items.iter()) {
        cmd.arg(&item.key);
    }
    if let Some(flag) = flag {
        cmd.arg(flag);
    }
    match now {
        Some(now) => cmd.arg(now),
        None => cmd.arg(""),
    };
    let mut op = String::from(match op {
        Op::Check => "check",
        Op::Refund => "refund",
    });
    if flag.is_some() {
        op.push('+');
    }
    if unique_keys(requests) {
        op.push('!');
    }
    cmd.arg(op);
    cmd.arg(distinct.len());
    // Calendar windows are computed here, where the time-zone database is; the script
    // places its own clock's time among them (see `calendar_bounds`).
    let host_now =
        now.unwrap_or_else(|| sluicegate_core::Clock::now(&sluicegate_core::SystemClock));
    for item in &distinct {
        let p = &item.params;
        cmd.arg(p.code)
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
        cmd.arg(bounds.len());
        for b in bounds {
            cmd.arg(b);
        }
    }
    cmd.arg(requests.len());
    match uniform(requests, &index) {
        // Every request is one item of one policy and cost: those are sent once.
        Some((policy, cost)) => {
            cmd.arg(policy).arg(cost);
        }
        None => {
            cmd.arg(0);
            let mut index = index.into_iter();
            for items in requests {
                cmd.arg(items.len());
                for item in *items {
                    cmd.arg(index.next().unwrap_or(1)).arg(item.cost);
                }
            }
        }
    }
    Call { script, cmd }
}

/// Whether no state key appears twice among the items of a call: the script then does not
/// keep its writes to read them back (UNIQUE in common.lua). Costs this process a hash of
/// each key, which saves Redis more: a table write and a lookup a decision.
fn unique_keys(requests: &[&[Item]]) -> bool {
    let n = requests.iter().map(|items| items.len()).sum::<usize>();
    if n < 2 {
        return true;
    }
    let mut seen: HashSet<&str, foldhash::fast::RandomState> =
        HashSet::with_capacity_and_hasher(n, foldhash::fast::RandomState::default());
    requests
        .iter()
        .flat_map(|items| items.iter())
        .all(|item| seen.insert(item.key.as_str()))
}

/// The distinct policies of a call, by identity first (the common case: one shared `Arc`),
/// by value else; and for each item, its policy's 1-based index among them.
fn distinct_policies<'i>(requests: &[&'i [Item]]) -> (Vec<&'i Item>, Vec<usize>) {
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
    (distinct, index)
}

/// The policy index and cost shared by every request of a call, if each is one item of the
/// same policy and cost (the common batch): the script then reads them once.
fn uniform(requests: &[&[Item]], index: &[usize]) -> Option<(usize, u64)> {
    let first = requests.first()?.first()?;
    let same = requests
        .iter()
        .zip(index)
        .all(|(items, &i)| items.len() == 1 && i == index[0] && items[0].cost == first.cost);
    same.then_some((index[0], first.cost))
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
    // The script's time closes the reply.
    let (&at, mut rest) = reply.split_last().ok_or_else(|| bad_reply("empty"))?;
    let at = u64::try_from(at).map_err(|_| bad_reply("negative time"))?;
    let mut out = Vec::with_capacity(requests.len());
    for items in requests {
        let mut decided = Vec::with_capacity(items.len());
        for item in *items {
            let (decision, tail) = decision(item, rest)?;
            rest = tail;
            decided.push((Arc::clone(&item.policy), decision, item.cost));
        }
        let mut verdict = Verdict::combine(decided);
        verdict.at = at;
        out.push(verdict);
    }
    if !rest.is_empty() {
        return Err(bad_reply(&format!("{} integers too many", rest.len())));
    }
    Ok(out)
}

/// One item's decision from the front of `reply`, and what follows it.
fn decision<'r>(item: &Item, reply: &'r [i64]) -> Result<(Decision, &'r [i64]), StoreError> {
    let num = |x: i64| u64::try_from(x).map_err(|_| bad_reply("negative number"));
    match *reply {
        // The short form: admitted without delay or lease under the policy's own limit.
        [first, reset, ..] if first < 0 => {
            let remaining = num(-1 - first)?;
            let decision = Decision::allow(item.policy.limit(), remaining, num(reset)?);
            Ok((decision, &reply[2..]))
        }
        [ok, remaining, reset, retry, delay, lease, limit, ..] => {
            // The limit that applied: the key's override's, else the policy's.
            let limit = num(limit)?;
            let decision = if ok == 1 {
                Decision {
                    delay: num(delay)?,
                    lease: num(lease)?,
                    ..Decision::allow(limit, num(remaining)?, num(reset)?)
                }
            } else {
                Decision::deny(limit, num(remaining)?, num(reset)?, num(retry)?)
            };
            Ok((decision, &reply[FULL_WIDTH..]))
        }
        _ => Err(bad_reply("too short")),
    }
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
