//! What the keyed benchmarks share (`keyed.rs`, the criterion and interleaved comparison;
//! `keyed_probe.rs`, the callgrind instruction counts): the key sets, the limiters under
//! test behind one [`Subject`] interface, and how each is built and filled.
//!
//! - Every limiter allows a burst far larger than any key sees here (10^9, refilled at one
//!   an hour): every check is admitted and every state stays live, so both sides do the
//!   full admit path and neither evicts nor expires anything.
//! - Keys: `n` random 64-bit ids. The access sequence is a precomputed list of ids; the
//!   string-keyed limiters (ours, and governor with `String` keys) get the id formatted as
//!   `client-<16 hex digits>` into a stack buffer, as a server has its key in hand;
//!   governor with `u64` keys gets the id itself (its best case), and so does ours as
//!   `sluicegate_gcra_u64` (`KeyedLimiter` keyed by `u64`: like for like, [`LIKE_FOR_LIKE`],
//!   measured in its own binary, `keyed_u64.rs`).
//! - Time: governor reads its default clock (quanta, the TSC) in every check; ours is given
//!   `now` by the caller (`KeyedLimiter`) or asks its `Clock` (`MemoryStore`), so each of
//!   our checks reads the same quanta clock and converts it to µs since the epoch.

#![allow(dead_code)] // each bench uses a part

pub mod interleave;

use std::cell::RefCell;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use governor::{Quota, RateLimiter};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluicegate_core::algorithm::{Algorithm, Gcra, Quota as Q, TokenBucket};
use sluicegate_core::clock::{Clock, Micros};
use sluicegate_core::memory::KeyedLimiter;
use sluicegate_core::{AlgorithmKind, CheckRequest, MemoryStore, Policy};

/// Length of the precomputed random access sequence (a power of two).
pub const ORDER: usize = 1 << 20;
const BURST: u32 = 1_000_000_000;

/// A key set: its ids, and a random access sequence over them.
pub struct Keys {
    pub ids: Vec<u64>,
    pub order: Vec<u64>,
}

impl Keys {
    pub fn new(n: usize) -> Self {
        let mut rng = StdRng::seed_from_u64(n as u64);
        let ids: Vec<u64> = (0..n).map(|_| rng.random()).collect();
        let order = (0..ORDER).map(|_| ids[rng.random_range(0..n)]).collect();
        Keys { ids, order }
    }
}

/// `client-<16 hex digits>`, written into `buf` without a loop or a table (the same for
/// every string-keyed subject: the harness's share of a check, kept small).
#[inline]
pub fn key_text(id: u64, buf: &mut [u8; 23]) -> &str {
    buf[..7].copy_from_slice(b"client-");
    buf[7..15].copy_from_slice(&hex8((id >> 32) as u32));
    buf[15..23].copy_from_slice(&hex8(id as u32));
    // SAFETY: every byte written above is ASCII.
    unsafe { std::str::from_utf8_unchecked(buf) }
}

/// Eight lowercase hex digits of `word`, most significant first (SWAR: each nibble spread
/// into a byte, then mapped to '0'..='9' or 'a'..='f' with no branch).
#[inline]
fn hex8(word: u32) -> [u8; 8] {
    let x = u64::from(word);
    let x = (x | (x << 16)) & 0x0000_ffff_0000_ffff;
    let x = (x | (x << 8)) & 0x00ff_00ff_00ff_00ff;
    // Byte k now holds nibble k (least significant first).
    let x = (x | (x << 4)) & 0x0f0f_0f0f_0f0f_0f0f;
    let letters = ((x + 0x0606_0606_0606_0606) >> 4) & 0x0101_0101_0101_0101;
    let ascii = x + 0x3030_3030_3030_3030 + letters * (u64::from(b'a' - b'0') - 10);
    // The most significant nibble goes first in memory.
    ascii.swap_bytes().to_le_bytes()
}

fn policy(kind: AlgorithmKind) -> Policy {
    Policy::builder("bench", kind, 1, Duration::from_secs(3600))
        .burst(u64::from(BURST))
        .build()
        .expect("valid policy")
}

fn quota() -> Quota {
    Quota::per_hour(NonZeroU32::MIN).allow_burst(NonZeroU32::new(BURST).expect("non-zero"))
}

/// The limiters under test, behind one interface.
pub trait Subject: Sync {
    /// Checks one request of the key with this id.
    fn check_id(&self, id: u64) -> bool;

    /// Keys tracked.
    fn len(&self) -> usize;

    /// The `i`-th check of the shared random access sequence.
    #[inline]
    fn check(&self, keys: &Keys, i: usize) -> bool {
        self.check_id(keys.order[i % ORDER])
    }
}

/// The TSC clock in µs since the epoch, read exactly as governor's default clock reads it
/// (`QuantaClock::now`: `raw()`, then `delta_as_nanos(0, raw)`), plus a division by 1000.
/// (Going through `quanta::Instant` and `Duration::as_micros` instead costs ~5 ns more a
/// check than governor pays, which the first runs of this bench charged to ours.)
pub struct Tsc {
    clock: quanta::Clock,
}

