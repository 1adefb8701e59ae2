//! [`Scheduler`]: who gets the pool's next slot.
//!
//! # Rules
//! - **Slots.** At most `limit` requests run at once (the fixed `concurrency`, or the
//!   [`AdaptiveLimit`]'s current value). A request that finds a free slot runs at once;
//!   nobody ever waits while a slot is free.
//! - **Levels, shares and lending.** When a slot frees and requests are waiting, it goes to
//!   the waiting level with the fewest running requests per share (ties: more shares, then
//!   the level written first). So levels that all have work split the slots by their
//!   shares; a level with no work lends its share to the others; and the moment it has work
//!   again it is the furthest below its share, so it takes the next free slots back
//!   (running requests are never interrupted: "back" means within one service time).
//!   Between levels equally far below their shares (always the case with one slot), the
//!   one that has had the least service per share goes first.
//! - **Flows within a level** (the flow is the route's client key): start-time fair
//!   queuing. Each flow has a virtual tag, the service it has had divided by its `weight`;
//!   the next slot goes to the waiting flow with the smallest tag. A flow that starts
//!   waiting joins at the level's virtual time (the tag of the request started last), so
//!   idle time is not banked. Service is measured in time: a request is charged the
//!   level's mean service time when it starts, corrected by what it really held when it
//!   ends. A client with a hundred requests queued waits behind its own requests.
//! - **Bounded queue.** At most `queue` requests wait in the whole pool. When it is full, an
//!   arrival pushes out the newest waiting request of the flow with the most waiting (if
//!   that flow has at least two more waiting than the arrival's own flow); otherwise the
//!   arrival is refused. One heavy flow therefore cannot fill the queue against the others
//!   (this does per flow what shuffle sharding does per queue in Kubernetes APF, exactly).
//! - **Longest wait.** A request waiting `max_wait` is withdrawn ([`Scheduler::expire`] or
//!   [`Scheduler::withdraw`] with [`Withdraw::Timeout`]).
//! - **Memory** is bounded by `queue` + the limit: a flow is forgotten as soon as it has
//!   nothing waiting or running.

use std::collections::{BTreeSet, HashMap, VecDeque};
use std::sync::Arc;

use crate::spec::{Capacity, ValidPool};
use crate::{AdaptiveLimit, Micros};

/// Identifies one request from arrival to release.
pub type RequestId = u64;

/// Fixed-point scale of virtual tags: one µs of service at weight 1 is 1024 units.
const TAG_SCALE: u64 = 1024;
/// The service estimate before any request has ended (1 ms).
const INITIAL_ESTIMATE: Micros = 1_000;

/// What [`Scheduler::arrive`] decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Arrival {
    /// It holds a slot now; release it with [`Scheduler::release`].
    Admitted(RequestId),
    /// It waits; a later [`Released::admitted`] names it when its slot comes.
    Queued {
        /// The request.
        id: RequestId,
        /// A waiting request pushed out of the full queue to make room (refuse it).
        displaced: Option<RequestId>,
    },
    /// Refused at once.
    Rejected(Rejected),
}

/// Why a request was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Rejected {
    /// The queue was full (or the pool has no queue).
    QueueFull,
    /// It waited `max_wait`.
    Timeout,
}

/// Why a request leaves without being released normally.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Withdraw {
    /// Its `max_wait` passed.
    Timeout,
    /// Its client went away.
    Gone,
}

/// Requests that got a slot because others let go of theirs.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Released {
    /// Now running, in the order they were chosen.
    pub admitted: Vec<RequestId>,
}

/// One level's counters, for metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LevelStats {
    /// The level's name.
    pub name: Arc<str>,
    /// Its shares.
    pub shares: u32,
    /// Requests running now.
    pub running: u32,
    /// Requests waiting now.
    pub queued: usize,
    /// Requests that got a slot, ever.
    pub admitted: u64,
    /// Refused because the queue was full (including those pushed out).
    pub rejected_full: u64,
    /// Refused after waiting `max_wait`.
    pub rejected_timeout: u64,
    /// Left the queue because their client went away.
    pub cancelled: u64,
    /// Total time the admitted requests waited for their slot (0 for those admitted at
    /// once); `waited_micros / admitted` is the mean wait.
    pub waited_micros: u64,
}

#[derive(Debug)]
enum State {
    Queued { arrived: Micros, deadline: Micros },
    Running { started: Micros, charge: u64 },
}

