//! One exchange of a [`SyncedStore`](super::SyncedStore): every entry decided on in the last
//! [`KEEP_FRESH`] exchanges (or holding unsent admissions) adds its delta to Redis and reads
//! the fleet's count back (`script/sync.lua`).
//!
//! Its cost is fixed per interval and per key in use, whatever the decision rate, so on a
//! process given a fraction of a core it decides how much is left for deciding
//! (docs/benchmarks/redis.md). So the window keys are written back to back into one buffer
//! kept from one exchange to the next (no allocation per key), each entry is visited once
//! per exchange (the idle ones dropped in the same pass), and the writes and the reads of
//! a call are gathered apart instead of sorted.

use std::collections::HashMap;
use std::ops::Range;
use std::sync::atomic::Ordering;

use futures_util::future::join_all;
use parking_lot::MutexGuard;
use redis::cluster_routing::Slot;
use redis::{Cmd, ErrorKind, ServerErrorKind, Value};
use sluicegate_core::{Micros, StoreError};

use super::state::Shard;
use super::{METRIC_SYNC, Synced};

/// Exchanges that keep refreshing a key after its last decision: a key used at least this
/// often (once a second at `sync = "100ms"`) never waits for a read of Redis, and Redis's
/// work per exchange is bounded by the keys used in the last `KEEP_FRESH` intervals.
const KEEP_FRESH: u64 = 10;
/// Window counts per script call: large enough to amortise the call, small enough that
/// one call never blocks Redis for long.
const EXCHANGE_CHUNK: usize = 512;

/// What one exchange sends, in buffers reused by the next one.
#[derive(Default)]
pub(super) struct Round {
    /// Every window key, `<state key>:sync:<period µs>:<window index>`, back to back.
    keys: Vec<u8>,
    windows: Vec<Sent>,
}

/// One window's shared count in an exchange, and the entry its answer goes to.
struct Sent {
    /// Its key is `keys[start..end]`, the entry's state key `keys[start..base_end]`.
    start: usize,
    base_end: usize,
    end: usize,
    shard: usize,
    index: u64,
    delta: u64,
    ttl_ms: u64,
}

/// The script calls of an exchange: per hash slot (one on a standalone server) and TTL
/// (one per period), at most [`EXCHANGE_CHUNK`] windows, those with a delta first (the
/// script's order).
struct Call {
    ttl_ms: u64,
    writes: Vec<u32>,
    reads: Vec<u32>,
}

impl Call {
    fn len(&self) -> usize {
        self.writes.len() + self.reads.len()
    }

    fn windows(&self) -> impl Iterator<Item = usize> + '_ {
        self.writes.iter().chain(&self.reads).map(|&i| i as usize)
    }
}

/// Appends `<base>:sync:<period>:<index>`, the shared count of one window, to `out`.
pub(super) fn push_window_key(out: &mut Vec<u8>, base: &[u8], period: Micros, index: u64) {
    let suffix = Suffix::new(period, index);
    out.reserve(base.len() + suffix.len);
    out.extend_from_slice(base);
    out.extend_from_slice(suffix.bytes());
}

/// `:sync:<period>:<index>`, the part of a window key after the state key. An exchange
/// writes one per key, and the keys of one policy share it (their current window is the
/// same): formatting it once per exchange and policy instead of per key was a fifth of the
/// exchange's instructions.
struct Suffix {
    period: Micros,
    index: u64,
    len: usize,
    text: [u8; 6 + 20 + 1 + 20],
}

impl Suffix {
    fn new(period: Micros, index: u64) -> Suffix {
        let mut text = [0u8; 47];
        text[..6].copy_from_slice(b":sync:");
        let mut len = 6;
        let mut digits = itoa::Buffer::new();
        for (i, n) in [period, index].into_iter().enumerate() {
            if i == 1 {
                text[len] = b':';
                len += 1;
            }
            let formatted = digits.format(n).as_bytes();
            text[len..len + formatted.len()].copy_from_slice(formatted);
            len += formatted.len();
        }
        Suffix {
            period,
            index,
            len,
            text,
        }
    }

    fn bytes(&self) -> &[u8] {
        &self.text[..self.len]
    }
}

/// The suffixes an exchange has formatted, the last few (a policy's keys share one or two).
#[derive(Default)]
struct Suffixes {
    recent: Vec<Suffix>,
}

impl Suffixes {
    const KEPT: usize = 4;

    fn get(&mut self, period: Micros, index: u64) -> &[u8] {
        let found = self
            .recent
            .iter()
            .position(|s| s.period == period && s.index == index);
        let at = found.unwrap_or_else(|| {
            if self.recent.len() == Self::KEPT {
                self.recent.remove(0);
            }
            self.recent.push(Suffix::new(period, index));
            self.recent.len() - 1
        });
        self.recent[at].bytes()
    }
}

