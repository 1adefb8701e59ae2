//! KeyedLimiter (gcra, token_bucket) against governor's keyed GCRA, on the same random key
//! sets (1k, 100k, 1M keys), single thread and two threads, plus bytes per tracked key.
//!
//! Run: `cargo bench -p sluicegate-core --bench keyed -- --warm-up-time 1 --measurement-time 3`
//! (method and results: docs/benchmarks/core.md).
//!
//! The subjects, key sets and clock are in `common/mod.rs` (shared with the callgrind probe,
//! `keyed_probe.rs`). Besides criterion's groups (wall time), `ab_interleaved` runs them all
//! side by side in rotating rounds and reports thread CPU time per check, which on a
//! shared, loaded machine is far steadier than wall time.

mod common;

use std::alloc::{GlobalAlloc, Layout, System};
use std::hint::black_box;
use std::sync::Once;
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Instant;

use common::{
    GOVERNOR_STRING, GOVERNOR_U64, HARNESS, Keys, ORDER, SUBJECTS, Subject, build, interleave,
};
use criterion::{BenchmarkId, Criterion, Throughput, criterion_group, criterion_main};

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
    for (name, make) in SUBJECTS.iter().take(HARNESS) {
        let before = LIVE.load(Ordering::Relaxed);
        let subject = build(*make, &keys);
        let bytes = LIVE.load(Ordering::Relaxed) - before;
        let tracked = subject.len();
        println!(
            "memory/{name}: {tracked} keys, {bytes} bytes, {:.1} bytes per key",
            bytes as f64 / tracked as f64
        );
    }
}

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

fn report_interleaved() {
    interleave::report("ab", &SUBJECTS, &[GOVERNOR_STRING, GOVERNOR_U64]);
}

fn check_harness(_: &mut Criterion) {
    common::check_key_text();
}

criterion_group!(
    benches,
    check_harness,
    memory,
    interleaved,
    single_thread,
    two_threads
);
criterion_main!(benches);