#[derive(Debug)]
struct Request {
    level: usize,
    flow: Arc<str>,
    state: State,
}

#[derive(Debug)]
struct Flow {
    tag: u64,
    weight: u64,
    queue: VecDeque<RequestId>,
    running: u32,
    /// Its entry in the level's ready set while it has requests waiting.
    ready: Option<(u64, u64)>,
    seq: u64,
}

#[derive(Debug)]
struct Level {
    stats: LevelStats,
    /// Service this level has had per share (breaks ties between levels).
    tag: u64,
    vtime: u64,
    estimate: Micros,
    flows: HashMap<Arc<str>, Flow, foldhash::fast::RandomState>,
    ready: BTreeSet<(u64, u64, Arc<str>)>,
}

#[derive(Debug)]
enum Limit {
    Fixed(u32),
    Adaptive(AdaptiveLimit),
}

/// The pool's scheduler. Every method takes the time (`now`, µs from any fixed origin);
/// none reads a clock, sleeps or allocates without bound.
#[derive(Debug)]
pub struct Scheduler {
    limit: Limit,
    queue_cap: usize,
    max_wait: Micros,
    levels: Vec<Level>,
    running: u32,
    queued: usize,
    /// The tag of the level that started a request last.
    vtime: u64,
    next_id: RequestId,
    next_seq: u64,
    requests: HashMap<RequestId, Request, foldhash::fast::RandomState>,
    deadlines: BTreeSet<(Micros, RequestId)>,
}

impl Scheduler {
    /// A scheduler for a validated pool.
    pub fn new(pool: &ValidPool) -> Scheduler {
        let spec = pool.spec();
        let limit = match spec.capacity {
            Capacity::Fixed(n) => Limit::Fixed(n),
            Capacity::Adaptive { min, max } => Limit::Adaptive(AdaptiveLimit::new(min, max)),
        };
        let levels = spec
            .levels
            .iter()
            .map(|(name, shares)| Level {
                stats: LevelStats {
                    name: Arc::from(name.as_str()),
                    shares: *shares,
                    running: 0,
                    queued: 0,
                    admitted: 0,
                    rejected_full: 0,
                    rejected_timeout: 0,
                    cancelled: 0,
                    waited_micros: 0,
                },
                tag: 0,
                vtime: 0,
                estimate: INITIAL_ESTIMATE,
                flows: HashMap::default(),
                ready: BTreeSet::new(),
            })
            .collect();
        Scheduler {
            limit,
            queue_cap: spec.queue,
            max_wait: spec.max_wait,
            levels,
            running: 0,
            queued: 0,
            vtime: 0,
            next_id: 0,
            next_seq: 0,
            requests: HashMap::default(),
            deadlines: BTreeSet::new(),
        }
    }

    /// Requests may run at once now.
    pub fn limit(&self) -> u32 {
        match &self.limit {
            Limit::Fixed(n) => *n,
            Limit::Adaptive(a) => a.limit(),
        }
    }
    /// The adaptive state, when `concurrency = "adaptive"`.
    pub fn adaptive(&self) -> Option<&AdaptiveLimit> {
        match &self.limit {
            Limit::Fixed(_) => None,
            Limit::Adaptive(a) => Some(a),
        }
    }
    /// Requests running now.
    pub fn running(&self) -> u32 {
        self.running
    }
    /// Requests waiting now.
    pub fn queued(&self) -> usize {
        self.queued
    }
    /// `max_wait`.
    pub fn max_wait(&self) -> Micros {
        self.max_wait
    }
    /// Each level's counters, in configuration order.
    pub fn levels(&self) -> impl Iterator<Item = &LevelStats> {
        self.levels.iter().map(|l| &l.stats)
    }
    /// When a refused request might find room: the time for the queue ahead of it to drain
    /// at the current limit and mean service time, at most `max_wait`.
    pub fn retry_after(&self) -> Micros {
        let estimate = self.levels.iter().map(|l| l.estimate).max().unwrap_or(0);
        let ahead = (self.queued as u64).saturating_add(1);
        (ahead.saturating_mul(estimate) / u64::from(self.limit().max(1))).min(self.max_wait)
    }