/// The exchange script's answer, `count,count,…` (see `sync.lua`), into `totals[i]` for
/// each window `i` of `call`, in order. A field that is not a decimal count reads as 0, as
/// the script read such a value before; a count too large for a `u64` saturates (the
/// window is full, the safe side). An answer with the wrong number of fields is an error.
fn parse_counts(
    reply: &[u8],
    windows: impl Iterator<Item = usize>,
    totals: &mut [Option<u64>],
) -> Result<(), StoreError> {
    let mut fields = reply.split(|&b| b == b',');
    for i in windows {
        let field = fields.next().ok_or_else(wrong_count)?;
        totals[i] = Some(count(field));
    }
    match fields.next() {
        None => Ok(()),
        Some(_) => Err(wrong_count()),
    }
}

fn count(field: &[u8]) -> u64 {
    if field.is_empty() || !field.iter().all(u8::is_ascii_digit) {
        return 0;
    }
    field.iter().fold(0u64, |n, &d| {
        n.saturating_mul(10).saturating_add(u64::from(d - b'0'))
    })
}

fn wrong_count() -> StoreError {
    StoreError::Internal("the sync script answered the wrong number of counts".into())
}

impl Round {
    fn key(&self, sent: &Sent) -> &[u8] {
        &self.keys[sent.start..sent.end]
    }

    fn base(&self, sent: &Sent) -> &[u8] {
        &self.keys[sent.start..sent.base_end]
    }

    fn range(&self, sent: &Sent) -> Range<usize> {
        sent.start..sent.end
    }
}

impl Synced {
    /// One exchange: every entry decided on since the last one (or holding unsent
    /// admissions) sends its delta and reads the fleet's count.
    pub(super) async fn exchange(&self) -> Result<(), StoreError> {
        let mut round = self.exchanging.lock().await;
        let now = self.clock.now();
        let number = self.completed.load(Ordering::Acquire) + 1;
        self.take_round(&mut round, now, number - 1);
        let (totals, error) = self.run(&round).await;
        self.apply_round(&round, &totals, number);
        let result = if error.is_some() { "failed" } else { "ok" };
        metrics::counter!(METRIC_SYNC, "result" => result).increment(1);
        match error {
            Some(e) => Err(e),
            None => {
                self.completed.store(number, Ordering::Release);
                Ok(())
            }
        }
    }

    /// Collects what an exchange sends (entries used in the last [`KEEP_FRESH`] exchanges
    /// or holding unsent admissions) into `round`, dropping idle entries in the same pass.
    fn take_round(&self, round: &mut Round, now: Micros, completed: u64) {
        let Round { keys, windows } = round;
        keys.clear();
        windows.clear();
        let mut lost = 0;
        let mut suffixes = Suffixes::default();
        for (s, shard) in self.shards.iter().enumerate() {
            shard.lock().map.retain(|base, entry| {
                if entry.idle(now) {
                    return false;
                }
                let recent = entry.used.saturating_add(KEEP_FRESH) >= completed;
                if !entry.dirty && !recent && !entry.has_unsent() {
                    return true;
                }
                let base = base.as_bytes();
                let ttl_ms = (entry.period / 1000).saturating_mul(2).saturating_add(1000);
                let period = entry.period;
                lost += entry.take_each(now, |carried| {
                    let start = keys.len();
                    let suffix = suffixes.get(period, carried.index);
                    keys.extend_from_slice(base);
                    keys.extend_from_slice(suffix);
                    windows.push(Sent {
                        start,
                        base_end: start + base.len(),
                        end: keys.len(),
                        shard: s,
                        index: carried.index,
                        delta: carried.delta,
                        ttl_ms,
                    });
                });
                true
            });
        }
        self.dropped(lost);
    }

