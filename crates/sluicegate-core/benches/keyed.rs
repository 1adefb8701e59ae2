//! KeyedLimiter (gcra, token_bucket) against governor's keyed GCRA, on the same random key
//! sets (1k, 100k, 1M keys), single thread and two threads, plus bytes per tracked key.
//!
//! Run: `cargo bench -p sluicegate-core --bench keyed -- --warm-up-time 1 --measurement-time 3`
//! (method and results: docs/benchmarks/core.md).
//!
//! Every limiter allows a burst far larger than any key sees here (10^9, refilled at one an
//! hour), so every check is admitted and every state stays live: both sides do the full
//! admit path and neither evicts nor expires anything.
//!
//! Time: governor reads its default clock (quanta, the TSC) in every check; ours is given
//! `now` by the caller, so each of our checks reads the same quanta clock and converts it
//! to µs since the epoch. (On this machine `SystemTime::now()` costs about 90 ns, more
//! than a whole check: callers that read the wall clock per check pay for it, see the doc.)

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};
use governor::{Quota, RateLimiter};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sluicegate_core::algorithm::{Algorithm, Gcra, Quota as Q, TokenBucket};
use sluicegate_core::clock::Micros;
use sluicegate_core::memory::KeyedLimiter;
use sluicegate_core::{AlgorithmKind, Policy};

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

struct Keys {
    strings: Vec<String>,
    ints: Vec<u64>,
    /// Random indices into the key set: the access sequence, shared by every limiter.
    order: Vec<u32>,
}

impl Keys {
    fn new(n: usize) -> Self {
        let mut rng = StdRng::seed_from_u64(n as u64);
        let ints: Vec<u64> = (0..n).map(|_| rng.random()).collect();
        let strings = ints.iter().map(|k| format!("client-{k:016x}")).collect();
        let order = (0..ORDER).map(|_| rng.random_range(0..n as u32)).collect();
        Keys {
            strings,
            ints,
            order,
        }
    }
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

/// The limiters under test, behind one interface: check the key at index `k`.
trait Subject: Sync {
    fn check_key(&self, keys: &Keys, k: usize) -> bool;

    /// Keys tracked.
    fn len(&self) -> usize;

    /// The `i`-th check of the shared random access sequence.
    #[inline]
    fn check(&self, keys: &Keys, i: usize) -> bool {
        self.check_key(keys, keys.order[i % ORDER] as usize)
    }
}

/// Our limiter with the TSC clock governor uses, read per check.
struct Ours<A: Algorithm> {
    limiter: KeyedLimiter<A>,
    clock: quanta::Clock,
    start: quanta::Instant,
    epoch: Micros,
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
            epoch: 1_700_000_000_000_000,
        }
    }

    #[inline]
    fn now(&self) -> Micros {
        self.epoch + self.clock.now().duration_since(self.start).as_micros() as Micros
    }
}

impl<A: Algorithm + From<Q>> Subject for Ours<A> {
    #[inline]
    fn check_key(&self, keys: &Keys, k: usize) -> bool {
        let now = self.now();
        self.limiter.check(&keys.strings[k], now, 1).allowed
    }

    fn len(&self) -> usize {
        self.limiter.len()
    }
}

struct GovString(governor::DefaultKeyedRateLimiter<String>);
struct GovU64(governor::DefaultKeyedRateLimiter<u64>);

impl Subject for GovString {
    #[inline]
    fn check_key(&self, keys: &Keys, k: usize) -> bool {
        self.0.check_key(&keys.strings[k]).is_ok()
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

impl Subject for GovU64 {
    #[inline]
    fn check_key(&self, keys: &Keys, k: usize) -> bool {
        self.0.check_key(&keys.ints[k]).is_ok()
    }

    fn len(&self) -> usize {
        self.0.len()
    }
}

/// Checks every key once, so the measurement sees a limiter holding the whole key set.
fn fill(subject: &dyn Subject, keys: &Keys) {
    for k in 0..keys.strings.len() {
        assert!(
            subject.check_key(keys, k),
            "the bench quota admits everything"
        );
    }
}

type Make = fn() -> Box<dyn Subject>;

/// The subjects, built lazily: a filtered-out benchmark never builds (nor fills) its own.
const SUBJECTS: [(&str, Make); 4] = [
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
];

fn build(make: Make, keys: &Keys) -> Box<dyn Subject> {
    let subject = make();
    fill(subject.as_ref(), keys);
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
/// (criterion measures time only). Keys held by the caller are not counted; keys a limiter
/// copies (governor's `String` keys) are.
fn memory(c: &mut Criterion) {
    // A benchmark id of its own, so that a filter can leave this (slow) step out.
    c.bench_function("memory_per_key_1M", |b| {
        report_memory();
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

criterion_group!(benches, memory, single_thread, two_threads);
criterion_main!(benches);