    /// A request of `flow` (the route's client key) arrives at `level` (an index into the
    /// pool's levels; out of range means the last) with the route's `weight` (at least 1).
    pub fn arrive(&mut self, now: Micros, level: usize, flow: &str, weight: u32) -> Arrival {
        let level = level.min(self.levels.len() - 1);
        let weight = u64::from(weight.max(1));
        if self.running < self.limit() {
            // Nobody waits while a slot is free (every release dispatches), so no one is
            // passed over here.
            let id = self.new_id();
            let flow = self.flow_entry(level, flow, weight);
            self.start(now, id, level, flow);
            return Arrival::Admitted(id);
        }
        let mut displaced = None;
        if self.queued >= self.queue_cap {
            match self.push_out(level, flow) {
                Some(victim) => displaced = Some(victim),
                None => {
                    self.levels[level].stats.rejected_full += 1;
                    return Arrival::Rejected(Rejected::QueueFull);
                }
            }
        }
        let id = self.new_id();
        let name = self.flow_entry(level, flow, weight);
        let lvl = &mut self.levels[level];
        if lvl.stats.queued == 0 && lvl.stats.running == 0 {
            lvl.tag = lvl.tag.max(self.vtime);
        }
        let entry = lvl.flows.get_mut(&name).expect("flow just made");
        if entry.queue.is_empty() {
            entry.tag = entry.tag.max(lvl.vtime);
        }
        entry.queue.push_back(id);
        lvl.stats.queued += 1;
        self.queued += 1;
        let deadline = now.saturating_add(self.max_wait);
        self.deadlines.insert((deadline, id));
        self.requests.insert(
            id,
            Request {
                level,
                flow: Arc::clone(&name),
                state: State::Queued {
                    arrived: now,
                    deadline,
                },
            },
        );
        self.reready(level, &name);
        Arrival::Queued { id, displaced }
    }

    /// A running request's response ended: its slot goes to the next waiting request.
    /// Unknown or still-waiting ids change nothing.
    pub fn release(&mut self, id: RequestId, now: Micros) -> Released {
        self.finish(id, now, true)
    }

    /// A request leaves early. Waiting: it leaves the queue (`true`). Running (its client
    /// went away mid-response, or its admission raced its timeout): its slot is freed like
    /// a release, without a latency sample (`false`, and the caller holds no slot either).
    pub fn withdraw(&mut self, id: RequestId, now: Micros, why: Withdraw) -> (bool, Released) {
        match self.requests.get(&id).map(|r| &r.state) {
            Some(State::Queued { .. }) => {}
            Some(State::Running { .. }) => return (false, self.finish(id, now, false)),
            None => return (false, Released::default()),
        }
        let Some(request) = self.requests.remove(&id) else {
            return (false, Released::default());
        };
        self.unqueue(id, &request);
        let stats = &mut self.levels[request.level].stats;
        match why {
            Withdraw::Timeout => stats.rejected_timeout += 1,
            Withdraw::Gone => stats.cancelled += 1,
        }
        (true, Released::default())
    }

    /// Withdraws every request whose `max_wait` has passed at `now`; returns them.
    pub fn expire(&mut self, now: Micros) -> Vec<RequestId> {
        let mut out = Vec::new();
        while let Some(&(deadline, id)) = self.deadlines.first() {
            if deadline > now {
                break;
            }
            self.withdraw(id, now, Withdraw::Timeout);
            out.push(id);
        }
        out
    }

    /// When the earliest waiting request times out.
    pub fn next_deadline(&self) -> Option<Micros> {
        self.deadlines.first().map(|(d, _)| *d)
    }
    /// How long a waiting request has waited (`None` once it runs).
    pub fn waited(&self, id: RequestId, now: Micros) -> Option<Micros> {
        match self.requests.get(&id)?.state {
            State::Queued { arrived, .. } => Some(now.saturating_sub(arrived)),
            State::Running { .. } => None,
        }
    }
    /// The level index of a known request.
    pub fn level_of(&self, id: RequestId) -> Option<usize> {
        self.requests.get(&id).map(|r| r.level)
    }

    fn new_id(&mut self) -> RequestId {
        self.next_id += 1;
        self.next_id
    }