impl Tsc {
    fn new() -> Self {
        Tsc {
            clock: quanta::Clock::new(),
        }
    }
}

impl Clock for Tsc {
    #[inline]
    fn now(&self) -> Micros {
        let nanos = self.clock.delta_as_nanos(0, self.clock.raw());
        1_700_000_000_000_000 + nanos / 1000
    }
}

/// Our limiter, with the TSC clock governor uses, read per check.
struct Ours<A: Algorithm> {
    limiter: KeyedLimiter<A>,
    clock: Tsc,
}

impl<A: Algorithm + From<Q>> Ours<A> {
    fn new(kind: AlgorithmKind) -> Self {
        let policy = policy(kind);
        Ours {
            // Room for every key of the largest set: like governor, hold them all.
            limiter: KeyedLimiter::with_max_keys(A::from(Q::from(&policy)), policy, 2_000_000),
            clock: Tsc::new(),
        }
    }
}

impl<A: Algorithm> Subject for Ours<A> {
    #[inline]
    fn check_id(&self, id: u64) -> bool {
        let mut buf = [0u8; 23];
        let key = key_text(id, &mut buf);
        self.limiter.check(key, self.clock.now(), 1).allowed
    }

    fn len(&self) -> usize {
        self.limiter.len()
    }
}

/// [`Ours`] keyed by the id itself, like governor `u64`: no formatting, 8 bytes hashed
/// (a caller whose clients are numbered, or addressed, gives the limiter that key).
struct OursU64<A: Algorithm>(Ours<A>);

impl<A: Algorithm> Subject for OursU64<A> {
    #[inline]
    fn check_id(&self, id: u64) -> bool {
        self.0.limiter.check(&id, self.0.clock.now(), 1).allowed
    }

    fn len(&self) -> usize {
        self.0.limiter.len()
    }
}

/// The whole `MemoryStore` path (what the server calls: policy lookup, shard, a verdict
/// that owns its policy), one gcra policy, on the TSC clock.
struct Store {
    store: MemoryStore<Tsc>,
    policies: [Arc<Policy>; 1],
}

impl Store {
    fn new() -> Self {
        Self::of(AlgorithmKind::Gcra)
    }

    fn of(kind: AlgorithmKind) -> Self {
        Store {
            store: MemoryStore::with_clock(2_000_000, Tsc::new()),
            policies: [Arc::new(policy(kind))],
        }
    }
}

impl Subject for Store {
    #[inline]
    fn check_id(&self, id: u64) -> bool {
        let mut buf = [0u8; 23];
        let request = CheckRequest::new(&self.policies, key_text(id, &mut buf), 1);
        self.store.check_now(request).is_ok_and(|v| v.allowed)
    }

    fn len(&self) -> usize {
        self.store.len()
    }
}

/// [`Store`] through `check_borrowed`: the verdict refers to the policy instead of
/// cloning its `Arc` (what a caller that reads the verdict before its policies go pays).
struct StoreBorrowed(Store);

