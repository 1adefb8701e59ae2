//! KeyedLimiter (gcra, token_bucket) against governor's keyed GCRA, on the same random key
//! sets (1k, 100k, 1M keys), single thread and two threads, plus bytes per tracked key.
//!
//! Run: `cargo bench -p sluicegate-core --bench keyed -- --warm-up-time 1 --measurement-time 3`
//! (method and results: docs/benchmarks/core.md).
//!
//! - Every limiter allows a burst far larger than any key sees here (10^9, refilled at one
//!   an hour): every check is admitted and every state stays live, so both sides do the
//!   full admit path and neither evicts nor expires anything.
//! - Keys: `n` random 64-bit ids. The access sequence is a precomputed list of ids; the
//!   string-keyed limiters (ours, and governor with `String` keys) get the id formatted as
//!   `client-<16 hex digits>` into a reused buffer, as a server has its key in hand;
//!   governor with `u64` keys gets the id itself (its best case).
//! - Time: governor reads its default clock (quanta, the TSC) in every check; ours is given
//!   `now` by the caller, so each of our checks reads the same quanta clock and converts it
//!   to µs since the epoch.
//! - Besides criterion's groups (wall time), `ab_interleaved` runs all four side by side in
//!   rotating rounds and reports thread CPU time per check, which on a shared, loaded
//!   machine is far steadier than wall time.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::RefCell;
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::sync::{Arc, Once};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use governor::{Quota, RateLimiter};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluicegate_core::algorithm::{Algorithm, Gcra, Quota as Q, TokenBucket};
use sluicegate_core::clock::{Clock, Micros};
use sluicegate_core::memory::KeyedLimiter;
use sluicegate_core::{AlgorithmKind, CheckRequest, MemoryStore, Policy};

/// Counts live heap bytes, to measure memory per tracked key.
struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(
            new_size as isize - layout.size() as isize,
            Ordering::Relaxed,
        );
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

const SIZES: [usize; 3] = [1_000, 100_000, 1_000_000];
/// Length of the precomputed random access sequence (a power of two).
const ORDER: usize = 1 << 20;
const BURST: u32 = 1_000_000_000;

/// A key set: its ids, and a random access sequence over them.
struct Keys {
    ids: Vec<u64>,
    order: Vec<u64>,
}

impl Keys {
    fn new(n: usize) -> Self {
        let mut rng = StdRng::seed_from_u64(n as u64);
        let ids: Vec<u64> = (0..n).map(|_| rng.random()).collect();
        let order = (0..ORDER).map(|_| ids[rng.random_range(0..n)]).collect();
        Keys { ids, order }
    }
}