    /// The flow's entry (made at the level's virtual time when new), its weight updated.
    fn flow_entry(&mut self, level: usize, flow: &str, weight: u64) -> Arc<str> {
        let lvl = &mut self.levels[level];
        if let Some(name) = lvl.flows.get_key_value(flow).map(|(n, _)| Arc::clone(n)) {
            if let Some(entry) = lvl.flows.get_mut(&name) {
                entry.weight = weight;
            }
            return name;
        }
        self.next_seq += 1;
        let name: Arc<str> = Arc::from(flow);
        lvl.flows.insert(
            Arc::clone(&name),
            Flow {
                tag: lvl.vtime,
                weight,
                queue: VecDeque::new(),
                running: 0,
                ready: None,
                seq: self.next_seq,
            },
        );
        name
    }

    /// Starts `id` of `flow`: charges the flow the level's mean service time.
    fn start(&mut self, now: Micros, id: RequestId, level: usize, flow: Arc<str>) {
        let lvl = &mut self.levels[level];
        self.vtime = self.vtime.max(lvl.tag);
        lvl.tag = lvl
            .tag
            .max(self.vtime)
            .saturating_add(lvl.estimate.saturating_mul(TAG_SCALE) / u64::from(lvl.stats.shares));
        let entry = lvl.flows.get_mut(&flow).expect("flow exists");
        let charge = lvl.estimate.saturating_mul(TAG_SCALE) / entry.weight;
        lvl.vtime = lvl.vtime.max(entry.tag);
        entry.tag = entry.tag.max(lvl.vtime).saturating_add(charge);
        entry.running += 1;
        lvl.stats.running += 1;
        lvl.stats.admitted += 1;
        self.running += 1;
        let state = State::Running {
            started: now,
            charge,
        };
        self.requests.insert(id, Request { level, flow, state });
    }
}

impl Scheduler {
    /// Ends a running request: corrects its flow's tag by the service it really had, feeds
    /// the adaptive limit (`sample`), and hands the slot on.
    fn finish(&mut self, id: RequestId, now: Micros, sample: bool) -> Released {
        let Some(request) = self.requests.get(&id) else {
            return Released::default();
        };
        let State::Running { started, charge } = request.state else {
            return Released::default();
        };
        let request = self.requests.remove(&id).expect("present");
        let held = now.saturating_sub(started).max(1);
        let lvl = &mut self.levels[request.level];
        if let Some(entry) = lvl.flows.get_mut(&request.flow) {
            let actual = held.saturating_mul(TAG_SCALE) / entry.weight;
            entry.tag = if actual >= charge {
                entry.tag.saturating_add(actual - charge)
            } else {
                // Credit for a shorter service, but never ahead of the level's clock.
                (entry.tag - (charge - actual).min(entry.tag)).max(lvl.vtime)
            };
            entry.running -= 1;
        }
        // A mean over the last ~8 responses: quick to follow, steady enough to charge by.
        lvl.estimate = (lvl.estimate.saturating_mul(7).saturating_add(held) / 8).max(1);
        lvl.stats.running -= 1;
        self.running -= 1;
        self.reready(request.level, &request.flow);
        self.forget_if_idle(request.level, &request.flow);
        if sample {
            let saturated = self.queued > 0 || self.running + 1 >= self.limit();
            if let Limit::Adaptive(a) = &mut self.limit {
                a.sample(held, saturated);
            }
        }
        self.dispatch(now)
    }

    /// Fills free slots from the queue: level by shares, flow by tag, oldest request first.
    fn dispatch(&mut self, now: Micros) -> Released {
        let mut out = Released::default();
        while self.running < self.limit() && self.queued > 0 {
            let Some(level) = self.next_level() else {
                break;
            };
            let lvl = &mut self.levels[level];
            let Some((_, _, flow)) = lvl.ready.pop_first() else {
                break;
            };
            let entry = lvl.flows.get_mut(&flow).expect("ready flows exist");
            entry.ready = None;
            let Some(id) = entry.queue.pop_front() else {
                continue;
            };
            lvl.stats.queued -= 1;
            self.queued -= 1;
            if let Some(Request {
                state: State::Queued { deadline, arrived },
                ..
            }) = self.requests.remove(&id)
            {
                self.deadlines.remove(&(deadline, id));
                let waited = now.saturating_sub(arrived);
                let stats = &mut self.levels[level].stats;
                stats.waited_micros = stats.waited_micros.saturating_add(waited);
            }
            self.start(now, id, level, Arc::clone(&flow));
            self.reready(level, &flow);
            out.admitted.push(id);
        }
        out
    }