impl Subject for StoreBorrowed {
    #[inline]
    fn check_id(&self, id: u64) -> bool {
        let mut buf = [0u8; 23];
        let request = CheckRequest::new(&self.0.policies, key_text(id, &mut buf), 1);
        self.0
            .store
            .check_borrowed(request)
            .is_ok_and(|v| v.allowed)
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// [`Store`] keyed by eight bytes taken straight from the id, each made ASCII: no
/// formatting, a key as short as governor `u64`'s (SipHash-1-3 of 8 bytes is one
/// compression round fewer than of 23). Not what a server holds: the floor of the store
/// path itself, for callgrind only (`PROBE_ONLY`; docs/benchmarks/core.md, tenth pass).
struct StoreEightBytes(Store);

impl Subject for StoreEightBytes {
    #[inline]
    fn check_id(&self, id: u64) -> bool {
        let bytes = (id & 0x7f7f_7f7f_7f7f_7f7f | 0x0101_0101_0101_0101).to_le_bytes();
        // SAFETY: every byte is below 0x80 (the mask above): ASCII, so UTF-8.
        let key = unsafe { std::str::from_utf8_unchecked(&bytes) };
        let request = CheckRequest::new(&self.0.policies, key, 1);
        self.0.store.check_now(request).is_ok_and(|v| v.allowed)
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// The general path: two token-bucket policies on one key (all-or-nothing), as
/// `probe_store_check` of the sluicegate-bench callgrind probe has it.
struct Store2 {
    store: MemoryStore<Tsc>,
    policies: [Arc<Policy>; 2],
}

impl Store2 {
    fn new() -> Self {
        let named = |name: &str| {
            Policy::builder(
                name,
                AlgorithmKind::TokenBucket,
                1,
                Duration::from_secs(3600),
            )
            .burst(u64::from(BURST))
            .build()
            .expect("valid policy")
        };
        Store2 {
            store: MemoryStore::with_clock(4_000_000, Tsc::new()),
            policies: [Arc::new(named("api")), Arc::new(named("day"))],
        }
    }
}

impl Subject for Store2 {
    #[inline]
    fn check_id(&self, id: u64) -> bool {
        let mut buf = [0u8; 23];
        let request = CheckRequest::new(&self.policies, key_text(id, &mut buf), 1);
        self.store.check_now(request).is_ok_and(|v| v.allowed)
    }

    fn len(&self) -> usize {
        self.store.len() / 2
    }
}

struct GovString(governor::DefaultKeyedRateLimiter<String>);
struct GovU64(governor::DefaultKeyedRateLimiter<u64>);

thread_local! {
    /// governor looks `String` keys up by `&String`: one reused buffer per thread.
    static KEY: RefCell<String> = RefCell::new(String::with_capacity(32));
}

impl Subject for GovString {
    #[inline]
    fn check_id(&self, id: u64) -> bool {
        KEY.with_borrow_mut(|key| {
            let mut buf = [0u8; 23];
            key.clear();
            key.push_str(key_text(id, &mut buf));
            self.0.check_key(key).is_ok()
        })
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

impl Subject for GovU64 {
    #[inline]
    fn check_id(&self, id: u64) -> bool {
        self.0.check_key(&id).is_ok()
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// What the harness itself costs a string-keyed check (formatting the key, reading the
/// clock), for reference: no limiter.
struct Harness(Tsc);

impl Subject for Harness {
    #[inline]
    fn check_id(&self, id: u64) -> bool {
        let mut buf = [0u8; 23];
        let key = key_text(id, &mut buf);
        std::hint::black_box((key, self.0.now()));
        true
    }

    fn len(&self) -> usize {
        0
    }
}

pub type Make = fn() -> Box<dyn Subject>;

/// Indices into [`SUBJECTS`] of the two governor peers.
pub const GOVERNOR_STRING: usize = 2;
pub const GOVERNOR_U64: usize = 3;
/// Index of the harness-only reference.
pub const HARNESS: usize = 5;

/// The subjects, built lazily: a filtered-out benchmark never builds (nor fills) its own.
pub const SUBJECTS: [(&str, Make); 8] = [
    ("sluicegate_gcra", || {
        Box::new(Ours::<Gcra>::new(AlgorithmKind::Gcra))
    }),
    ("sluicegate_token_bucket", || {
        Box::new(Ours::<TokenBucket>::new(AlgorithmKind::TokenBucket))
    }),
    ("governor_string", || {
        Box::new(GovString(RateLimiter::keyed(quota())))
    }),
    ("governor_u64", || {
        Box::new(GovU64(RateLimiter::keyed(quota())))
    }),
    ("sluicegate_store_gcra", || Box::new(Store::new())),
    ("harness_only", || Box::new(Harness(Tsc::new()))),
    ("sluicegate_store_2_token_buckets", || {
        Box::new(Store2::new())
    }),
    ("sluicegate_store_borrowed_gcra", || {
        Box::new(StoreBorrowed(Store::new()))
    }),
];

/// The like-for-like pair (`u64` keys on both sides), in a binary of its own
/// (`keyed_u64.rs`: why there), governor first.
pub const LIKE_FOR_LIKE: [(&str, Make); 2] = [
    ("governor_u64", || {
        Box::new(GovU64(RateLimiter::keyed(quota())))
    }),
    ("sluicegate_gcra_u64", || {
        Box::new(OursU64(Ours::<Gcra>::new(AlgorithmKind::Gcra)))
    }),
];

/// Subjects counted by the callgrind probe only (`keyed_probe`), not timed: the store
/// keyed by 8 bytes bounds what a row could reach; the token bucket is the store path of
/// the contract's default algorithm (~215 instructions over gcra's, nearly all in the
/// algorithm's own arithmetic: taking it inline like gcra measured 25 more, not fewer;
/// docs/benchmarks/core.md, tenth pass).
pub const PROBE_ONLY: [(&str, Make); 2] = [
    ("sluicegate_store_gcra_8_bytes", || {
        Box::new(StoreEightBytes(Store::new()))
    }),
    ("sluicegate_store_token_bucket", || {
        Box::new(Store::of(AlgorithmKind::TokenBucket))
    }),
];

/// Builds a subject and checks every key once, so it holds the whole key set.
pub fn build(make: Make, keys: &Keys) -> Box<dyn Subject> {
    let subject = make();
    for &id in &keys.ids {
        assert!(subject.check_id(id), "the bench quota admits everything");
    }
    subject
}

/// The harness's key formatting is what it says (benches have no test harness: each
/// bench's `main` calls this first).
pub fn check_key_text() {
    let mut buf = [0u8; 23];
    assert_eq!(
        key_text(0x0123_4567_89ab_cdef, &mut buf),
        "client-0123456789abcdef"
    );
    assert_eq!(key_text(u64::MAX, &mut buf), "client-ffffffffffffffff");
    assert_eq!(key_text(0xa0, &mut buf), "client-00000000000000a0");
}
