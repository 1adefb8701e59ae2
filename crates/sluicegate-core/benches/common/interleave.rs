//! The interleaved comparison both keyed benchmarks print (`keyed.rs`, `keyed_u64.rs`):
//! every subject side by side in one loop, each round running every subject for `CHECKS`
//! checks in a rotating order, so that load from other processes hits all of them alike;
//! per subject the median CPU time a check, and the median of the per-round ratios to each
//! peer. Thread CPU time, not wall time: it leaves out the time other processes hold the
//! CPU, which on a shared, loaded machine is far steadier.

use std::hint::black_box;
use std::time::Duration;

use super::{Keys, Make, ORDER, Subject, build};

/// Key set sizes compared.
pub const SIZES: [usize; 3] = [1_000, 100_000, 1_000_000];
/// Rounds of the interleaved comparison, and checks per subject per round (per thread).
const ROUNDS: usize = 21;
const CHECKS: usize = 50_000;

/// CPU time of the calling thread.
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

/// Prints `<tag>/<keys>/<threads>thread/<subject>: median <ns> CPU ns a check`, and for
/// our subjects (`sluicegate*`) `; throughput vs <peer> <r>x, …` for each of `peers`
/// (indices into `subjects`). `scripts/bench-core.sh` reads these lines.
pub fn report(tag: &str, subjects: &[(&str, Make)], peers: &[usize]) {
    for n in SIZES {
        let keys = Keys::new(n);
        let built: Vec<Box<dyn Subject>> = subjects
            .iter()
            .map(|(_, make)| build(*make, &keys))
            .collect();
        for threads in [1, 2] {
            let mut ns: Vec<Vec<f64>> = vec![Vec::new(); subjects.len()];
            for round in 0..ROUNDS {
                for j in 0..subjects.len() {
                    let k = (j + round) % subjects.len();
                    ns[k].push(timed(built[k].as_ref(), &keys, threads, round * CHECKS));
                }
            }
            let ratio = |ours: usize, theirs: usize| {
                median((0..ROUNDS).map(|r| ns[theirs][r] / ns[ours][r]).collect())
            };
            for (k, (name, _)) in subjects.iter().enumerate() {
                let mut line = format!(
                    "{tag}/{n}/{threads}thread/{name}: median {:.1} CPU ns a check",
                    median(ns[k].clone())
                );
                if name.starts_with("sluicegate") {
                    let against: Vec<String> = peers
                        .iter()
                        .map(|&p| format!("vs {} {:.2}x", subjects[p].0, ratio(k, p)))
                        .collect();
                    line = format!("{line}; throughput {}", against.join(", "));
                }
                println!("{line}");
            }
        }
    }
}