    /// The waiting level with the fewest running requests per share; among equals, the one
    /// that has had the least service per share (with one slot, every choice is a tie).
    fn next_level(&self) -> Option<usize> {
        let mut best: Option<usize> = None;
        for (i, l) in self.levels.iter().enumerate() {
            if l.stats.queued == 0 {
                continue;
            }
            best = match best {
                None => Some(i),
                Some(b) => {
                    let other = &self.levels[b];
                    let bl = &other.stats;
                    let mine = u64::from(l.stats.running) * u64::from(bl.shares);
                    let theirs = u64::from(bl.running) * u64::from(l.stats.shares);
                    let key =
                        |run: u64, tag: u64, shares: u32| (run, tag, std::cmp::Reverse(shares));
                    if key(mine, l.tag, l.stats.shares) < key(theirs, other.tag, bl.shares) {
                        Some(i)
                    } else {
                        Some(b)
                    }
                }
            };
        }
        best
    }

    /// Puts the flow in (or back in) its level's ready set at its current tag.
    fn reready(&mut self, level: usize, flow: &Arc<str>) {
        let lvl = &mut self.levels[level];
        let Some(entry) = lvl.flows.get_mut(flow) else {
            return;
        };
        if let Some((tag, seq)) = entry.ready.take() {
            lvl.ready.remove(&(tag, seq, Arc::clone(flow)));
        }
        if !entry.queue.is_empty() {
            entry.ready = Some((entry.tag, entry.seq));
            lvl.ready.insert((entry.tag, entry.seq, Arc::clone(flow)));
        }
    }

    fn forget_if_idle(&mut self, level: usize, flow: &Arc<str>) {
        let lvl = &mut self.levels[level];
        if lvl
            .flows
            .get(flow)
            .is_some_and(|f| f.queue.is_empty() && f.running == 0)
        {
            lvl.flows.remove(flow);
        }
    }

    /// Takes a waiting request out of its flow's queue and the deadline index.
    fn unqueue(&mut self, id: RequestId, request: &Request) {
        if let State::Queued { deadline, .. } = request.state {
            self.deadlines.remove(&(deadline, id));
        }
        let lvl = &mut self.levels[request.level];
        if let Some(entry) = lvl.flows.get_mut(&request.flow)
            && let Some(pos) = entry.queue.iter().position(|q| *q == id)
        {
            entry.queue.remove(pos);
            lvl.stats.queued -= 1;
            self.queued -= 1;
        }
        self.reready(request.level, &request.flow);
        self.forget_if_idle(request.level, &request.flow);
    }

    /// The queue is full: pushes out the newest waiting request of the flow with the most
    /// waiting, when it has at least two more than the arriving flow. Returns it.
    fn push_out(&mut self, level: usize, flow: &str) -> Option<RequestId> {
        let own = self.levels[level]
            .flows
            .get(flow)
            .map_or(0, |f| f.queue.len());
        let (victim_level, victim_flow, len) = self
            .levels
            .iter()
            .enumerate()
            .flat_map(|(i, l)| l.flows.iter().map(move |(n, f)| (i, n, f.queue.len())))
            .max_by_key(|(_, _, len)| *len)
            .map(|(i, n, len)| (i, Arc::clone(n), len))?;
        if len < own + 2 {
            return None;
        }
        let id = *self.levels[victim_level].flows[&victim_flow].queue.back()?;
        let request = self.requests.remove(&id)?;
        self.unqueue(id, &request);
        self.levels[victim_level].stats.rejected_full += 1;
        Some(id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::PoolSpec;

    #[test]
    fn waits_are_summed_per_level_for_admitted_requests_only() {
        let spec = PoolSpec::fixed("p", 1).validate().unwrap();
        let mut pool = Scheduler::new(&spec);
        let Arrival::Admitted(a) = pool.arrive(0, 0, "a", 1) else {
            panic!()
        };
        let Arrival::Queued { id: b, .. } = pool.arrive(100, 0, "b", 1) else {
            panic!()
        };
        let Arrival::Queued { id: c, .. } = pool.arrive(200, 0, "c", 1) else {
            panic!()
        };
        // c's client goes away after 300 µs: not an admission, so not a wait.
        assert!(pool.withdraw(c, 500, Withdraw::Gone).0);
        assert_eq!(pool.release(a, 1_000).admitted, vec![b]);
        let stats = pool.levels().next().unwrap().clone();
        assert_eq!((stats.admitted, stats.waited_micros), (2, 900));
        assert_eq!(stats.cancelled, 1);
    }
}
