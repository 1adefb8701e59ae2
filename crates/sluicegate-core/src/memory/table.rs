//! One policy's keyed state: sharded maps behind mutexes.

use std::collections::HashMap;
use std::hash::{BuildHasher, Hash, Hasher};

use parking_lot::{Mutex, MutexGuard};

use crate::algorithm::Algorithm;
use crate::clock::Micros;
use crate::decision::Decision;
use crate::policy::Policy;

const SHARDS: usize = 64;

/// The keyed state of one policy, object-safe so the store can hold any algorithm.
pub trait PolicyTable: Send + Sync {
    /// Locks the key's shard and decides; the lock is held until the result is dropped, so
    /// a multi-policy check sees and changes every policy's state atomically.
    fn prepare<'a>(
        &'a self,
        key: &str,
        now: Micros,
        cost: u64,
        max_delay: Option<Micros>,
    ) -> Box<dyn Prepared + 'a>;
    /// Gives back `cost`.
    fn refund(&self, key: &str, now: Micros, cost: u64);
    /// Forgets `key`.
    fn remove(&self, key: &str);
    /// Keys tracked.
    fn len(&self) -> usize;
}

/// A decision with its shard still locked.
pub trait Prepared {
    /// The decision.
    fn decision(&self) -> Decision;
    /// Applies it (consumes `cost`).
    fn commit(self: Box<Self>);
}

/// One policy's limiter over many keys.
pub struct KeyedLimiter<A: Algorithm> {
    algorithm: A,
    policy: Policy,
    hasher: foldhash::fast::RandomState,
    shards: Vec<Mutex<HashMap<Box<str>, A::State>>>,
}

impl<A: Algorithm> KeyedLimiter<A> {
    /// A limiter running `algorithm` for `policy`.
    pub fn new(algorithm: A, policy: Policy) -> Self {
        KeyedLimiter {
            algorithm,
            policy,
            hasher: foldhash::fast::RandomState::default(),
            shards: (0..SHARDS).map(|_| Mutex::new(HashMap::new())).collect(),
        }
    }

    fn shard(&self, key: &str) -> &Mutex<HashMap<Box<str>, A::State>> {
        let mut h = self.hasher.build_hasher();
        key.hash(&mut h);
        &self.shards[(h.finish() as usize) % SHARDS]
    }

    /// Decides and consumes for one key.
    pub fn check(&self, key: &str, now: Micros, cost: u64) -> Decision {
        let mut shard = self.shard(key).lock();
        let state = shard.entry(key.into()).or_default();
        let decision = self
            .algorithm
            .evaluate(state, now, cost, self.policy.delay_budget());
        if decision.allowed {
            self.algorithm.consume(state, now, cost);
        }
        decision
    }
}

struct PreparedCheck<'a, A: Algorithm> {
    guard: MutexGuard<'a, HashMap<Box<str>, A::State>>,
    algorithm: &'a A,
    key: Box<str>,
    now: Micros,
    cost: u64,
    decision: Decision,
}

impl<A: Algorithm> Prepared for PreparedCheck<'_, A> {
    fn decision(&self) -> Decision {
        self.decision
    }
    fn commit(mut self: Box<Self>) {
        if self.cost == 0 {
            return;
        }
        let state = self.guard.entry(self.key.clone()).or_default();
        self.algorithm.consume(state, self.now, self.cost);
    }
}

impl<A: Algorithm> PolicyTable for KeyedLimiter<A> {
    fn prepare<'a>(
        &'a self,
        key: &str,
        now: Micros,
        cost: u64,
        max_delay: Option<Micros>,
    ) -> Box<dyn Prepared + 'a> {
        let guard = self.shard(key).lock();
        let fresh = A::State::default();
        let decision =
            self.algorithm
                .evaluate(guard.get(key).unwrap_or(&fresh), now, cost, max_delay);
        Box::new(PreparedCheck {
            guard,
            algorithm: &self.algorithm,
            key: key.into(),
            now,
            cost,
            decision,
        })
    }

    fn refund(&self, key: &str, now: Micros, cost: u64) {
        if let Some(state) = self.shard(key).lock().get_mut(key) {
            self.algorithm.refund(state, now, cost);
        }
    }

    fn remove(&self, key: &str) {
        self.shard(key).lock().remove(key);
    }

    fn len(&self) -> usize {
        self.shards.iter().map(|s| s.lock().len()).sum()
    }
}
