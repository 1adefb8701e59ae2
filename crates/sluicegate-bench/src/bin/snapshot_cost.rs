//! What `store.snapshot` costs at a million keys: the longest time one shard's lock is held
//! while its states are copied (the longest a decision on that shard can wait), the whole
//! write (file and fsync included), and the slowest decision a concurrent thread saw
//! during the write against the same thread's slowest in as long without one (the
//! machine's own noise). Also the restore. Run: `cargo run --release -p sluicegate-bench
//! --bin snapshot_cost [keys]`; record `uptime` beside the figures.

use std::io::Write;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use sluicegate_core::{AlgorithmKind, CheckRequest, MemoryStore, Policy};

fn slowest_decision(
    store: &MemoryStore,
    policies: &[Arc<Policy>],
    keys: usize,
    stop: &AtomicBool,
) -> (Duration, u64) {
    let mut slowest = Duration::ZERO;
    let mut n = 0u64;
    let mut i = 0usize;
    while !stop.load(Ordering::Relaxed) {
        i = (i + 7919) % keys;
        let key = format!("client-{i:08}");
        let started = Instant::now();
        let _ = store.check_now(CheckRequest::new(policies, &key, 1));
        slowest = slowest.max(started.elapsed());
        n += 1;
    }
    (slowest, n)
}

/// Writes `store`'s snapshot to `path` (fsynced): what was written, how long each shard's
/// copy held its lock, and the whole write's time.
fn write_snapshot(
    store: &MemoryStore,
    path: &std::path::Path,
) -> (
    sluicegate_core::memory::SnapshotInfo,
    Vec<Duration>,
    Duration,
) {
    let started = Instant::now();
    let mut file = std::io::BufWriter::new(std::fs::File::create(path).expect("create"));
    let mut writer = store.snapshot_writer(&mut file).expect("header");
    let mut holds = Vec::new();
    loop {
        let copying = Instant::now();
        let Some(block) = writer.copy_next() else {
            break;
        };
        holds.push(copying.elapsed());
        writer.write(&block).expect("write");
    }
    let info = writer.finish().expect("finish");
    file.flush().expect("flush");
    file.into_inner()
        .expect("buffer")
        .sync_all()
        .expect("fsync");
    (info, holds, started.elapsed())
}

fn main() {
    let keys: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(1_000_000);
    let policy = Arc::new(
        Policy::builder(
            "daily",
            AlgorithmKind::Gcra,
            100,
            Duration::from_secs(86_400),
        )
        .build()
        .expect("policy"),
    );
    let policies = [Arc::clone(&policy)];
    let store = Arc::new(MemoryStore::new(keys + keys / 2));
    for i in 0..keys {
        let key = format!("client-{i:08}");
        let _ = store.check_now(CheckRequest::new(&policies, &key, 1));
    }
    println!("keys tracked: {}", store.len());
    let dir = std::env::temp_dir().join(format!("sluicegate-snapshot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).expect("temp dir");
    let path = dir.join("state.bin");

    // The machine's noise: the decider alone for as long as a write takes (measured first).
    let mut rounds = Vec::new();
    for _ in 0..3 {
        let stop = Arc::new(AtomicBool::new(false));
        let decider = {
            let (store, stop, policies) = (Arc::clone(&store), Arc::clone(&stop), policies.clone());
            std::thread::spawn(move || slowest_decision(&store, &policies, keys, &stop))
        };
        let (info, mut holds, total) = write_snapshot(&store, &path);
        let longest = holds.iter().copied().max().unwrap_or_default();
        stop.store(true, Ordering::Relaxed);
        let (during, n) = decider.join().expect("decider");

        let stop = Arc::new(AtomicBool::new(false));
        let quiet = {
            let (store, stop, policies) = (Arc::clone(&store), Arc::clone(&stop), policies.clone());
            std::thread::spawn(move || slowest_decision(&store, &policies, keys, &stop))
        };
        std::thread::sleep(total);
        stop.store(true, Ordering::Relaxed);
        let (alone, m) = quiet.join().expect("decider");
        holds.sort();
        let median = holds[holds.len() / 2];
        rounds.push(format!(
            "states {} bytes {} | shards {} | lock hold: longest {:?}, median {:?} | write total {:?} | slowest decision during write {:?} ({n} decisions), without a write {:?} ({m})",
            info.states, info.bytes, holds.len(), longest, median, total, during, alone
        ));
    }
    for r in &rounds {
        println!("{r}");
    }
    let bytes = std::fs::read(&path).expect("read");
    let mut fresh = MemoryStore::new(keys + keys / 2);
    let started = Instant::now();
    let info = fresh.restore(&bytes).expect("restore");
    println!("restore: {} states in {:?}", info.states, started.elapsed());
    let _ = std::fs::remove_dir_all(&dir);
}
