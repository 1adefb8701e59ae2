//! `store.snapshot`: writing the memory store's state to a file atomically (a temporary
//! file beside it, fsync, rename, fsync of the directory) every `snapshot_interval` and on
//! shutdown, and reading it back at start. A missing, foreign, truncated or corrupt file is
//! logged and the server starts empty.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, Instant};

use sluicegate_core::MemoryStore;
use tokio::sync::watch;

/// What one write did, for the log and the benchmark.
#[derive(Debug, Clone, Copy)]
pub struct Written {
    /// States written.
    pub states: u64,
    /// Bytes of the file.
    pub bytes: u64,
    /// The longest any shard's lock was held (copying that shard's states).
    pub longest_lock: Duration,
    /// The whole write, file and fsyncs included.
    pub total: Duration,
}

/// Writes `memory`'s snapshot to `path` atomically.
pub fn write(memory: &MemoryStore, path: &Path) -> std::io::Result<Written> {
    let started = Instant::now();
    let temp = temp_path(path);
    let file = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode_private()
        .open(&temp)?;
    let mut out = std::io::BufWriter::new(file);
    let mut writer = memory.snapshot_writer(&mut out)?;
    let mut longest_lock = Duration::ZERO;
    loop {
        let copying = Instant::now();
        let Some(block) = writer.copy_next() else {
            break;
        };
        longest_lock = longest_lock.max(copying.elapsed());
        writer.write(&block)?;
    }
    let info = writer.finish()?;
    out.flush()?;
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    drop(file);
    std::fs::rename(&temp, path)?;
    // The rename itself must reach the disk before the write counts as done.
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::File::open(dir)?.sync_all()?;
    }
    Ok(Written {
        states: info.states,
        bytes: info.bytes,
        longest_lock,
        total: started.elapsed(),
    })
}

/// `<file>.tmp` beside the snapshot, on the same file system so the rename is atomic.
fn temp_path(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".tmp");
    path.with_file_name(name)
}

/// Owner-only permissions: the file holds the key of the store's key hash.
trait PrivateMode {
    fn mode_private(&mut self) -> &mut Self;
}

impl PrivateMode for std::fs::OpenOptions {
    #[cfg(unix)]
    fn mode_private(&mut self) -> &mut Self {
        use std::os::unix::fs::OpenOptionsExt;
        self.mode(0o600)
    }
    #[cfg(not(unix))]
    fn mode_private(&mut self) -> &mut Self {
        self
    }
}

/// A new memory store, with the snapshot at `path` restored into it when there is a
/// readable one; what happened is logged.
pub fn restore(
    mut memory: MemoryStore,
    path: &Path,
    fresh: impl Fn() -> MemoryStore,
) -> MemoryStore {
    let bytes = match std::fs::read(path) {
        Ok(bytes) => bytes,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            tracing::info!(path = %path.display(), "no snapshot yet; starting empty");
            return memory;
        }
        Err(e) => {
            tracing::error!(path = %path.display(), error = %e, "snapshot not readable; starting empty");
            return memory;
        }
    };
    match memory.restore(&bytes) {
        Ok(info) => {
            tracing::info!(path = %path.display(), states = info.states, bytes = info.bytes, "snapshot restored");
            memory
        }
        Err(e) => {
            tracing::error!(path = %path.display(), error = %e, "snapshot not restored: {e}; starting empty");
            fresh()
        }
    }
}

/// Writes the snapshot every `interval` until `stop`, off the async threads.
pub fn spawn(
    memory: Arc<MemoryStore>,
    path: PathBuf,
    interval: Duration,
    stop: watch::Receiver<bool>,
) {
    tokio::spawn(async move {
        let stopped = crate::serve::stopped(stop);
        tokio::pin!(stopped);
        let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                () = &mut stopped => break,
                _ = ticks.tick() => write_logged(Arc::clone(&memory), path.clone(), false).await,
            }
        }
    });
}

/// Writes the snapshot on a blocking thread and logs the outcome (`info` on shutdown,
/// `debug` for the periodic ones).
pub async fn write_logged(memory: Arc<MemoryStore>, path: PathBuf, last: bool) {
    let shown = path.clone();
    match tokio::task::spawn_blocking(move || write(&memory, &path)).await {
        Ok(Ok(w)) if last => {
            tracing::info!(path = %shown.display(), states = w.states, bytes = w.bytes, longest_lock_us = w.longest_lock.as_micros() as u64, total_ms = w.total.as_millis() as u64, "snapshot written")
        }
        Ok(Ok(w)) => {
            tracing::debug!(path = %shown.display(), states = w.states, longest_lock_us = w.longest_lock.as_micros() as u64, "snapshot written")
        }
        Ok(Err(e)) => tracing::error!(path = %shown.display(), error = %e, "snapshot not written"),
        Err(e) => tracing::error!(error = %e, "snapshot task failed"),
    }
}