    /// Applies an exchange's answers (or, where it failed, puts the deltas back).
    fn apply_round(&self, round: &Round, totals: &[Option<u64>], number: u64) {
        let mut current: Option<(usize, MutexGuard<'_, Shard>)> = None;
        for (s, total) in round.windows.iter().zip(totals) {
            // `windows` is in shard order, so locks are taken in order, one at a time.
            if current.as_ref().is_none_or(|(i, _)| *i != s.shard) {
                drop(current.take());
                current = Some((s.shard, self.shards[s.shard].lock()));
            }
            let Some((_, shard)) = current.as_mut() else {
                continue;
            };
            if let Some(entry) = shard.map.get_mut(round.base(s)) {
                match total {
                    Some(total) => entry.apply(s.index, s.delta, *total, number),
                    None => entry.restore(s.index, s.delta),
                }
            }
        }
    }

    /// The script calls of `round`: per hash slot on a cluster and per TTL, at most
    /// [`EXCHANGE_CHUNK`] windows each.
    fn calls(&self, round: &Round) -> Vec<Call> {
        let cluster = self.redis.inner().link.is_cluster();
        let mut calls: Vec<Call> = Vec::new();
        // The open (not yet full) call of each slot and TTL: a cluster exchange spreads
        // thousands of keys over thousands of slots, so a scan of the calls per key was
        // quadratic. The last one used is tried first (on a standalone server with one
        // period, always the right one).
        let mut open: HashMap<(Option<Slot>, u64), usize, foldhash::fast::RandomState> =
            HashMap::default();
        let mut last: Option<((Option<Slot>, u64), usize)> = None;
        for (i, sent) in round.windows.iter().enumerate() {
            let group = (cluster.then(|| Slot::for_key(round.key(sent))), sent.ttl_ms);
            let found = match last {
                Some((g, c)) if g == group => Some(c),
                _ => open.get(&group).copied(),
            };
            let at = match found {
                Some(c) if calls[c].len() < EXCHANGE_CHUNK => c,
                _ => {
                    open.insert(group, calls.len());
                    calls.push(Call {
                        ttl_ms: sent.ttl_ms,
                        writes: Vec::new(),
                        reads: Vec::new(),
                    });
                    calls.len() - 1
                }
            };
            last = Some((group, at));
            let call = &mut calls[at];
            match sent.delta {
                0 => call.reads.push(i as u32),
                _ => call.writes.push(i as u32),
            }
        }
        calls
    }

    /// Runs the exchange script over `round`: the calls concurrent. Each window's total,
    /// `None` where its call failed, and the first error.
    async fn run(&self, round: &Round) -> (Vec<Option<u64>>, Option<StoreError>) {
        let calls = self.calls(round);
        let answers = join_all(calls.iter().map(|call| self.call(round, call))).await;
        let mut totals = vec![None; round.windows.len()];
        let mut error = None;
        for (call, answer) in calls.iter().zip(answers) {
            let parsed = answer.and_then(|reply| match reply {
                Value::BulkString(counts) => parse_counts(&counts, call.windows(), &mut totals),
                _ => Err(wrong_count()),
            });
            if let Err(e) = parsed {
                // A call answered in part: none of its counts is taken (its deltas are put
                // back, to be sent again).
                call.windows().for_each(|i| totals[i] = None);
                error.get_or_insert(e);
            }
        }
        (totals, error)
    }

    /// One exchange script call: `EVALSHA` built in one buffer sized up front, loading the
    /// script when Redis does not have it.
    async fn call(&self, round: &Round, call: &Call) -> Result<Value, StoreError> {
        let data: usize = call
            .windows()
            .map(|i| round.range(&round.windows[i]).len() + 8)
            .sum();
        let mut cmd = Cmd::with_capacity(5 + call.len() + call.writes.len(), data + 128);
        cmd.arg("EVALSHA")
            .arg(self.script.get_hash())
            .arg(call.len());
        for i in call.windows() {
            cmd.arg(round.key(&round.windows[i]));
        }
        cmd.arg(call.writes.len()).arg(call.ttl_ms);
        for &i in &call.writes {
            cmd.arg(round.windows[i as usize].delta);
        }
        let script = &self.script;
        self.redis
            .inner()
            .link
            .run(move |mut conn| async move {
                match cmd.query_async(&mut conn).await {
                    Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                        script.load_async(&mut conn).await?;
                        cmd.query_async(&mut conn).await
                    }
                    answer => answer,
                }
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(reply: &[u8], n: usize) -> Result<Vec<Option<u64>>, StoreError> {
        let mut totals = vec![None; n];
        parse_counts(reply, 0..n, &mut totals).map(|()| totals)
    }

    #[test]
    fn counts_are_read_in_order() {
        assert_eq!(
            parsed(b"7,0,123", 3).unwrap(),
            [Some(7), Some(0), Some(123)]
        );
        assert_eq!(parsed(b"42", 1).unwrap(), [Some(42)]);
    }

    #[test]
    fn a_wrong_number_of_counts_is_an_error() {
        assert!(parsed(b"1,2", 3).is_err());
        assert!(parsed(b"1,2,3,4", 3).is_err());
        assert!(parsed(b"1,", 1).is_err());
    }

    #[test]
    fn what_is_not_a_count_reads_as_zero_and_huge_counts_saturate() {
        assert_eq!(parsed(b"x,-3,1.5, 4", 4).unwrap(), [Some(0); 4]);
        assert_eq!(
            parsed(b"99999999999999999999999", 1).unwrap(),
            [Some(u64::MAX)]
        );
    }

    #[test]
    fn window_keys_name_the_period_and_the_index() {
        let mut out = b"x".to_vec();
        push_window_key(&mut out, b"p:{k}:w:fw", 60_000_000, 29_345_123);
        assert_eq!(out, b"xp:{k}:w:fw:sync:60000000:29345123");
        let mut out = Vec::new();
        push_window_key(&mut out, b"b", u64::MAX, 0);
        assert_eq!(out, format!("b:sync:{}:0", u64::MAX).as_bytes());
    }
}