/// `client-<16 hex digits>`, written into `buf`.
#[inline]
fn key_text(id: u64, buf: &mut [u8; 23]) -> &str {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    buf[..7].copy_from_slice(b"client-");
    for i in 0..16 {
        buf[7 + i] = HEX[((id >> (60 - 4 * i)) & 15) as usize];
    }
    // SAFETY: every byte written above is ASCII.
    unsafe { std::str::from_utf8_unchecked(buf) }
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
trait Subject: Sync {
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

/// Our limiter, with the TSC clock governor uses, read per check.
struct Ours<A: Algorithm> {
    limiter: KeyedLimiter<A>,
    clock: quanta::Clock,
    start: quanta::Instant,
}

impl<A: Algorithm + From<Q>> Ours<A> {
    fn new(kind: AlgorithmKind) -> Self {
        let policy = policy(kind);
        let clock = quanta::Clock::new();
        Ours {
            // Room for every key of the largest set: like governor, hold them all.
            limiter: KeyedLimiter::with_max_keys(A::from(Q::from(&policy)), policy, 2_000_000),
            start: clock.now(),
            clock,
        }
    }
}

impl<A: Algorithm> Subject for Ours<A> {
    #[inline]
    fn check_id(&self, id: u64) -> bool {
        let now: Micros = 1_700_000_000_000_000
            + self.clock.now().duration_since(self.start).as_micros() as Micros;
        let mut buf = [0u8; 23];
        self.limiter.check(key_text(id, &mut buf), now, 1).allowed
    }

    fn len(&self) -> usize {
        self.limiter.len()
    }
}

/// The TSC clock (quanta, as governor uses) as a store clock, in µs since the epoch.
struct Tsc {
    clock: quanta::Clock,
    start: quanta::Instant,
}

impl Clock for Tsc {
    fn now(&self) -> Micros {
        1_700_000_000_000_000 + self.clock.now().duration_since(self.start).as_micros() as Micros
    }
}

/// The whole `MemoryStore` path (policy lookup, verdict), one gcra policy, on the TSC clock.
struct Store {
    store: MemoryStore<Tsc>,
    policies: [Arc<Policy>; 1],
}

impl Store {
    fn new() -> Self {
        let clock = quanta::Clock::new();
        let tsc = Tsc {
            start: clock.now(),
            clock,
        };
        Store {
            store: MemoryStore::with_clock(2_000_000, tsc),
            policies: [Arc::new(policy(AlgorithmKind::Gcra))],
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

type Make = fn() -> Box<dyn Subject>;

/// The subjects, built lazily: a filtered-out benchmark never builds (nor fills) its own.
const SUBJECTS: [(&str, Make); 5] = [
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
];

/// Builds a subject and checks every key once, so it holds the whole key set.
fn build(make: Make, keys: &Keys) -> Box<dyn Subject> {
    let subject = make();
    for &id in &keys.ids {
        assert!(subject.check_id(id), "the bench quota admits everything");
    }
    subject
}

fn single_thread(c: &mut Criterion) {
    for n in SIZES {
        let keys = Keys::new(n);
        let mut group = c.benchmark_group(format!("check_1thread/{n}"));
        group.throughput(Throughput::Elements(1));
        for (name, make) in SUBJECTS {
            let mut subject = None;
            let mut i = 0usize;
            group.bench_function(BenchmarkId::from_parameter(name), |b| {
                let subject = subject.get_or_insert_with(|| build(make, &keys));
                b.iter(|| {
                    i = i.wrapping_add(1);
                    black_box(subject.check(&keys, i))
                })
            });
        }
        group.finish();
    }
}

fn two_threads(c: &mut Criterion) {
    for n in SIZES {
        let keys = Keys::new(n);
        let mut group = c.benchmark_group(format!("check_2threads/{n}"));
        // One iteration is one check on each thread.
        group.throughput(Throughput::Elements(2));
        for (name, make) in SUBJECTS {
            let mut subject = None;
            group.bench_function(BenchmarkId::from_parameter(name), |b| {
                let subject: &dyn Subject = &**subject.get_or_insert_with(|| build(make, &keys));
                let keys = &keys;
                b.iter_custom(|iters| {
                    let start = Instant::now();
                    std::thread::scope(|s| {
                        for t in 0..2usize {
                            s.spawn(move || {
                                let offset = t * (ORDER / 2);
                                for i in 0..iters as usize {
                                    black_box(subject.check(keys, offset + i));
                                }
                            });
                        }
                    });
                    start.elapsed()
                })
            });
        }
        group.finish();
    }
}

/// Live heap bytes per tracked key after checking each of 1M keys once, printed
/// (criterion measures time only). Keys a limiter copies (governor's `String` keys) count.
fn memory(c: &mut Criterion) {
    static ONCE: Once = Once::new();
    // A benchmark id of its own, so that a filter can leave this (slow) step out.
    c.bench_function("memory_per_key_1M", |b| {
        // Criterion calls this closure many times; the report runs once.
        ONCE.call_once(report_memory);
        b.iter(|| ())
    });
}

fn report_memory() {
    let keys = Keys::new(1_000_000);
    for (name, make) in SUBJECTS {
        let before = LIVE.load(Ordering::Relaxed);
        let subject = build(make, &keys);
        let bytes = LIVE.load(Ordering::Relaxed) - before;
        let tracked = subject.len();
        println!(
            "memory/{name}: {tracked} keys, {bytes} bytes, {:.1} bytes per key",
            bytes as f64 / tracked as f64
        );
    }
}

/// Rounds of the interleaved comparison, and checks per subject per round (per thread).
const ROUNDS: usize = 21;
const CHECKS: usize = 50_000;

/// Side by side in one loop: each round runs every subject for `CHECKS` checks, in a
/// rotating order, so that load from other processes hits all of them alike; per subject
/// the median CPU time a check, and the median of the per-round ratios. Printed, with its
/// own benchmark id so a filter can leave it out.
fn interleaved(c: &mut Criterion) {
    static ONCE: Once = Once::new();
    c.bench_function("ab_interleaved", |b| {
        ONCE.call_once(report_interleaved);
        b.iter(|| ())
    });
}

/// CPU time of the calling thread: unlike wall time, it leaves out the time other
/// processes hold the CPU.
fn thread_cpu() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// CPU ns a check over `CHECKS` checks on each of `threads` threads.
fn timed(subject: &dyn Subject, keys: &Keys, threads: usize, offset: usize) -> f64 {
    let run = |base: usize| {
        let start = thread_cpu();
        for i in 0..CHECKS {
            black_box(subject.check(keys, base + i));
        }
        thread_cpu() - start
    };
    let cpu: Duration = if threads == 1 {
        run(offset)
    } else {
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|t| s.spawn(move || run(offset + t * (ORDER / threads))))
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().expect("bench thread"))
                .sum()
        })
    };
    cpu.as_nanos() as f64 / (CHECKS * threads) as f64
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn report_interleaved() {
    for n in SIZES {
        let keys = Keys::new(n);
        let subjects: Vec<Box<dyn Subject>> = SUBJECTS
            .iter()
            .map(|(_, make)| build(*make, &keys))
            .collect();
        for threads in [1, 2] {
            let mut ns: Vec<Vec<f64>> = vec![Vec::new(); SUBJECTS.len()];
            for round in 0..ROUNDS {
                for j in 0..SUBJECTS.len() {
                    let k = (j + round) % SUBJECTS.len();
                    ns[k].push(timed(subjects[k].as_ref(), &keys, threads, round * CHECKS));
                }
            }
            let ratio = |ours: usize, theirs: usize| {
                median((0..ROUNDS).map(|r| ns[theirs][r] / ns[ours][r]).collect())
            };
            for (k, (name, _)) in SUBJECTS.iter().enumerate() {
                let line = format!(
                    "ab/{n}/{threads}thread/{name}: median {:.1} CPU ns a check",
                    median(ns[k].clone())
                );
                if k < 2 || k == 4 {
                    println!(
                        "{line}; throughput vs governor_string {:.2}x, vs governor_u64 {:.2}x",
                        ratio(k, 2),
                        ratio(k, 3)
                    );
                } else {
                    println!("{line}");
                }
            }
        }
    }
}

criterion_group!(benches, memory, interleaved, single_thread, two_threads);
criterion_main!(benches);
